package kubeadm

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/proxy/membership"
)

// Eject and crash inside a rollback grace, with the garbage collector
// watching (issue 40, item 5). While a grace holds a type, skewgate
// answers it 503 and its merged discovery still lists it; the local
// apiserver, rolled back, answers 404. A garbage collector handed back to
// that apiserver — by `steering: off`, or by skewgate's crash — while its
// REST mapper still maps the type takes the 404 for "the owner is gone"
// and deletes the owner's dependents (the 1.37 drill lost 20–77 so, at
// the grace's end, before the discovery settle).
//
// The owners are MutatingAdmissionPolicies: v1.36 adds them to
// admissionregistration.k8s.io/v1, a group-version v1.35 serves too, so
// in the grace merged discovery keeps listing them fresh (as 1.37's
// podcertificaterequests in certificates.k8s.io/v1) and the collector
// keeps mapping them. A type of a group-version only the new version
// serves (workloads) is listed Stale instead, which drops it from the
// controller-manager's mapper within its 30 s reset: an eject risks
// little there.
//
// The collector asks an apiserver about an owner only when it has not
// seen it (a virtual node: the dependent came first); one that watched
// the owners since they were made never asks. So the leader's
// controller-manager is crashed inside the grace (its kubelet restarts
// it, as the rollback of a node restarts that node's): the next leader's
// collector starts inside the grace, cannot list the owners (503), meets
// every dependent before its owner, and asks for each owner again and
// again, each answer the grace's 503 (skewgate_requests_total, verb get,
// rule 5). Then, on the leader's node, skewgate is SIGKILLed (the crash
// case) and, with new dependents just made, the cluster's switch is set
// to off (the eject case); the runbook's step 6 says to end the grace
// first (step 8's first block), which the test runs after. Past the
// settle and the collector's discovery resync, no dependent whose owner
// exists may be gone.

// gcNamespace holds the dependents.
const gcNamespace = "gc-e2e"

// gcPairsPerCase is how many owners each case has.
const gcPairsPerCase = 8

var policies = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"}

// gcPair is an owner (a MutatingAdmissionPolicy) and the ConfigMap it
// owns.
type gcPair struct {
	owner, dependent string
	uid              types.UID
}

// gcOwners are the cases' owners, made while v1.36 serves them.
type gcOwners struct{ crash, eject []gcPair }

// makeOwners creates each case's owners through node-a (v1.36), and the
// crash case's dependents with them: the eject case's dependents are
// made inside the grace (ownedBy), so that the collector meets them
// fresh when the switch turns.
func makeOwners(t *testing.T, c kubernetes.Interface) *gcOwners {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gcNamespace}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(plane.AdminConfig(plane.Spec.Nodes[0]))
	if err != nil {
		t.Fatal(err)
	}
	o := &gcOwners{}
	for i := range gcPairsPerCase {
		o.crash = append(o.crash, makeOwner(t, dyn, fmt.Sprintf("gc-crash-%d", i)))
		o.eject = append(o.eject, makeOwner(t, dyn, fmt.Sprintf("gc-eject-%d", i)))
	}
	ownedBy(t, c, o.crash)
	t.Logf("%d MutatingAdmissionPolicies (v1.36 only), %d of them owning a ConfigMap in %s", len(o.crash)+len(o.eject), len(o.crash), gcNamespace)
	return o
}

// makeOwner creates a MutatingAdmissionPolicy that nothing binds (it
// mutates nothing).
func makeOwner(t *testing.T, dyn dynamic.Interface, name string) gcPair {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"failurePolicy": "Ignore", "reinvocationPolicy": "Never",
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{"e2e.skewgate.io"}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"nothings"}}}},
			"mutations": []any{map[string]any{"patchType": "ApplyConfiguration", "applyConfiguration": map[string]any{"expression": "Object{}"}}},
		}}}
	got, err := dyn.Resource(policies).Create(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create MutatingAdmissionPolicy %s: %v", name, err)
	}
	return gcPair{owner: name, dependent: name, uid: got.GetUID()}
}

// ownedBy creates each pair's dependent, a ConfigMap owned by its policy.
func ownedBy(t *testing.T, c kubernetes.Interface, pairs []gcPair) {
	t.Helper()
	for _, p := range pairs {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: p.dependent, Namespace: gcNamespace,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicy", Name: p.owner, UID: p.uid}}}}
		if _, err := c.CoreV1().ConfigMaps(gcNamespace).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// holdGrace sets the cluster's grace override well ahead, so that the
// cases run inside the grace however slow the machine; step 8 ends it.
func holdGrace(t *testing.T, n lab.Node) {
	t.Helper()
	until := time.Now().Add(15 * time.Minute).UTC().Format(time.RFC3339)
	shell(t, n, `kubectl -n kube-system patch configmap skewgate --type merge -p '{"data":{"rollback-grace-until":"`+until+`"}}'`)
}

// freshCollector crashes the leading controller-manager (SIGKILL; its
// kubelet restarts it) and waits until the next leader's garbage
// collector asks skewgate for the owners and gets the grace's 503. It
// returns the leader's node: its controller-manager reaches the
// apiservers through that node's address.
func freshCollector(t *testing.T, c kubernetes.Interface) lab.Node {
	t.Helper()
	holder := kcmHolder(t, c)
	asked := map[string]int{}
	for _, n := range plane.Spec.Nodes {
		asked[n.Name] = gcAsked(t, n)
	}
	t0 := time.Now()
	containerTask(t, nodeOf(t, holder), "kube-controller-manager", "$ctr tasks kill --signal SIGKILL $id")
	var now string
	for now = kcmHolder(t, c); now == holder || now == ""; now = kcmHolder(t, c) {
		if time.Since(t0) > 3*time.Minute {
			t.Fatalf("controller-manager %s crashed, no other leader after %s", holder, time.Since(t0).Round(time.Second))
		}
		time.Sleep(time.Second)
	}
	leader := nodeOf(t, now)
	t.Logf("leading controller-manager %s SIGKILLed inside the grace; %s leads after %s", holder, now, time.Since(t0).Round(100*time.Millisecond))
	var got int
	for got = gcAsked(t, leader); got <= asked[leader.Name]; got = gcAsked(t, leader) {
		if time.Since(t0) > 4*time.Minute {
			t.Fatalf("%s: its garbage collector never asked for an owner inside the grace (no 503 for a GET of mutatingadmissionpolicies): the cases would prove nothing", leader.Name)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("%s: the new leader's garbage collector asks for the owners, answered the grace's 503 (%d GETs so far), %s after the crash",
		leader.Name, got-asked[leader.Name], time.Since(t0).Round(100*time.Millisecond))
	return leader
}

// kcmHolder is the controller-manager leader lease's holder, or "".
func kcmHolder(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	l, err := c.CoordinationV1().Leases("kube-system").Get(context.Background(), "kube-controller-manager", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// nodeOf is the node of a leader-election identity (<hostname>_<uid>).
func nodeOf(t *testing.T, holder string) lab.Node {
	t.Helper()
	name, _, _ := strings.Cut(holder, "_")
	n, ok := plane.Node(name)
	if !ok {
		t.Fatalf("leader %q is on no node of the plane", holder)
	}
	return n
}

// requestLine is one series of skewgate_requests_total.
var requestLine = regexp.MustCompile(`(?m)^skewgate_requests_total\{([^}]*)\} (\S+)$`)

// gcAsked is how many GETs of a MutatingAdmissionPolicy node n's
// skewgate answered with the grace's 503 (rule 5) since it started:
// nothing but the garbage collector's owner lookups GETs one.
func gcAsked(t *testing.T, n lab.Node) int {
	t.Helper()
	total := 0
	for _, m := range requestLine.FindAllStringSubmatch(string(metrics(t, n)), -1) {
		l := m[1]
		if strings.Contains(l, `verb="get"`) && strings.Contains(l, `rule="5"`) && strings.Contains(l, `code="503"`) &&
			(strings.Contains(l, `resource="mutatingadmissionpolicies"`) || strings.Contains(l, `resource="unknown"`)) {
			v, _ := strconv.ParseFloat(m[2], 64)
			total += int(v)
		}
	}
	return total
}

// lookups is node n's kernel count of new connections decided for reason.
func lookups(t *testing.T, n lab.Node, reason string) int {
	t.Helper()
	re := regexp.MustCompile(`(?m)^skewgate_steering_lookups_total\{reason="` + reason + `"\} (\S+)$`)
	m := re.FindSubmatch(metrics(t, n))
	if m == nil {
		t.Fatalf("%s: no skewgate_steering_lookups_total{reason=%q}", n.Name, reason)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return int(v)
}

// metrics is node n's skewgate metrics, read as the lab's admin.
func metrics(t *testing.T, n lab.Node) []byte {
	t.Helper()
	c, err := plane.AdminHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	var body []byte
	for i := 0; ; i++ {
		if body, err = getBody(c, fmt.Sprintf("https://%s:16444/metrics", n.IP)); err == nil {
			return body
		}
		if i == 20 {
			t.Fatalf("%s: skewgate's metrics: %v", n.Name, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// crashInsideTheGrace SIGKILLs skewgate on node n while the collector
// asks for the owners through it; its kubelet restarts the container.
// Meanwhile the kernel's hold refuses n's new connections (clients
// retry): none may pass to the rolled-back apiserver (the lookups'
// no_socket and lease_expired counts stay), and the restarted skewgate
// answers the grace's 503 from its state file.
func crashInsideTheGrace(t *testing.T, n lab.Node) {
	t.Helper()
	passed := func() int { return lookups(t, n, "no_socket") + lookups(t, n, "lease_expired") }
	held, fell := lookups(t, n, "held"), passed()
	t0 := time.Now()
	containerTask(t, n, "skewgate", `$ctr tasks kill --signal SIGKILL $id
for i in $(seq 600); do
  ids=$($ctr containers ls -q 'labels."io.kubernetes.container.name"==skewgate')
  new=$(running | grep -Fx "$ids" | grep -vx "$id" || true)
  if [ -n "$new" ]; then echo "a new skewgate container running $((i / 10)).$((i % 10)) s after the SIGKILL"; exit 0; fi
  sleep 0.1
done
echo "no skewgate container running 60 s after the SIGKILL"; exit 1`)
	graceHolds(t, n, time.Minute, "skewgate SIGKILLed inside the grace, restarted by its kubelet")
	refused, direct := lookups(t, n, "held")-held, passed()-fell
	t.Logf("%s: skewgate SIGKILLed; the grace's 503 answered again %s after; kernel lookups meanwhile: %d held (refused), %d passed to the apiserver (no socket, lease expired)",
		n.Name, time.Since(t0).Round(100*time.Millisecond), refused, direct)
	if direct > 0 {
		t.Errorf("%s: %d new connections passed to the rolled-back apiserver while skewgate was gone inside the grace", n.Name, direct)
	}
}

// ejectInsideTheGrace makes the eject case's dependents, waits until the
// collector asks for their owners, then runs the runbook's step 6 —
// steering off on every node, its second block — inside the grace: off
// waits, and `kubectl skewgate status` says so, on every node. Then
// step 6's first instruction, ending the grace (step 8's first block):
// discovery drops the held types, the 503 holds for the settle, and
// steering turns off only after it. It returns once every node has
// turned steering off.
func ejectInsideTheGrace(t *testing.T, c kubernetes.Interface, leader lab.Node, pairs []gcPair) {
	t.Helper()
	a, b := plane.Spec.Nodes[0], plane.Spec.Nodes[1]
	asked, t0 := gcAsked(t, leader), time.Now()
	ownedBy(t, c, pairs)
	for gcAsked(t, leader) <= asked {
		if time.Since(t0) > 2*time.Minute {
			t.Fatalf("%s: the collector did not ask for the eject case's owners in %s", leader.Name, time.Since(t0).Round(time.Second))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%s: %d dependents made inside the grace; the collector asks again (the grace's 503) %s after", leader.Name, len(pairs), time.Since(t0).Round(100*time.Millisecond))
	runbook(t, a, "6", 1)
	if !offWaits(t, 15*time.Second) {
		return // reported; gcLost counts what the hand-back cost
	}

	// The grace's end is the patch's second (date +%S truncates it).
	ended := time.Now()
	runbook(t, a, "8", 0)
	settling(t, b, 15*time.Second)
	offEarly := false
	for {
		// Steering read before routes: off seen while routes still
		// lists a type in grace was off inside the settle.
		var off []string
		for _, n := range plane.Spec.Nodes {
			if st, err := lab.KubeletSteering(n); err != nil || !st.Steering() {
				off = append(off, fmt.Sprintf("%s (%v %v)", n.Name, st, err))
			}
		}
		out := shell(t, a, "kubectl skewgate routes")
		if strings.Count(out, "no type in rollback grace") == len(plane.Spec.Nodes) {
			break
		}
		if len(off) > 0 && !offEarly {
			offEarly = true
			t.Errorf("steering off inside the settle, %s after the grace ended: %v", time.Since(ended).Round(time.Second), off)
		}
		if time.Since(ended) > membership.DiscoverySettle+20*time.Second {
			t.Fatalf("the grace ended %s ago, kubectl skewgate routes still lists types in it:\n%s", time.Since(ended).Round(time.Second), out)
		}
		time.Sleep(time.Second)
	}
	if d := time.Since(ended); d < membership.DiscoverySettle-5*time.Second {
		t.Errorf("rule 5 released the type %s after the grace ended, inside the discovery settle (%s)", d.Round(time.Second), membership.DiscoverySettle)
	}
	waitSteering(t, false, 30*time.Second)
	t.Logf("steering off on every node %s after the grace ended (the settle: %s)", time.Since(ended).Round(time.Second), membership.DiscoverySettle)
	want(t, b, 404, "", "steering off after the settle (nobody serves workloads: the apiserver's own 404)")
}

// offWaits waits until `kubectl skewgate status` says, for every node,
// that steering off waits, and checks that every node still steers; it
// reports whether both held.
func offWaits(t *testing.T, within time.Duration) bool {
	t.Helper()
	a, ok := plane.Spec.Nodes[0], true
	deadline := time.Now().Add(within)
	for {
		// Exit 3 is an answer too: every node answered and one says
		// degraded, as a node does for the seconds its peer's discovery
		// refresh failed while that peer's skewgate restarted (held
		// connections are refused). This loop reads what the nodes say.
		out := shell(t, a, "kubectl skewgate status || [ $? -eq 3 ]")
		waits := 0
		for _, n := range plane.Spec.Nodes {
			if strings.Contains(out, n.Name+": steering off waits: ") {
				waits++
			}
		}
		if waits == len(plane.Spec.Nodes) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("steering: off inside the grace: kubectl skewgate status does not say off waits on every node:\n%s", out)
			ok = false
			break
		}
		time.Sleep(time.Second)
	}
	for _, n := range plane.Spec.Nodes {
		if st, err := lab.KubeletSteering(n); err != nil || !st.Steering() {
			t.Errorf("%s: steering: off inside the grace turned steering off (%v %v): its clients go back to the apiserver that answers 404", n.Name, st, err)
			ok = false
		}
	}
	return ok
}

// gcLost waits out the collector's discovery resync and its mapper's
// reset (30 s each) past the hand-back, then counts, as the drill's loss
// counter does, dependents gone whose owner exists (etcd, read directly:
// the rolled-back plane serves no MutatingAdmissionPolicy).
func gcLost(t *testing.T, c kubernetes.Interface, o *gcOwners) {
	t.Helper()
	time.Sleep(45 * time.Second)
	ctx := context.Background()
	keys, err := plane.EtcdKeys(ctx, "/registry/")
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]bool{}
	for _, k := range keys {
		if strings.Contains(k, "/mutatingadmissionpolicies/") {
			owners[path.Base(k)] = true
		}
	}
	for name, pairs := range map[string][]gcPair{"crash": o.crash, "eject": o.eject} {
		var lost, gone []string
		for _, p := range pairs {
			_, err := c.CoreV1().ConfigMaps(gcNamespace).Get(ctx, p.dependent, metav1.GetOptions{})
			switch {
			case !owners[p.owner]:
				gone = append(gone, p.owner)
			case apierrors.IsNotFound(err):
				lost = append(lost, p.dependent)
			case err != nil:
				t.Fatal(err)
			}
		}
		t.Logf("%s case: %d owners, %d dependents lost to the garbage collector (owner present), %d owners gone", name, len(pairs), len(lost), len(gone))
		if len(lost) > 0 {
			t.Errorf("%s case: dependents deleted whose owner exists: %v", name, lost)
		}
		if len(gone) > 0 {
			t.Errorf("%s case: owners gone, nobody deleted them: %v", name, gone)
		}
	}
}
