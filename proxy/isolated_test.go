package proxy

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/proxy/forward"
	"github.com/skewgate/skewgate/proxy/route"
)

// TestIsolated: what APF's default FlowSchemas exempt or isolate is never
// held at skewgate's bound; a tenant's requests are.
func TestIsolated(t *testing.T) {
	tenant := &user.DefaultInfo{Name: "tenant", Groups: []string{user.AllAuthenticated}}
	cases := []struct {
		name         string
		method, path string
		user         user.Info
		want         bool
	}{
		{"system:masters, anything", "DELETE", "/api/v1/namespaces/default/configmaps/x", &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}, true},
		{"a node lists pods", "GET", "/api/v1/pods", &user.DefaultInfo{Name: "system:node:node-b", Groups: []string{user.NodesGroup, user.AllAuthenticated}}, true},
		{"a node renews its lease", "PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-b", &user.DefaultInfo{Name: "system:node:node-b", Groups: []string{user.NodesGroup}}, true},
		{"kube-controller-manager lists", "GET", "/apis/apps/v1/deployments", &user.DefaultInfo{Name: user.KubeControllerManager}, true},
		{"kube-scheduler binds", "POST", "/api/v1/namespaces/default/pods/p/binding", &user.DefaultInfo{Name: user.KubeScheduler}, true},
		{"a kube-system service account", "GET", "/api/v1/namespaces/kube-system/configmaps", &user.DefaultInfo{Name: "system:serviceaccount:kube-system:coredns", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system"}}, true},
		{"another namespace's service account", "GET", "/api/v1/configmaps", &user.DefaultInfo{Name: "system:serviceaccount:tenant:app", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:tenant"}}, false},
		{"a service account named like kube-system's", "GET", "/api/v1/configmaps", &user.DefaultInfo{Name: "system:serviceaccount:kube-system-x:app"}, false},
		{"anyone's lease renewal", "PUT", "/apis/coordination.k8s.io/v1/namespaces/tenant/leases/operator", tenant, true},
		{"anyone's lease read", "GET", "/apis/coordination.k8s.io/v1/namespaces/tenant/leases/operator", nil, true},
		{"a tenant lists leases", "GET", "/apis/coordination.k8s.io/v1/leases", tenant, false},
		{"a lease of another group", "PUT", "/apis/example.com/v1/namespaces/tenant/leases/x", tenant, false},
		{"readyz, anonymous", "GET", "/readyz", nil, true},
		{"livez", "GET", "/livez", tenant, true},
		{"healthz", "GET", "/healthz", tenant, true},
		{"readyz's checks are not APF's probes", "GET", "/readyz/etcd", nil, false},
		{"a probe path posted", "POST", "/healthz", nil, false},
		{"a tenant lists", "GET", "/api/v1/configmaps", tenant, false},
		{"a tenant writes", "POST", "/api/v1/namespaces/default/configmaps", tenant, false},
		{"a tenant in a group named like the nodes'", "GET", "/api/v1/pods", &user.DefaultInfo{Name: "x", Groups: []string{"system:nodes-x"}}, false},
		{"nobody known", "GET", "/api/v1/configmaps", nil, false},
	}
	c := route.NewClassifier()
	for _, tc := range cases {
		req, err := c.Classify(httptest.NewRequest(tc.method, "https://node-a:6443"+tc.path, nil))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := isolated(req, tc.user); got != tc.want {
			t.Errorf("%s (%s %s): isolated = %t, want %t", tc.name, tc.method, tc.path, got, tc.want)
		}
	}
}

// At a full bound skewgate answers its own 429 (counted) only to what APF
// does not isolate; the rest goes on to the apiserver, whose APF decides
// whether it waits. A token is reviewed at the bound, not below it.
func TestBoundHoldsOnlyWhatAPFDoesNotIsolate(t *testing.T) {
	rig := newIdentityRig(t)
	local := rig.members.Backends([]string{rig.members.LocalID()})[0]
	local.LimitInFlight(1)
	rig.runMembers(t)
	sign := func(cn string, orgs ...string) []tls.Certificate {
		cert, key, err := rig.ca.Sign(lab.Leaf{CN: cn, Orgs: orgs})
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}}
	}
	tenant, node := sign("tenant"), sign("system:node:node-b", "system:nodes")
	throttled := func() float64 {
		var m dto.Metric
		rig.handler.metrics.throttled.WithLabelValues(local.ID).Write(&m)
		return m.GetCounter().GetValue()
	}
	const list = "GET /api/v1/namespaces/default/configmaps HTTP/1.1\nHost: 127.0.0.1\n"

	// Below the bound a token's request costs no review.
	reviews := rig.reviews.Load()
	rig.sendWith(t, nil, list+"Authorization: Bearer good\n\n")
	if n := rig.reviews.Load() - reviews; n != 0 {
		t.Errorf("below the bound a token's request made %d reviews, want 0", n)
	}

	// The tenant's upload holds the one slot: its body never ends.
	hold, err := tls.Dial("tcp", rig.addr, &tls.Config{Certificates: tenant, RootCAs: rig.roots, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	io.WriteString(hold, "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _ := rig.sendWith(t, tenant, list+"\n"); code == http.StatusTooManyRequests {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slot was never taken")
		}
		time.Sleep(20 * time.Millisecond)
	}

	before, reviews := throttled(), rig.reviews.Load()
	for _, tc := range []struct {
		name  string
		certs []tls.Certificate
		raw   string
		want  int
	}{
		{"the tenant lists", tenant, list + "\n", http.StatusTooManyRequests},
		{"the tenant probes readyz", tenant, "GET /readyz HTTP/1.1\nHost: 127.0.0.1\n\n", http.StatusOK},
		{"the tenant renews its lease", tenant, "PUT /apis/coordination.k8s.io/v1/namespaces/tenant/leases/op HTTP/1.1\nHost: 127.0.0.1\nContent-Length: 2\n\n{}", http.StatusOK},
		{"a node lists", node, list + "\n", http.StatusOK},
		{"system:masters lists", []tls.Certificate{rig.client}, list + "\n", http.StatusOK},
		{"a kube-system service account's token lists", nil, list + "Authorization: Bearer good\n\n", http.StatusOK},
		{"a token no apiserver accepts", nil, list + "Authorization: Bearer bad\n\n", http.StatusUnauthorized},
		{"a token no apiserver could judge (its review got 429)", nil, list + "Authorization: Bearer busy\n\n", http.StatusTooManyRequests},
		{"nobody lists", nil, list + "\n", http.StatusTooManyRequests},
	} {
		code, hdr := rig.sendWith(t, tc.certs, tc.raw)
		if code != tc.want {
			t.Errorf("%s at the bound: %d (from %q), want %d", tc.name, code, hdr.Get(forward.HeaderServer), tc.want)
		}
	}
	if n := throttled() - before; n != 2 {
		t.Errorf("skewgate_requests_throttled_total rose by %.0f, want 2 (the tenant's list, nobody's; a review's 429 is the apiserver's)", n)
	}
	if n := rig.reviews.Load() - reviews; n != 3 {
		t.Errorf("%d reviews at the bound, want 3 (one per token)", n)
	}
}
