package drill

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/skewgate/skewgate/lab"
)

// writeKubeadmIntro says what the drill on the kubeadm lab did; kept:
// no kubelet of To was built, the nodes kept From's.
func writeKubeadmIntro(w io.Writer, o Options, command string, kept bool) {
	writtenBy(w, o, command)
	p := o.pair
	kubelet := fmt.Sprintf("and after each node's control plane its kubelet (cordon, the %s kubelet, restart, uncordon)", p.To)
	if kept {
		kubelet = fmt.Sprintf("each node keeping its %s kubelet (kubeadm's skew policy allows a kubelet three minors older; a %s kubelet "+
			"cannot be built from the Go module proxy, which refuses a module it imports)", p.From, p.To)
	}
	fmt.Fprintf(w, "The plane is built and upgraded by kubeadm itself ([kubeadm-lab.md](kubeadm-lab.md)): three control-plane nodes, `kubeadm init` on node-a and "+
		"`kubeadm join --control-plane` on node-b and node-c at %s, stacked etcd%s, every component a static pod run by the node's kubelet, "+
		"a `controlPlaneEndpoint` VIP on node-a. The upgrade is the one of kubeadm's documentation: %s`kubeadm upgrade apply %s` on node-a, "+
		"`kubeadm upgrade node` on node-b and node-c (kubeadm %s swapped in as its package would be), %s. The rollback is the operator's after a failed upgrade, node-c first: the static-pod manifests and the "+
		"kubelet configuration kubeadm backed up (`/etc/kubernetes/tmp/kubeadm-backup-manifests-*`, `kubeadm-kubelet-config-*`) put back with the runbook's commands, then the %s kubelet, "+
		"then — where skewgate runs — the node's skewgate pod deleted and replaced by the DaemonSet inside the rollback's grace. "+
		"Each phase lasts as long as its step took (a steady phase %s). "+
		"A load balancer spreads the workload's connections over the nodes whose `/readyz` passes: informers (list + watch) on configmaps, "+
		"%s (%s), "+
		"creates/updates/deletes, lists and gets, discovery refreshes as kubectl does them; one **pinned client per node** on that node's own address "+
		"on one kept connection. The cluster's own **kube-controller-manager and kube-scheduler** (static pods of each node's version, %s) "+
		"run throughout: their requests are not in the counts below, what their garbage collector and "+
		"namespace controller do is (*What users lose*). skewgate runs as users run it: the DaemonSet of `deploy/kubernetes` on kubeadm's PKI.\n\n",
		p.From, etcdVersions(p), configEdit(p), p.To, p.To, kubelet, p.From, o.Steady, p.newTypes(), p.onlyTo(), controllerManagersReach(o))
}

// etcdVersions says which etcd each side's kubeadm deploys, the one the
// lab built for it (lab.KubeadmEtcdVersion: kubeadm's own constant), and
// that the upgrade moves etcd when they differ ("" if unknown).
func etcdVersions(p Pair) string {
	from, err := lab.KubeadmEtcdVersion(context.Background(), p.From)
	if err != nil {
		return ""
	}
	to, err := lab.KubeadmEtcdVersion(context.Background(), p.To)
	if err != nil {
		return ""
	}
	if from == to {
		return fmt.Sprintf(" (etcd %s, the one kubeadm deploys at both versions)", from)
	}
	return fmt.Sprintf(" (etcd %s, the one kubeadm %s deploys; kubeadm %s deploys %s, its upgrade moves each node's member to it, "+
		"and the rollback leaves it there: [runbook.md](runbook.md), the etcd caveat)", from, p.From, p.To, to)
}

// configEdit is what the operator adds to kubeadm's ClusterConfiguration
// before `kubeadm upgrade apply`, for To to serve the pair's new types.
func configEdit(p Pair) string {
	if p.DefaultAPIs {
		return ""
	}
	return p.Config + " added to `apiServer.extraArgs` of the `kubeadm-config` ClusterConfiguration, "
}

// controllerManagersReach says how the controller-managers reach the
// apiservers.
func controllerManagersReach(o Options) string {
	if o.ControllerManagerLB {
		return fmt.Sprintf("the **controller-managers through an L4 load balancer** over the three nodes (`controller-manager.conf` pointed at it "+
			"before the drill, `tls-server-name: %s`; each connection to the next node whose `/readyz` passes), the schedulers through "+
			"their node's own address as kubeadm's kubeconfigs name it", kcmLBServerName)
	}
	return "through the node's own address as kubeadm's kubeconfigs name it"
}

// writeLosses is the table of what each mode lost, where it was counted.
func writeLosses(w io.Writer, o Options, results []*Result) {
	p := o.pair
	var any bool
	for _, r := range results {
		any = any || r.Loss != nil
	}
	if !any {
		return
	}
	kind, gv := p.Owned.Kind, p.Owned.GVR.GroupVersion()
	fmt.Fprintf(w, "\n## What users lose\n\nThroughout the drill the workload creates, every 2 s, a `%s` %s in `%s` and a ConfigMap it owns "+
		"(an `ownerReference` with the %s's uid; each attempt on a new connection through the load balancer, retried on up to two more, "+
		"as a user retries a create; outside the window no server serves %s and nothing is created), and every 8 s a namespace holding such a pair "+
		"and a ConfigMap, deleted at once and left to the real namespace controller. After the drill, and after a settle time for the controllers, "+
		"etcd's keys are read directly (the rolled-back plane serves no %s): **dependents deleted by the garbage collector although their owner exists** "+
		"(the ConfigMap is gone, its %s is in etcd: the garbage collector got a 404 for the owner), **namespaces stuck terminating** (a deleted namespace "+
		"that still exists), **objects orphaned** (keys in etcd of a namespace that no longer exists: the namespace controller finished without deleting them, "+
		"so nothing will).%s\n\n", gv, kind, gcNamespace, kind, p.Owned.GVR.Resource, p.Owned.GVR.Resource, kind, p.OwnerLifetime)
	fmt.Fprintf(w, "| mode | owned pairs created | dependents deleted by the GC, owner present | namespaces deleted | stuck terminating | objects orphaned | settle |\n|---|---|---|---|---|---|---|\n")
	lost := false
	for _, r := range results {
		l := r.Loss
		if l == nil {
			continue
		}
		if l.Err != "" {
			fmt.Fprintf(w, "| %s | not counted: %s | | | | | |\n", r.Mode, strings.ReplaceAll(l.Err, "|", `\|`))
			continue
		}
		lost = lost || len(l.GCDeleted) > 0 || len(l.Stuck) > 0 || l.OrphanCount() > 0
		fmt.Fprintf(w, "| %s | %d | **%d** | %d | **%d** | **%d** %s | %s |\n", r.Mode, l.Pairs, len(l.GCDeleted), l.Namespaces, len(l.Stuck),
			l.OrphanCount(), orphanDetail(l), l.Settled)
	}
	for _, r := range results {
		if l := r.Loss; l != nil && (len(l.GCDeleted)+len(l.Stuck)+len(l.OrphanKeys) > 0) {
			fmt.Fprintf(w, "\n%s: ", r.Mode)
			if len(l.GCDeleted) > 0 {
				fmt.Fprintf(w, "deleted by the GC: %s. ", strings.Join(first(l.GCDeleted, 5), ", "))
			}
			if len(l.Stuck) > 0 {
				fmt.Fprintf(w, "terminating after %s: %s. ", l.Settled, strings.ReplaceAll(strings.Join(first(l.Stuck, 3), "; "), "|", `\|`))
			}
			if len(l.OrphanKeys) > 0 {
				fmt.Fprintf(w, "orphaned: `%s`.", strings.Join(l.OrphanKeys, "`, `"))
			}
			fmt.Fprintln(w)
		}
	}
	if o.ControllerManagerLB {
		writeKCMBalancer(w, results)
	}
	gc := 0
	for _, r := range results {
		if r.Loss != nil {
			gc += len(r.Loss.GCDeleted)
		}
	}
	switch {
	case gc == 0 && o.ControllerManagerLB:
		fmt.Fprintf(w, "\nNo mode lost a dependent to the garbage collector, even through the load balancer. "+whyNoGCLossLB+"\n")
	case gc == 0:
		fmt.Fprintf(w, "\nNo mode lost a dependent to the garbage collector. "+whyNoGCLoss+"\n", p.Owned.GVR.GroupVersion(), p.Owned.Kind, p.Owned.GVR.GroupVersion(), p.Owned.Kind)
	}
	if !lost {
		fmt.Fprintf(w, "\nNor did any mode leave a namespace terminating or an object orphaned.\n")
	}
}

// whyNoGCLoss is why, as far as the drill saw, kubeadm's defaults keep
// the garbage collector from a false 404.
const whyNoGCLoss = "kubeadm's controller-manager talks to its own node's apiserver (`controller-manager.conf` names the node's advertise address), " +
	"so it reads discovery and owners from the same server: an old one without skewgate cannot map a `%s` %s owner and retries " +
	"(`unable to get REST mapping for %s/%s` in its log) instead of asking for the owner and getting a 404. " +
	"Its namespace controller, though, finishes a namespace without the types its discovery lacks: the orphans above. " +
	"A garbage collector's false 404 needs discovery from one server and the owner from another, e.g. a controller-manager pointed at a load balancer " +
	"or the VIP across mixed versions; the drill does not run one."

// whyNoGCLossLB is what a garbage collector's false 404 needs through
// the balancer, which a run without one did not meet.
const whyNoGCLossLB = "The false 404 needs, at the moment the garbage collector checks a dependent's owner, the controller-manager's REST mapper " +
	"(its own connection) to have read discovery from a server that serves the owner's type and the garbage collector's reads " +
	"(the service-account connection) to reach one that does not; the connections per node above say where they went."

// writeKCMBalancer says how the controller-managers reached the
// apiservers in each mode.
func writeKCMBalancer(w io.Writer, results []*Result) {
	fmt.Fprintf(w, "\nHow the controller-managers reached the apiservers: every kube-controller-manager's kubeconfig names an L4 load balancer "+
		"in the lab's root namespace (`https://%s:%d`), which sends each new connection to the next node whose `/readyz` passes, as haproxy's "+
		"`mode tcp` with `balance roundrobin` does. A controller-manager opens more than one connection there: its REST mapper reads discovery "+
		"with its own certificate, its controllers (kubeadm's `--use-service-account-credentials`) with service-account tokens on another, so the "+
		"garbage collector can map an owner's type from one server's discovery and ask another for the owner. The balancer's connections to a "+
		"node's address are a client's like any other: without skewgate they reach the node's apiserver; with the in-tree proxy, that apiserver, "+
		"which proxies to a peer what it does not serve; where skewgate steers, the node's skewgate (nothing exempts the balancer's address). "+
		"Connections it made, per node, then who held the controller-managers' leader lease and each node's controller-manager's connections "+
		"(to which apiserver, from…until, relative to the drill's start; a controller-manager restarts with its node's upgrade and rollback):\n\n", lab.BridgeAddr, kcmLBPort)
	for _, r := range results {
		if r.KCM == nil {
			continue
		}
		fmt.Fprintf(w, "- %s: %s\n", r.Mode, connsText(r.KCM.PerNode()))
		for _, line := range r.KCM.timeline(r.Start) {
			fmt.Fprintf(w, "  - %s\n", line)
		}
	}
}

func orphanDetail(l *Loss) string {
	if len(l.Orphans) == 0 {
		return ""
	}
	return "(" + routes(l.Orphans) + ")"
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// writeHandOffs is the table of what each node's steering changes cost,
// where the drill followed them.
func writeHandOffs(w io.Writer, results []*Result) {
	header := false
	for _, r := range results {
		hs := r.HandOffs()
		if hs == nil {
			continue
		}
		if !header {
			fmt.Fprintf(w, "\n## The hand-over and the hand-back\n\nThe drill reads every node's steering from its pins every %s (as `skewgate steer status` does: on, a lease, a listener). "+
				"In mode `%s` steering engages when the skew window opens (the hand-over: connections from before are ended once their client is quiet, or moved by the apiserver's GOAWAY, and their clients reconnect through skewgate) and is released "+
				"when it closes (the hand-back: steered connections asked to leave with their next answer, watches ended cleanly, within 5 minutes); "+
				"in that mode the drill runs its workload on after the last step (phase `hand-back`, at most %s) until every node was released %s ago. "+
				"A request is **failed by the hand-over** when it fails (as a pinned client's request fails, any client) on a connection to the node "+
				"within %s after the node's steering engaged, **failed by the hand-back** likewise within %s after it was released; each span ends early at "+
				"the node's next steering change and when its own apiserver stops (a failure then is the restart's). "+
				"*Kept* are those on a connection the drill used before steering engaged; the outcomes as the totals name them. "+
				"A request sent before the change counts only if it failed within %s of it (a change acts at once: one that failed later was waiting on something else, "+
				"such as a request etcd's restart hung until the client's timeout); one sent on a connection from before the change while the node's apiserver was away "+
				"(failing `/readyz`) is the restart's. "+
				"**Engaged** is when the node first steered, against the first moment an apiserver of the run refused connections (stopped) "+
				"and the first moment one failed `/readyz` (kubeadm restarts etcd before the apiserver: its `/readyz` fails while it runs); negative: before it. "+
				"The window must open on every node before the first apiserver stops.\n\n"+
				"| mode | node | steering at the start | engaged (vs the first apiserver to stop answering; to fail /readyz) | engagements | failed by the hand-over (kept) | released | releases | failed by the hand-back |\n|---|---|---|---|---|---|---|---|---|\n",
				steerPoll, ModeSkewgateAuto, "`--hand-back-wait`", handBackSpan, handOverSpan, handBackSpan, inFlightSpan)
			header = true
		}
		var late []string
		for _, h := range hs {
			fmt.Fprintf(w, "| %s | %s | %t | %s | %d | **%d** (kept %d%s) | %s | %d | **%d**%s |\n", r.Mode, h.Node, h.Steering, engagedVsStop(r, h), h.Engages,
				h.HandOver, h.Kept, byOutcome(h.OverBy, "; "), sinceStart(r, h.Released), h.Releases, h.HandBack, byOutcome(h.BackBy, " "))
			if !h.EngagedBeforeStop() {
				late = append(late, h.Node)
			}
		}
		if len(late) > 0 {
			fmt.Fprintf(w, "\n%s: the window did **not** open before the first apiserver stopped answering on %s.\n", r.Mode, strings.Join(late, ", "))
		}
		writeHandOffFailures(w, r, hs)
	}
}

// engagedVsStop renders when h's node first steered, and how long before
// (negative) or after the run's first apiserver stop.
func engagedVsStop(r *Result, h HandOff) string {
	switch {
	case h.Steering:
		return "from the start"
	case h.Engaged.IsZero():
		return "never"
	case h.FirstStop.IsZero():
		return sinceStart(r, h.Engaged) + " (no apiserver stopped)"
	}
	vs := func(t time.Time) string {
		if t.IsZero() {
			return "none"
		}
		return fmt.Sprintf("%+.2f s", h.Engaged.Sub(t).Seconds())
	}
	return fmt.Sprintf("%s (%s; %s)", sinceStart(r, h.Engaged), vs(h.FirstSilent), vs(h.FirstStop))
}

// byOutcome renders failures by outcome after sep ("" if none).
func byOutcome(m map[string]int, sep string) string {
	if len(m) == 0 {
		return ""
	}
	s := sep + routes(m)
	if sep == " " {
		s = " (" + routes(m) + ")"
	}
	return s
}

func sinceStart(r *Result, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprintf("+%.1fs", t.Sub(r.Start).Seconds())
}

// writeHandOffFailures lists the first requests failed by a hand-over or
// a hand-back, with why.
func writeHandOffFailures(w io.Writer, r *Result, hs []HandOff) {
	header := false
	for _, h := range hs {
		for _, e := range h.Failures {
			if !header {
				fmt.Fprintf(w, "\n%s, the first requests failed by a hand-over or a hand-back:\n\n| answered | phase | node | client | request | resource | connection first used | why |\n|---|---|---|---|---|---|---|---|\n", r.Mode)
				header = true
			}
			who := "load-balanced"
			if e.pinned != "" {
				who = "pinned"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", sinceStart(r, e.at.Add(e.latency)), e.phase, h.Node, who, e.kind, gvrString(e.gvr),
				sinceStart(r, e.connAt), strings.NewReplacer("|", `\|`, "\n", " ").Replace(e.outcome+": "+e.detail))
		}
	}
}
