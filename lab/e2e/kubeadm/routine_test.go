package kubeadm

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/lab"
)

// routine: on one version, with the DaemonSet in its default mode (auto),
// events that are not an upgrade open no skew window — node-b's etcd
// member stalled 10 s, then restarted (stacked etcd: with two members the
// cluster loses quorum while it is away, so both apiservers fail
// /readyz), then node-b's apiserver restarted on its own version (what
// `kubeadm certs renew` asks for: its static-pod manifest moved out and
// back, its image unchanged). skewgate may steer a node's new
// connections while its own apiserver is away and a peer is ready (rule
// 3a: that is the restart it covers), but no window opens, nothing is
// reset, and a client of each node's address fails no more than a client
// of the same apiserver on a connection steering never takes (127.0.0.1
// inside the node).
func routine(t *testing.T) {
	a, b := plane.Spec.Nodes[0], plane.Spec.Nodes[1]
	watch := watchWindow(t)
	through, direct := map[string]*pacedClient{}, map[string]*pacedClient{}
	for _, n := range plane.Spec.Nodes {
		through[n.Name] = startPaced(t, plane.AdminConfig(n))
		direct[n.Name] = startPaced(t, loopbackConfig(n))
	}

	t0 := time.Now()
	containerTask(t, b, "etcd", "$ctr tasks pause $id && sleep 10 && $ctr tasks resume $id")
	waitHealthy(t, 3*time.Minute)
	t.Logf("%s's etcd member stalled 10 s, both apiservers ready again after %s", b.Name, time.Since(t0).Round(100*time.Millisecond))

	t0 = time.Now()
	containerTask(t, b, "etcd", `$ctr tasks kill --signal SIGTERM $id
for i in $(seq 150); do running | grep -qx "$id" || exit 0; sleep 0.2; done
echo "$id still running 30 s after SIGTERM"; exit 1`)
	waitHealthy(t, 3*time.Minute)
	t.Logf("%s's etcd member restarted by its kubelet, both apiservers ready again after %s; members:\n%s",
		b.Name, time.Since(t0).Round(100*time.Millisecond), etcdMembers(t))

	t0 = time.Now()
	restartStaticPod(t, b, "kube-apiserver", 5*time.Second)
	waitHealthy(t, 3*time.Minute)
	t.Logf("%s's apiserver restarted on %s, ready again after %s", b.Name, b.Version, time.Since(t0).Round(100*time.Millisecond))
	time.Sleep(15 * time.Second) // discovery re-read, versions compared

	for _, n := range plane.Spec.Nodes {
		sent, failed := through[n.Name].stop()
		dsent, dfailed := direct[n.Name].stop()
		t.Logf("%s: client of its address %d requests, %d failed; client of its apiserver on loopback (never steered) %d requests, %d failed",
			n.Name, sent, failed, dsent, dfailed)
		// Two clients paced alike meet each outage at their own instant:
		// a request or so apart at each of its two edges, in three outages.
		if sent == 0 || dsent == 0 || failed > dfailed+2*3 {
			t.Errorf("%s: %d of %d requests failed through its address, %d of %d directly", n.Name, failed, sent, dfailed, dsent)
		}
	}
	for node, w := range watch() {
		t.Logf("%s: %d scrapes (%d failed), local-away steering seen in %d, %d connections reset", node, w.scrapes, w.failed, w.steering, w.resets)
		if !w.window.IsZero() {
			t.Errorf("%s: a skew window opened during routine events, at %s", node, w.window.Format("15:04:05.000"))
		}
		if w.resets > 0 {
			t.Errorf("%s: %d connections reset during routine events", node, w.resets)
		}
		if w.scrapes == 0 {
			t.Errorf("%s: its metrics were never read", node)
		}
	}
	want(t, a, http.StatusNotFound, "", "after the routine events, mode auto: the apiserver's own answer")
}

// seen is what one node's skewgate metrics showed through the events.
type seen struct {
	scrapes, failed, steering int
	window                    time.Time // when skewgate_skew_window was first seen 1
	resets                    int       // skewgate_steering_reset_connections_total's increase
}

var (
	windowOpen   = regexp.MustCompile(`(?m)^skewgate_skew_window 1$`)
	steeringOn   = regexp.MustCompile(`(?m)^skewgate_steering_state\{state="steering"\} 1$`)
	resetCounter = regexp.MustCompile(`(?m)^skewgate_steering_reset_connections_total (\d+)$`)
)

// watchWindow reads every node's skewgate metrics every 500 ms until the
// returned function is called, which reports what they showed.
func watchWindow(t *testing.T) func() map[string]*seen {
	t.Helper()
	c, err := plane.AdminHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	saw := map[string]*seen{}
	first := map[string]int{}
	for _, n := range plane.Spec.Nodes {
		saw[n.Name] = &seen{}
		first[n.Name] = -1
	}
	go func() {
		defer close(done)
		for {
			for _, n := range plane.Spec.Nodes {
				s := saw[n.Name]
				body, err := getBody(c, fmt.Sprintf("https://%s:16444/metrics", n.IP))
				if err != nil {
					s.failed++
					continue
				}
				s.scrapes++
				if windowOpen.Match(body) && s.window.IsZero() {
					s.window = time.Now()
				}
				if steeringOn.Match(body) {
					s.steering++
				}
				if m := resetCounter.FindSubmatch(body); m != nil {
					v, _ := strconv.Atoi(string(m[1]))
					if first[n.Name] < 0 {
						first[n.Name] = v
					}
					s.resets = v - first[n.Name]
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return func() map[string]*seen {
		close(stop)
		<-done
		return saw
	}
}

func getBody(c *http.Client, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s", resp.Status)
	}
	return body, err
}

// loopbackConfig is the lab admin's client of node n's apiserver on
// 127.0.0.1 inside n's network namespace: steering takes the node's
// addresses, never loopback (the certificate is still checked for n's
// address).
func loopbackConfig(n lab.Node) *rest.Config {
	cfg := plane.AdminConfig(n)
	port := strconv.Itoa(int(n.APIPort()))
	cfg.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
		var c net.Conn
		err := lab.InNode(n.Name, func() (err error) {
			c, err = (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
			return err
		})
		return c, err
	}
	return cfg
}

// containerTask runs script on node n with $ctr the node's ctr and $id
// the containerd ID of the running container name of its pods: `$ctr
// tasks pause` stalls it (the cgroup freezer, as a hung disk or a paused
// VM does), `$ctr tasks kill` stops it and its kubelet starts it again (a
// crash, an OOM kill, crictl stop).
//
// Not a manifest moved out and back for etcd: with two stacked members,
// quorum is lost while etcd is away, and the kubelet's housekeeping, run
// in its sync loop, then blocks 34 s at a time on deleting the orphaned
// etcd mirror pod through an apiserver that cannot write; the returned
// manifest waits for the loop's select to pick it over the next
// housekeeping, a coin toss each round. Seen in CI on 2026-12-04: etcd
// back after 2m51s, by then node-b's apiserver failed its liveness probe
// and was shutting down. A kubelet hazard of two-member etcd, not what
// this test measures.
func containerTask(t *testing.T, n lab.Node, name, script string) {
	t.Helper()
	shell(t, n, fmt.Sprintf(`ctr="ctr --address %s -n k8s.io"
running() { $ctr tasks ls | awk 'NR > 1 && $3 == "RUNNING" { print $1 }'; }
ids=$($ctr containers ls -q 'labels."io.kubernetes.container.name"==%s')
id=$(running | grep -Fx "$ids" || true)
test "$(echo "$id" | wc -w)" = 1 || { echo "running %[2]s containers: '$id'"; exit 1; }
%s`, plane.ContainerdSocket(n), name, script))
}

// restartStaticPod moves node n's static-pod manifest name out of the
// kubelet's manifest directory for away, then back: the kubelet stops
// the pod and starts it again, as an operator restarts a control-plane
// component on kubeadm.
func restartStaticPod(t *testing.T, n lab.Node, name string, away time.Duration) {
	t.Helper()
	shell(t, n, fmt.Sprintf("mv /etc/kubernetes/manifests/%[1]s.yaml /etc/kubernetes/%[1]s.yaml.away && sleep %d && mv /etc/kubernetes/%[1]s.yaml.away /etc/kubernetes/manifests/%[1]s.yaml",
		name, int(away.Seconds())))
}

// waitHealthy waits until every apiserver passes /readyz.
func waitHealthy(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, n := range plane.Spec.Nodes {
		c, err := plane.AdminClient(n)
		if err != nil {
			t.Fatal(err)
		}
		for {
			body, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
			if err == nil && strings.TrimSpace(string(body)) == "ok" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz not ok after %s: %v", n.Name, timeout, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// pacedClient asks one apiserver every 200 ms (client-go's default rate) on a kept
// connection, as the cluster admin, and counts what failed.
type pacedClient struct {
	mu           sync.Mutex
	sent, failed int
	stopc, done  chan struct{}
}

func startPaced(t *testing.T, cfg *rest.Config) *pacedClient {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &pacedClient{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stopc:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := c.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			cancel()
			p.mu.Lock()
			p.sent++
			if err != nil {
				p.failed++
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() { p.stop() })
	return p
}

func (p *pacedClient) stop() (sent, failed int) {
	select {
	case <-p.stopc:
	default:
		close(p.stopc)
	}
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent, p.failed
}
