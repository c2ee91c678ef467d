package e2e

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skewgate/skewgate/lab"
)

// freshConns is a client that opens a new connection for every request:
// steering decides per new connection.
func freshConns(t *testing.T) *http.Client {
	c := client(t, plane.PKI.Admin)
	c.Transport.(*http.Transport).DisableKeepAlives = true
	return c
}

func steered(r response) bool { return r.Header.Get("X-Skewgate-Route") != "" }

func steer(t *testing.T, pinPath, cmd string) string {
	t.Helper()
	out, err := exec.Command(skewgateBin, "steer", cmd, "--pin-path="+pinPath).CombinedOutput()
	if err != nil {
		t.Fatalf("skewgate steer %s: %v\n%s", cmd, err, out)
	}
	return string(out)
}

// TestSteering runs skewgate with steering on node-b, finding its peers in
// the cluster: clients of the plain node URL reach skewgate; a request
// node-a's skewgate forwards is steered too and answered locally by
// node-b's; the kill switch hands new connections back to the apiserver
// while open ones stay; a SIGKILLed agent fails open.
func TestSteering(t *testing.T) {
	b := node(t, "node-b")
	ctx := context.Background()
	proc, err := plane.StartSkewgate(ctx, b.Name, skewgateBin, lab.SkewgateMode{Steering: true, Kubeconfig: true}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Stop(5 * time.Second) })
	pin, url := lab.SkewgatePinPath(b), b.URL()+"/api/v1/namespaces"
	fresh := freshConns(t)
	waitFor(t, 5*time.Second, "steering on", func() bool { return steered(do(t, fresh, http.MethodGet, url, nil)) })
	if st := steer(t, pin, "status"); !strings.Contains(st, "exempt:    none") {
		t.Errorf("peers exempt without --steer-exempt-peers:\n%s", st)
	}
	assertPeerHopAnsweredLocally(t, b)

	keep := client(t, plane.PKI.Admin) // keeps its connection
	if !steered(do(t, keep, http.MethodGet, url, nil)) {
		t.Fatal("keep-alive connection opened while steering was on did not reach skewgate")
	}
	steer(t, pin, "off")
	off := time.Now()
	if r := do(t, fresh, http.MethodGet, url, nil); steered(r) || r.Code != http.StatusOK {
		t.Errorf("first new connection after `steer off` = %d steered=%v, want the apiserver's own 200", r.Code, steered(r))
	}
	t.Logf("steer off → a new connection answered by the apiserver after %s", time.Since(off).Round(time.Microsecond))
	if !steered(do(t, keep, http.MethodGet, url, nil)) {
		t.Error("`steer off` moved an established connection")
	}
	steer(t, pin, "on")
	waitFor(t, 3*time.Second, "steering back on", func() bool { return steered(do(t, fresh, http.MethodGet, url, nil)) })

	assertHopCounted(t, b)

	if err := syscall.Kill(proc.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "skewgate gone", proc.Gone)
	failures, answered := 0, 0
	for i := 0; i < 100; i++ {
		r, err := tryGet(fresh, url)
		switch {
		case err != nil:
			failures++
			t.Logf("new connection %d after SIGKILL failed: %v", i, err)
		case steered(r):
			t.Fatalf("connection %d after SIGKILL was steered into a dead agent", i)
		case r.Code == http.StatusOK:
			answered++
		}
	}
	if failures != 0 || answered != 100 {
		t.Errorf("after SIGKILL: %d failed, %d of 100 answered by the apiserver; want 0 failed", failures, answered)
	}
}

// TestSteeringExemptPeers: with --steer-exempt-peers, node-b's skewgate
// exempts node-a, a peer it knows only from the cluster, and node-a's
// forwarded requests reach node-b's apiserver without a second proxy.
func TestSteeringExemptPeers(t *testing.T) {
	a, b := node(t, "node-a"), node(t, "node-b")
	proc, err := plane.StartSkewgate(context.Background(), b.Name, skewgateBin, lab.SkewgateMode{Steering: true, Kubeconfig: true, ExemptPeers: true}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Stop(5 * time.Second) })
	pin := lab.SkewgatePinPath(b)
	exempt := "exempt:    " + a.IP.String() + "/32"
	waitFor(t, 5*time.Second, "node-a exempt from steering", func() bool { return strings.Contains(steer(t, pin, "status"), exempt) })
	restartSkewgateA(t, lab.SkewgateMode{Kubeconfig: true}, nil)
	before := localWorkloadsAnswered(t, b)
	r := do(t, client(t, plane.PKI.Admin), http.MethodGet, via(t)+workloadsPath, nil)
	routed(t, "workloads through node-a's skewgate", r, http.StatusOK, "peer", b.IP.String()+":6443")
	if after := localWorkloadsAnswered(t, b); after != before {
		t.Errorf("an exempt peer's request went through node-b's skewgate (%g)", after-before)
	}
}

// restartSkewgateA stops node-a's skewgate (which saves its state on the
// way out), runs between, and starts it again in mode. Every connection it
// then has to node-b is new.
func restartSkewgateA(t *testing.T, mode lab.SkewgateMode, between func()) {
	t.Helper()
	if err := skewgateA.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if between != nil {
		between()
	}
	var err error
	skewgateA, err = plane.StartSkewgate(context.Background(), "node-a", skewgateBin, mode, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
}

// assertPeerHopAnsweredLocally restarts node-a's skewgate, so its new
// connections to node-b are steered into node-b's skewgate: that one sees a
// verified peer's request and answers it locally (rule 2), never proxying
// it again.
func assertPeerHopAnsweredLocally(t *testing.T, b lab.Node) {
	t.Helper()
	restartSkewgateA(t, lab.SkewgateMode{Kubeconfig: true}, nil)
	before := localWorkloadsAnswered(t, b)
	r := do(t, client(t, plane.PKI.Admin), http.MethodGet, via(t)+workloadsPath, nil)
	routed(t, "workloads through node-a's skewgate", r, http.StatusOK, "peer", b.IP.String()+":6443")
	if after := localWorkloadsAnswered(t, b); after != before+1 {
		t.Errorf("node-b's skewgate answered %g forwarded workloads lists locally, want 1", after-before)
	}
}

// localWorkloadsAnswered reads how many workloads lists node n's skewgate
// answered locally.
func localWorkloadsAnswered(t *testing.T, n lab.Node) float64 {
	t.Helper()
	body := string(do(t, http.DefaultClient, http.MethodGet, lab.SkewgateAdminURL(n)+"/metrics", nil).Body)
	const series = `skewgate_requests_total{code="200",group="scheduling.k8s.io",resource="workloads",route="local",rule="2",verb="list",version="v1alpha2"} `
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %q: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// assertHopCounted checks that node-b's skewgate counted client→proxy
// connections in the kernel and exports them.
func assertHopCounted(t *testing.T, n lab.Node) {
	t.Helper()
	r := do(t, http.DefaultClient, http.MethodGet, lab.SkewgateAdminURL(n)+"/metrics", nil)
	body := string(r.Body)
	for _, want := range []string{`skewgate_tcp_connections_opened_total{hop="client_to_proxy"`, `skewgate_tcp_handshake_seconds_bucket{hop="proxy_to_local"`, `skewgate_steering_lookups_total{reason="steered"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func tryGet(c *http.Client, url string) (response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return response{Code: resp.StatusCode, Header: resp.Header, Body: body}, err
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
