// Package window proves steering mode auto on real apiservers: a plane of
// one version is not steered (the hop costs nothing); routine events (a
// peer restarted on its version, a peer stalled for 3 s, oversized
// anonymous requests, an aggregated API one server reaches and the other
// does not) open no window; a peer's upgrade opens the skew
// window as soon as the upgraded server is read, and the connection made
// before it moves to skewgate between two of its requests; the cluster's
// ConfigMap switches every node within a second and survives an agent
// restart; and once the versions agree again (a rollback) the window
// closes after the hold and the rollback grace, and the connections
// steering brought, HTTP/1.1 and HTTP/2, are handed back without a failed
// request.
package window

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/labtest"
	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/membership"
)

var (
	plane *lab.Plane
	bin   string
	top   *testing.T // TestAutoMode, which owns node-a's skewgate
	// hold is the skew window's hold time here (10 minutes by default).
	hold = 8 * time.Second
	// grace is the rollback grace here (5 minutes by default): the window
	// stays open while a grace that began in it holds a type.
	grace = 20 * time.Second
)

// apiPort is every apiserver's --secure-port here: not the default 6443.
const apiPort = 6444

func TestMain(m *testing.M) {
	spec, err := lab.ParseNodes("node-a=" + lab.OldVersion + ",node-b=" + lab.OldVersion)
	if err != nil {
		panic(err)
	}
	// Every apiserver here listens on 6444, as on nodes where a local
	// load balancer holds 6443: skewgate steers the local apiserver's port
	// (from --local-apiserver), so every test below proves it.
	for i := range spec.Nodes {
		spec.Nodes[i].Port = apiPort
	}
	// The apiservers send GOAWAYs as the docs advise for an upgrade: the
	// sweep ends only connections whose client is quiet past the request
	// timeout (90 s here), so a client asking ten times a second moves
	// through skewgate only by its apiserver's GOAWAY.
	spec.GoawayChance = 0.02
	os.Exit(labtest.Main(m, "window", spec, func(ctx context.Context, env *labtest.Env) error {
		plane, bin = env.Plane, env.Skewgate
		// The upgrade needs the new version's apiserver too.
		bins, err := lab.EnsureBinaries(ctx, lab.DefaultCacheDir(), []string{lab.NewVersion}, os.Stderr)
		if err != nil {
			return err
		}
		plane.Bins.APIServers[lab.NewVersion] = bins.APIServers[lab.NewVersion]
		return nil
	}))
}

// startAuto runs node n's skewgate as the DaemonSet does: steering mode
// auto, peers from the cluster.
func startAuto(t *testing.T, name string, extra ...string) lab.Proc {
	t.Helper()
	proc, err := plane.StartSkewgate(context.Background(), name, bin, lab.SkewgateMode{Steering: true, Kubeconfig: true,
		Extra: append([]string{"--steering-window-hold=" + hold.String(), "--rollback-grace=" + grace.String()}, extra...)}, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Stop(5 * time.Second) })
	return proc
}

var stateRE = regexp.MustCompile(`(?m)^skewgate_steering_state\{state="(\w+)"\} 1$`)

// state is node name's steering state, from its metrics.
func state(t *testing.T, name string) string {
	t.Helper()
	n, _ := plane.Node(name)
	resp, err := http.Get(lab.SkewgateAdminURL(n) + "/metrics")
	if err != nil {
		return "unreachable"
	}
	defer resp.Body.Close()
	body := make([]byte, 0, 1<<16)
	buf := make([]byte, 32<<10)
	for {
		k, err := resp.Body.Read(buf)
		body = append(body, buf[:k]...)
		if err != nil {
			break
		}
	}
	if m := stateRE.FindSubmatch(body); m != nil {
		return string(m[1])
	}
	return "none"
}

// waitState polls node name's steering state every 20 ms until it is want
// and returns when it became so.
func waitState(t *testing.T, name, want string, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if state(t, name) == want {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: steering %s after %s, want %s; /debug/routes: %s", name, state(t, name), within, want, steeringView(name))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// steeringView is node name's steering as /debug/routes shows it.
func steeringView(name string) string {
	n, _ := plane.Node(name)
	resp, err := http.Get(lab.SkewgateAdminURL(n) + "/debug/routes")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var v admin.RoutesView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%+v", v.Steering)
}

// steeredGet asks node name's address on a new connection and reports
// whether skewgate answered, and the status.
func steeredGet(t *testing.T, name, path string) (bool, int) {
	t.Helper()
	n, _ := plane.Node(name)
	c, err := plane.PKI.HTTPClient(plane.PKI.Admin)
	if err != nil {
		t.Fatal(err)
	}
	c.Transport.(*http.Transport).DisableKeepAlives = true
	resp, err := c.Get(n.URL() + path)
	if err != nil {
		t.Fatalf("GET %s on %s: %v", path, name, err)
	}
	resp.Body.Close()
	return resp.Header.Get("X-Skewgate-Route") != "", resp.StatusCode
}

func setSwitch(t *testing.T, mode string) time.Time {
	t.Helper()
	a, _ := plane.Node("node-a")
	client, err := plane.AdminClient(a)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cms := client.CoreV1().ConfigMaps("kube-system")
	at := time.Now()
	if mode == "" {
		if err := cms.Delete(ctx, "skewgate", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		return at
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "skewgate"}, Data: map[string]string{"steering": mode}}
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return at
}

const workloads = "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads"

func TestAutoMode(t *testing.T) {
	top = t
	startAuto(t, "node-a")
	// Both servers v1.35.4: no window, nothing steered.
	waitState(t, "node-a", "standby", 30*time.Second)
	if steered, code := steeredGet(t, "node-a", "/api/v1/namespaces"); steered || code != http.StatusOK {
		t.Fatalf("one version, mode auto: steered=%t %d, want the apiserver's own answer", steered, code)
	}

	t.Run("the cluster switch", func(t *testing.T) {
		at := setSwitch(t, "always")
		d := waitState(t, "node-a", "steering", 5*time.Second).Sub(at)
		t.Logf("kube-system/skewgate steering=always → node-a steering after %s", d.Round(time.Millisecond))
		if d > time.Second {
			t.Errorf("the switch took %s, want within 1 s", d)
		}
		at = setSwitch(t, "off")
		d = waitState(t, "node-a", "standby", 5*time.Second).Sub(at)
		t.Logf("steering=off → node-a standby after %s", d.Round(time.Millisecond))
		if d > time.Second {
			t.Errorf("the switch took %s, want within 1 s", d)
		}
		// The cluster's choice survives an agent restart.
		setSwitch(t, "always")
		waitState(t, "node-a", "steering", 5*time.Second)
		if st := state(t, "node-a"); st != "steering" {
			t.Fatal(st)
		}
		restart(t)
		waitState(t, "node-a", "steering", 60*time.Second)
		at = setSwitch(t, "")
		waitState(t, "node-a", "standby", 5*time.Second)
		t.Logf("switch removed: node-a back to mode auto, standby after %s", time.Since(at).Round(time.Millisecond))
	})

	t.Run("routine events open no window", func(t *testing.T) {
		watch := watchStandby(t, "node-a")
		// Clients of node-a's address throughout, on kept HTTP/2 and
		// HTTP/1.1 connections and on a new connection each time: none may
		// fail or be reset (node-a's apiserver stays up; skewgate, in
		// standby, must not touch them), and no request may take a server
		// out of skewgate's routing.
		blamed := logCount(t, "skewgate-node-a", "apiserver unhealthy: connection failed")
		clients := []*kept{keptClient(t, "node-a", true), keptClient(t, "node-a", false), freshClient(t, "node-a")}
		defer func() {
			for i, c := range clients {
				n, fails := c.stop()
				t.Logf("client %d of node-a's address through the routine events: %d requests, %d failed", i, n, fails)
				if fails > 0 || n == 0 {
					t.Errorf("client %d of node-a's address: %d of %d requests failed through the routine events", i, fails, n)
				}
			}
			if n := logCount(t, "skewgate-node-a", "apiserver unhealthy: connection failed") - blamed; n > 0 {
				t.Errorf("%d requests took a server out of node-a's skewgate's routing", n)
			}
		}()
		// A peer restarted on its own version (a certificate renewal).
		if err := plane.StopNode("node-b"); err != nil {
			t.Fatal(err)
		}
		if err := plane.StartNode(context.Background(), "node-b", 90*time.Second); err != nil {
			t.Fatal(err)
		}
		// A peer stalled for 3 s (a GC pause, an etcd defrag): its
		// /readyz does not answer.
		stall(t, "node-b", 3*time.Second)
		// Oversized anonymous requests to skewgate's own listener.
		for range 5 {
			oversized(t, "node-a")
		}
		// A CRD, created through node-b: each server's discovery lists it
		// at its own instant; then deleted.
		crd(t, "node-b", true)
		time.Sleep(12 * time.Second) // more than a discovery refresh
		crd(t, "node-b", false)
		// An aggregated API that no server can reach, then removed.
		apiService(t, "node-b", true)
		time.Sleep(12 * time.Second)
		apiService(t, "node-b", false)
		// An aggregated API only node-b's server reaches: the servers'
		// discovery differs on it for as long as that lasts.
		remove := apiServiceOnOne(t, "node-b")
		time.Sleep(12 * time.Second)
		remove()
		// etcd stalls for 3 s (a defrag, a slow disk): every server's
		// /readyz fails at once.
		stall(t, "etcd", 3*time.Second)
		// node-a cannot reach node-b for 30 s.
		partition(t, "node-a", "node-b", 30*time.Second)
		time.Sleep(5 * time.Second) // probes, discovery and version re-read
		if got := watch(); len(got) > 0 {
			t.Errorf("node-a left standby during routine events: %v", got)
		}
	})

	t.Run("an upgrade opens the window, its end hands connections back", func(t *testing.T) {
		waitState(t, "node-a", "standby", hold+30*time.Second)
		before := keptClient(t, "node-a", true)
		stopAt := time.Now()
		if err := plane.UpgradeNode(context.Background(), "node-b", lab.NewVersion, 0, 90*time.Second); err != nil {
			t.Fatal(err)
		}
		ready := time.Now() // UpgradeNode returns once node-b passes /readyz
		engaged := waitState(t, "node-a", "steering", 10*time.Second)
		t.Logf("node-b stopped for its upgrade at 0, ready on %s at +%s → node-a steering at +%s",
			lab.NewVersion, ready.Sub(stopAt).Round(time.Millisecond), engaged.Sub(stopAt).Round(time.Millisecond))
		// A client of node-a's address reads what only node-b serves.
		deadline := time.Now().Add(30 * time.Second)
		for {
			steered, code := steeredGet(t, "node-a", workloads)
			if steered && code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("workloads through node-a's address: steered=%t %d", steered, code)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The connection from before the window is never quiet (ten
		// requests a second), so the sweep leaves it; node-a's apiserver
		// ends it with a GOAWAY (--goaway-chance=0.02: after about 50
		// requests; still direct after the 500-odd requests of a minute
		// with a chance of 0.98^500, under 1 in 20,000), and its client
		// comes back through skewgate without a failed request.
		waitFrom := time.Now()
		waitFor(t, 60*time.Second, "the connection from before the window moved to skewgate", before.steered)
		moved := time.Since(waitFrom)
		if n, fails := before.stop(); fails > 0 {
			t.Errorf("the client from before the window: %d of %d requests failed as it moved to skewgate", fails, n)
		} else {
			t.Logf("the client from before the window moved to skewgate %s after node-a steered reads: %d requests, 0 failed", moved.Round(100*time.Millisecond), n)
		}
		// Clients that connected in the window are on the hop.
		onHop, onHop1 := keptClient(t, "node-a", true), keptClient(t, "node-a", false)
		waitFor(t, 10*time.Second, "a connection made in the window is steered", func() bool { return onHop.steered() && onHop1.steered() })
		// node-b rolled back: both servers on one version again; the
		// types node-b's rollback took away are in their grace and its
		// discovery settle, which hold the window past the hold (rule 5
		// answers 503 for them through skewgate, node-b directly 404);
		// then the window closes and the connections steering brought
		// are handed back.
		if err := plane.UpgradeNode(context.Background(), "node-b", lab.OldVersion, 0, 90*time.Second); err != nil {
			t.Fatal(err)
		}
		agreed := time.Now()
		held := grace + membership.DiscoverySettle
		closed := waitState(t, "node-a", "standby", held+60*time.Second)
		t.Logf("versions agree → window closed after %s (hold %s, rollback grace %s + discovery settle %s)", closed.Sub(agreed).Round(time.Millisecond), hold, grace, membership.DiscoverySettle)
		// The grace began when skewgate saw node-b back serving less: a
		// few seconds before UpgradeNode returned at the most.
		if early := closed.Sub(agreed); early < held-5*time.Second {
			t.Errorf("the window closed %s after the versions agreed, while rule 5 still held node-b's old types (%s)", early.Round(time.Millisecond), held)
		}
		waitFor(t, 30*time.Second, "the connections made in the window are handed back", func() bool { return !onHop.steered() && !onHop1.steered() })
		t.Logf("handed back %s after the window closed", time.Since(closed).Round(time.Millisecond))
		for _, c := range []*kept{before, onHop, onHop1} {
			if n, fails := c.stop(); fails > 0 {
				t.Errorf("a kept client failed %d of %d requests through the window and the hand-back", fails, n)
			}
		}
	})
}

// watchStandby polls node name's steering state every 50 ms until the
// returned function is called; that returns every other state seen.
func watchStandby(t *testing.T, name string) func() []string {
	t.Helper()
	stop, done := make(chan struct{}), make(chan []string)
	go func() {
		var seen []string
		for {
			if st := state(t, name); st != "standby" {
				seen = append(seen, time.Now().Format("15:04:05.000")+" "+st)
			}
			select {
			case <-stop:
				done <- seen
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() []string { close(stop); return <-done }
}

// oversized sends skewgate's own listener on node name an anonymous
// request with a header of about 1 MiB, as one that once took a healthy
// apiserver out of routing.
func oversized(t *testing.T, name string) {
	t.Helper()
	n, _ := plane.Node(name)
	c, err := plane.PKI.HTTPClient(lab.KeyPair{})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://"+net.JoinHostPort(n.IP.String(), "16443")+"/api/v1/namespaces", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 1_048_500))
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
	}
}

// crd creates (or deletes) a namespaced CRD through node name's apiserver.
func crd(t *testing.T, name string, create bool) {
	t.Helper()
	object(t, name, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "widgets.routine.skewgate.test", create,
		`{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.routine.skewgate.test"},
"spec":{"group":"routine.skewgate.test","scope":"Namespaced","names":{"plural":"widgets","singular":"widget","kind":"Widget"},
"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`)
}

// stall stops the lab's process name (SIGSTOP) for d, then lets it go on.
func stall(t *testing.T, name string, d time.Duration) {
	t.Helper()
	p, ok := plane.State.Proc(name)
	if !ok {
		t.Fatalf("no lab process %s", name)
	}
	if err := unix.Kill(p.PID, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d)
	if err := unix.Kill(p.PID, unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// apiService creates (or deletes) through node name an aggregated API
// whose backend Service does not exist: each server's availability
// controller marks it unavailable at its own instant, as a metrics-server
// rollout flips one on each server in turn.
func apiService(t *testing.T, name string, create bool) {
	t.Helper()
	object(t, name, "/apis/apiregistration.k8s.io/v1/apiservices", "v1beta1.metrics.routine.skewgate.test", create,
		`{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService","metadata":{"name":"v1beta1.metrics.routine.skewgate.test"},
"spec":{"group":"metrics.routine.skewgate.test","version":"v1beta1","groupPriorityMinimum":100,"versionPriority":100,
"insecureSkipTLSVerify":true,"service":{"namespace":"kube-system","name":"no-such-metrics-server","port":443}}}`)
}

// object creates (body, into collection) or deletes (collection/obj)
// one object through node name as the lab admin.
func object(t *testing.T, name, collection, obj string, create bool, body string) {
	t.Helper()
	n, _ := plane.Node(name)
	c, err := plane.AdminHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodDelete, n.URL()+collection+"/"+obj, nil)
	want := http.StatusOK
	if create {
		req, _ = http.NewRequest(http.MethodPost, n.URL()+collection, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		want = http.StatusCreated
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %s", req.Method, obj, resp.Status)
	}
}

// partition drops node from's route to node to's address for d.
func partition(t *testing.T, from, to string, d time.Duration) {
	t.Helper()
	h, _, err := nodeLink(from, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	dst, _ := plane.Node(to)
	r := &netlink.Route{Dst: &net.IPNet{IP: dst.IP.AsSlice(), Mask: net.CIDRMask(32, 32)}, Type: unix.RTN_BLACKHOLE}
	if err := h.RouteAdd(r); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d)
	if err := h.RouteDel(r); err != nil {
		t.Fatal(err)
	}
}

// kept is a client of one node's address on one kept connection, asking
// every 100 ms, that counts its failures and whether skewgate answered
// last.
type kept struct {
	mu       sync.Mutex
	n, fails int
	last     bool // skewgate answered the last request
	done     chan struct{}
	stopped  chan struct{}
}

func keptClient(t *testing.T, name string, h2 bool) *kept {
	t.Helper()
	c, err := plane.PKI.HTTPClient(plane.PKI.Admin)
	if err != nil {
		t.Fatal(err)
	}
	c.Transport.(*http.Transport).ForceAttemptHTTP2 = h2
	return loopClient(t, name, c)
}

// freshClient is keptClient on a new connection for every request.
func freshClient(t *testing.T, name string) *kept {
	t.Helper()
	c, err := plane.PKI.HTTPClient(plane.PKI.Admin)
	if err != nil {
		t.Fatal(err)
	}
	c.Transport.(*http.Transport).DisableKeepAlives = true
	return loopClient(t, name, c)
}

// logCount counts the lines of the lab process name's log that contain s.
func logCount(t *testing.T, name, s string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(plane.Dir, "logs", name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), s)
}

func loopClient(t *testing.T, name string, c *http.Client) *kept {
	t.Helper()
	n, _ := plane.Node(name)
	k := &kept{done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(k.stopped)
		for {
			resp, err := c.Get(n.URL() + "/api/v1/namespaces/default")
			k.mu.Lock()
			k.n++
			if err != nil || resp.StatusCode != http.StatusOK {
				k.fails++
			} else {
				k.last = resp.Header.Get("X-Skewgate-Route") != ""
			}
			k.mu.Unlock()
			if err == nil {
				resp.Body.Close()
			}
			select {
			case <-k.done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { k.stop() })
	return k
}

func (k *kept) steered() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.last
}

// stop ends the client, once, and returns its requests and failures.
func (k *kept) stop() (int, int) {
	select {
	case <-k.done:
	default:
		close(k.done)
	}
	<-k.stopped
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.n, k.fails
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// restart stops node-a's skewgate and starts it again.
func restart(t *testing.T) {
	t.Helper()
	proc, ok := plane.State.Proc("skewgate-node-a")
	if !ok {
		t.Fatal("no skewgate on node-a")
	}
	if err := proc.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	startAuto(top, "node-a") // stopped when the whole test ends, not this subtest
}

// vip is the control plane's VIP in this test, as keepalived or kube-vip
// hold it: a secondary address on the holder's eth0.
var vip = netip.MustParsePrefix("198.18.0.100/32")

// moveVIP takes the VIP off node from (if any) and puts it on node to,
// then drops the root namespace's stale neighbour entry, as keepalived's
// gratuitous ARP would make it.
func moveVIP(t *testing.T, from, to string) {
	t.Helper()
	for _, step := range []struct {
		node string
		add  bool
	}{{from, false}, {to, true}} {
		if step.node == "" {
			continue
		}
		if err := vipOn(step.node, step.add); err != nil {
			t.Fatalf("VIP on %s (add %t): %v", step.node, step.add, err)
		}
	}
	if br, err := netlink.LinkByName(lab.BridgeName); err == nil {
		_ = netlink.NeighDel(&netlink.Neigh{LinkIndex: br.Attrs().Index, IP: vip.Addr().AsSlice()})
	}
}

// vipOn adds the VIP to node's eth0, or removes it.
func vipOn(node string, add bool) error {
	h, eth0, err := nodeLink(node, "eth0")
	if err != nil {
		return err
	}
	defer h.Close()
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: vip.Addr().AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if add {
		return h.AddrAdd(eth0, addr)
	}
	return h.AddrDel(eth0, addr)
}

// TestVIPMoves moves the control plane's VIP from node-a (v1.35.4) to
// node-b (v1.36.3, from the upgrade above) and back, as keepalived does,
// with a client on the VIP reading workloads (served by v1.36.3 only) on
// a new connection every 50 ms: node-a's skewgate steers the VIP while
// node-a holds it (it follows its interface's addresses), so no answer is
// a 404.
func TestVIPMoves(t *testing.T) {
	if b, _ := plane.Node("node-b"); b.Version != lab.NewVersion {
		if err := plane.UpgradeNode(context.Background(), "node-b", lab.NewVersion, 0, 90*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if p, ok := plane.State.Proc("skewgate-node-a"); !ok || p.Gone() {
		startAuto(t, "node-a") // TestAutoMode's is stopped with it
	}
	setSwitch(t, "always") // steering whatever the window
	t.Cleanup(func() { setSwitch(t, "") })
	startAuto(t, "node-b")
	waitState(t, "node-a", "steering", 30*time.Second)
	waitState(t, "node-b", "steering", 30*time.Second)
	moveVIP(t, "", "node-a")
	t.Cleanup(func() {
		for _, n := range []string{"node-a", "node-b"} {
			_ = vipOn(n, false) // wherever it is now
		}
	})
	c, err := plane.PKI.HTTPClient(plane.PKI.Admin)
	if err != nil {
		t.Fatal(err)
	}
	tr := c.Transport.(*http.Transport)
	tr.DisableKeepAlives = true
	tr.TLSClientConfig.ServerName = "kubernetes" // kubeadm's serving certificates carry it, not the VIP
	url := "https://" + netip.AddrPortFrom(vip.Addr(), apiPort).String() + workloads
	codes := map[string]int{}
	get := func() {
		resp, err := c.Get(url)
		if err != nil {
			codes["error"]++
			return
		}
		resp.Body.Close()
		codes[fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("X-Skewgate-Route"))]++
	}
	added := time.Now()
	for steered := false; !steered; time.Sleep(20 * time.Millisecond) {
		if time.Since(added) > 10*time.Second {
			t.Fatal("the VIP on node-a not steered within 10 s")
		}
		if resp, err := c.Get(url); err == nil {
			steered = resp.Header.Get("X-Skewgate-Route") != ""
			resp.Body.Close()
		}
	}
	steeredAfter := time.Since(added)
	for i := 0; i < 40; i++ {
		get()
		if i == 20 {
			moveVIP(t, "node-a", "node-b")
		}
		time.Sleep(50 * time.Millisecond)
	}
	moveVIP(t, "node-b", "node-a")
	for i := 0; i < 20; i++ {
		get()
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the VIP on node-a steered %s after it arrived; answers across two moves: %v", steeredAfter.Round(time.Millisecond), codes)
	for k, n := range codes {
		if strings.HasPrefix(k, "404") {
			t.Errorf("%d false 404s through the VIP across the moves: %v", n, codes)
		}
		if !strings.HasPrefix(k, "200 ") {
			t.Errorf("%d answers %q through the VIP: %v", n, k, codes)
		}
	}
}

// TestIPv6AddressSteered gives node-b's interface an IPv6 address (and the
// bridge one beside it) while node-b's skewgate runs as the DaemonSet does,
// listening on every address: the address is a steering target on the
// apiserver's port within a second or so (skewgate follows the interface),
// and a client on it reaching node-b's apiserver directly before is
// answered by skewgate after.
func TestIPv6AddressSteered(t *testing.T) {
	b, _ := plane.Node("node-b")
	node6 := netip.MustParseAddr("fd00:5347::2")
	target := netip.AddrPortFrom(node6, b.APIPort())
	if err := ipv6On(t, node6); err != nil {
		t.Fatal(err)
	}
	c, err := plane.PKI.HTTPClient(plane.PKI.Admin)
	if err != nil {
		t.Fatal(err)
	}
	tr := c.Transport.(*http.Transport)
	tr.DisableKeepAlives = true
	tr.TLSClientConfig.ServerName = "kubernetes" // no serving certificate names the IPv6 address
	url := "https://" + target.String() + "/version"
	answeredBy := func() (string, error) {
		resp, err := c.Get(url)
		if err != nil {
			return "", err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		if resp.Header.Get("X-Skewgate-Route") != "" {
			return "skewgate", nil
		}
		return "apiserver", nil
	}
	// The IPv6 address may take a moment to be usable (duplicate address
	// detection is off, the route is not).
	var before string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if before, err = answeredBy(); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || before != "apiserver" {
		t.Fatalf("before skewgate runs, %s answered by %q (%v), want the apiserver directly", target, before, err)
	}
	setSwitch(t, "always")
	t.Cleanup(func() { setSwitch(t, "") })
	started := time.Now()
	startAuto(t, "node-b", "--bind-address=0.0.0.0") // the DaemonSet's: every address, both families
	waitState(t, "node-b", "steering", 30*time.Second)
	var after string
	for deadline := time.Now().Add(10 * time.Second); after != "skewgate"; time.Sleep(50 * time.Millisecond) {
		if after, err = answeredBy(); time.Now().After(deadline) {
			t.Fatalf("%s answered by %q (%v) 10 s after steering engaged, want skewgate; steering: %s", target, after, err, steeringView("node-b"))
		}
	}
	t.Logf("%s steered %s after node-b's skewgate started; steering: %s", target, time.Since(started).Round(time.Millisecond), steeringView("node-b"))
	if view := steeringView("node-b"); !strings.Contains(view, target.String()) {
		t.Errorf("the steered targets do not list %s: %s", target, view)
	}
	// skewgate explain says such a request reaches skewgate now, and why.
	resp, err := http.Get(lab.SkewgateAdminURL(b) + "/debug/explain?verb=get&path=/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e admin.Explanation
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if st := e.Steering; st == nil || !strings.HasPrefix(st.State, "steering") || st.Mode != "always" || !slices.Contains(st.Targets, target.String()) {
		t.Errorf("/debug/explain shows steering %+v, want engaged in mode always with %s among the targets", st, target)
	}
}

// ipv6On adds addr/64 to node-b's eth0 and the bridge's address in the
// same /64 (::fe), both without duplicate address detection, until the
// test ends.
func ipv6On(t *testing.T, addr netip.Addr) error {
	bridgeAddr := addr.As16()
	bridgeAddr[15] = 0xfe
	br, err := netlink.LinkByName(lab.BridgeName)
	if err != nil {
		return err
	}
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+lab.BridgeName+"/disable_ipv6", []byte("0"), 0o644); err != nil {
		return err
	}
	onBridge := &netlink.Addr{IPNet: &net.IPNet{IP: netip.AddrFrom16(bridgeAddr).AsSlice(), Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}
	if err := netlink.AddrAdd(br, onBridge); err != nil {
		return fmt.Errorf("add %s to %s: %w", onBridge.IPNet, lab.BridgeName, err)
	}
	t.Cleanup(func() { netlink.AddrDel(br, onBridge) })
	h, eth0, err := nodeLink("node-b", "eth0")
	if err != nil {
		return err
	}
	t.Cleanup(h.Close)
	onNode := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}
	if err := h.AddrAdd(eth0, onNode); err != nil {
		return fmt.Errorf("add %s to node-b's eth0: %w (is IPv6 disabled in its namespace?)", onNode.IPNet, err)
	}
	t.Cleanup(func() { h.AddrDel(eth0, onNode) })
	return nil
}

// nodeLink is a netlink handle in node's namespace and its link named
// link; close the handle.
func nodeLink(node, link string) (*netlink.Handle, netlink.Link, error) {
	ns, err := netns.GetFromPath(lab.NetNSPath(node))
	if err != nil {
		return nil, nil, err
	}
	h, err := netlink.NewHandleAt(ns)
	ns.Close()
	if err != nil {
		return nil, nil, err
	}
	l, err := h.LinkByName(link)
	if err != nil {
		h.Close()
		return nil, nil, err
	}
	return h, l, nil
}
