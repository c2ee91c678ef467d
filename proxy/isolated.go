package proxy

import (
	"net/http"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/skewgate/skewgate/proxy/forward"
	"github.com/skewgate/skewgate/proxy/route"
)

// isolated reports whether API Priority and Fairness keeps req, sent by u
// (nil: no user skewgate knows), apart from every tenant's load: its
// default FlowSchemas (k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap,
// default.go) send it to the exempt level or to one of the levels that
// exist so that node heartbeats, leader election and the control plane's
// own components are never queued behind a flood:
//
//   - "exempt": group system:masters, anything;
//   - "probes" (exempt level): GET /healthz, /readyz, /livez, anyone;
//   - "system-nodes", "system-node-high": group system:nodes, anything;
//   - "system-leader-election": leases (coordination.k8s.io) get, create,
//     update by kube-controller-manager, kube-scheduler and kube-system's
//     service accounts;
//   - "kube-controller-manager", "kube-scheduler",
//     "kube-system-service-accounts" (workload-high): those users, anything.
//
// Any other caller's single-Lease reads and writes are isolated too: a
// lease is renewed on a deadline, and a renewal skewgate refuses is a
// leadership or a node's heartbeat lost for what is only skewgate's own
// bound; the apiserver, whose APF classifies the request, decides whether
// it waits.
//
// A bound skewgate keeps (--local-max-requests-inflight, a peer's) never
// holds such a request: it goes on without a slot, as it would reach the
// apiserver without skewgate. The user is the one skewgate authenticated
// (or an apiserver's review of the token named), never an Impersonate-*
// header, which only the apiserver authorizes.
func isolated(req route.Request, u user.Info) bool {
	if probe(req) || leaseOne(req) {
		return true
	}
	if u == nil {
		return false
	}
	groups := u.GetGroups()
	switch name := u.GetName(); {
	case slices.Contains(groups, user.SystemPrivilegedGroup), slices.Contains(groups, user.NodesGroup):
		return true
	case name == user.KubeControllerManager, name == user.KubeScheduler:
		return true
	case strings.HasPrefix(name, serviceaccount.ServiceAccountUsernamePrefix+metav1.NamespaceSystem+":"):
		return true
	}
	return false
}

// probe: APF's "probes" FlowSchema, exact paths, GET only.
func probe(req route.Request) bool {
	if req.Kind != route.Other || req.Verb != "get" {
		return false
	}
	switch req.Path {
	case "/healthz", "/readyz", "/livez":
		return true
	}
	return false
}

// leaseOne is a read or write of one Lease (coordination.k8s.io): what a
// leader or a kubelet renews.
func leaseOne(req route.Request) bool {
	if req.Kind != route.Resource || req.GVR.Group != "coordination.k8s.io" || req.GVR.Resource != "leases" || req.Subresource != "" {
		return false
	}
	switch req.Verb {
	case "get", "create", "update", "patch":
		return true
	}
	return false
}

// overflow decides x's request when its server has no slot left: one APF
// isolates goes on without a slot; any other gets skewgate's 429, once
// the caller may hear skewgate's own answers (mayTell). A bearer token is
// reviewed only here, at the bound (below it a token costs no review), and
// once: a token no apiserver accepts or could judge is answered as
// reviewToken answers it.
func (h *Handler) overflow(x *exchange) func(http.ResponseWriter, *http.Request, string) bool {
	return func(w http.ResponseWriter, r *http.Request, server string) bool {
		if x.bearer() && !h.reviewToken(w, r, x) {
			return false
		}
		u := x.caller.User
		if x.reviewed != nil {
			u = x.reviewed.User
		}
		if isolated(x.req, u) {
			return true
		}
		if h.mayTell(w, r, x) {
			return h.throttle(w, r, server)
		}
		return false
	}
}

// throttle answers skewgate's own 429 for server's bound and counts it
// (skewgate_requests_throttled_total); it never sends the request on.
func (h *Handler) throttle(w http.ResponseWriter, r *http.Request, server string) bool {
	h.metrics.throttled.WithLabelValues(server).Inc()
	forward.TooMany(w, r, server)
	return false
}
