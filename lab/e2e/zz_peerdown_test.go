package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/proxy/admin"
)

// TestZPeerDown runs last (Z): it takes node-b away, gracefully and by a
// crash. Requests for workloads must turn into 503 Status within 3 s —
// never a 404 — and be answered by node-b again once it is back.
func TestZPeerDown(t *testing.T) {
	t.Run("graceful", func(t *testing.T) {
		peerDown(t, func() error { return plane.StopNode("node-b") }, true)
	})
	t.Run("crash", func(t *testing.T) {
		peerDown(t, func() error { return plane.KillNode("node-b") }, false)
	})
	t.Run("skewgate restarts while node-b is down", restartWhilePeerDown)
	t.Run("skewgate restarts after node-b left", restartAfterPeerLeft)
	t.Run("skewgate restarts inside a rollback's grace", restartInsideRollbackGrace)
	t.Run("a hung peer's watches end", hungPeerEndsWatches)
}

// hungPeerEndsWatches freezes node-b (SIGSTOP: its connections stay open,
// nothing answers on them). Bug: a watch through it hung until TCP gave
// up, minutes later; the client must instead see its watch end once node-b
// leaves routing, and re-list elsewhere.
func hungPeerEndsWatches(t *testing.T) {
	c, sg := client(t, plane.PKI.Admin), via(t)
	pollUntil(t, c, sg+workloadsPath, http.StatusOK, 15*time.Second)
	dyn, err := dynamic.NewForConfig(restConfig(t, sg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := dyn.Resource(workloadsGVR).Namespace("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch through skewgate: %v", err)
	}
	defer w.Stop()
	if err := plane.FreezeNode("node-b"); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	defer func() {
		if err := plane.ThawNode("node-b"); err != nil {
			t.Error(err)
		}
		pollUntil(t, c, sg+workloadsPath, http.StatusOK, 30*time.Second)
	}()
	for {
		select {
		case _, ok := <-w.ResultChan():
			if !ok {
				t.Logf("the watch through the frozen node-b ended %s after the freeze", time.Since(frozen).Round(time.Millisecond))
				if d := time.Since(frozen); d > 30*time.Second {
					t.Errorf("the watch ended only %s after node-b froze", d)
				}
				return
			}
		case <-ctx.Done():
			t.Fatal("the watch through the frozen node-b still hangs after 2 minutes")
		}
	}
}

// restartAfterPeerLeft restarts node-a's skewgate (finding peers in the
// cluster) after node-b shut down and removed itself from
// default/kubernetes: nothing now names node-b but the state file the last
// run saved, which must keep its resources at 503, not 404.
func restartAfterPeerLeft(t *testing.T) {
	c, sg := client(t, plane.PKI.Admin), via(t)
	pollUntil(t, c, sg+workloadsPath, http.StatusOK, 15*time.Second)
	restartSkewgateA(t, lab.SkewgateMode{Kubeconfig: true}, func() {
		if err := plane.StopNode("node-b"); err != nil {
			t.Fatal(err)
		}
	})
	unavailableBecause(t, do(t, c, http.MethodGet, sg+workloadsPath, nil), "departed")
	nodeBBack(t, c, sg)
}

// restartInsideRollbackGrace rolls node-b back to the old version (it
// comes back serving less: workloads answer 503 for the grace), then
// restarts node-a's skewgate: what node-b served before its rollback comes
// back from the state file, so workloads still answer 503, never 404,
// until the grace ends. Then node-b returns to the new version.
func restartInsideRollbackGrace(t *testing.T) {
	c, sg := client(t, plane.PKI.Admin), via(t)
	pollUntil(t, c, sg+workloadsPath, http.StatusOK, 15*time.Second)
	if err := plane.UpgradeNode(context.Background(), "node-b", lab.OldVersion, 0, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := do(t, c, http.MethodGet, sg+workloadsPath, nil)
		if r.Code == http.StatusServiceUnavailable && strings.Contains(string(r.Body), "grace") {
			break
		}
		if r.Code == http.StatusNotFound {
			t.Fatalf("node-b rolled back: a 404 for workloads: %s", trim(r.Body))
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-b rolled back: workloads answered %d, want the grace's 503: %s", r.Code, trim(r.Body))
		}
		time.Sleep(100 * time.Millisecond)
	}
	restartSkewgateA(t, lab.SkewgateMode{Kubeconfig: true}, nil)
	for i := range 20 {
		r := do(t, c, http.MethodGet, sg+workloadsPath, nil)
		if r.Code != http.StatusServiceUnavailable {
			t.Fatalf("request %d after skewgate restarted inside the grace: %d, want 503: %s", i, r.Code, trim(r.Body))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := plane.UpgradeNode(context.Background(), "node-b", lab.NewVersion, 0, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, c, sg+workloadsPath, http.StatusOK, 30*time.Second)
}

// restartWhilePeerDown starts node-a's skewgate afresh (with --peers and
// no state file) while node-b is dead: it has never read node-b's
// discovery, so it cannot tell whether node-b serves workloads, and must say
// 503, not 404, until it can.
func restartWhilePeerDown(t *testing.T) {
	c, sg := client(t, plane.PKI.Admin), via(t)
	if err := plane.KillNode("node-b"); err != nil {
		t.Fatal(err)
	}
	restartSkewgateA(t, lab.SkewgateMode{}, func() {
		if err := os.Remove(plane.SkewgateStateFile(node(t, "node-a"))); err != nil {
			t.Fatalf("a first start has no state file: %v", err)
		}
	})
	unavailableBecause(t, do(t, c, http.MethodGet, sg+workloadsPath, nil), "not known yet")
	if r := do(t, c, http.MethodGet, sg+"/api/v1/namespaces", nil); r.Code != http.StatusOK {
		t.Errorf("core request = %d", r.Code)
	}
	nodeBBack(t, c, sg)
}

// unavailableBecause asserts a 503 Status whose message says why.
func unavailableBecause(t *testing.T, r response, why string) {
	t.Helper()
	assertUnavailableStatus(t, r)
	if !strings.Contains(string(r.Body), why) {
		t.Errorf("503 for another reason than %q: %s", why, trim(r.Body))
	}
	t.Logf("%d %s", r.Code, trim(r.Body))
}

// nodeBBack starts node-b again and waits for its answers through skewgate.
func nodeBBack(t *testing.T, c *http.Client, sg string) {
	t.Helper()
	if err := plane.StartNode(context.Background(), "node-b", 60*time.Second); err != nil {
		t.Fatalf("restart node-b: %v", err)
	}
	r := pollUntil(t, c, sg+workloadsPath, http.StatusOK, 15*time.Second)
	routed(t, "workloads once node-b is back", r, http.StatusOK, "peer", node(t, "node-b").IP.String()+":6443")
}

func peerDown(t *testing.T, takeDown func() error, departs bool) {
	c, sg := client(t, plane.PKI.Admin), via(t)
	// Poll from the moment the signal goes out: a 404 while node-b shuts
	// down counts as much as one after.
	down := time.Now()
	gone := make(chan error, 1)
	go func() { gone <- takeDown() }()
	last := pollUntil(t, c, sg+workloadsPath, http.StatusServiceUnavailable, 3*time.Second)
	t.Logf("503 %s after node-b was signalled", time.Since(down).Round(time.Millisecond))
	if err := <-gone; err != nil {
		t.Fatal(err)
	}
	assertUnavailableStatus(t, last)
	if r := do(t, c, http.MethodGet, sg+"/api/v1/namespaces", nil); r.Code != http.StatusOK {
		t.Errorf("core request while node-b is down = %d", r.Code)
	}
	if departs {
		// A graceful shutdown removes node-b from default/kubernetes:
		// skewgate must still remember what it served.
		b := node(t, "node-b").IP.String() + ":6443"
		waitFor(t, 10*time.Second, "node-b departed in /debug/routes", func() bool {
			var v admin.RoutesView
			r := do(t, http.DefaultClient, http.MethodGet, lab.SkewgateAdminURL(node(t, "node-a"))+"/debug/routes", nil)
			if err := json.Unmarshal(r.Body, &v); err != nil {
				t.Fatalf("/debug/routes: %v", err)
			}
			for _, s := range v.Servers {
				if s.ID == b {
					return s.Departed != nil
				}
			}
			return false
		})
		assertUnavailableStatus(t, do(t, c, http.MethodGet, sg+workloadsPath, nil))
	}
	if err := plane.StartNode(context.Background(), "node-b", 60*time.Second); err != nil {
		t.Fatalf("restart node-b: %v", err)
	}
	up := time.Now()
	r := pollUntil(t, c, sg+workloadsPath, http.StatusOK, 15*time.Second)
	routed(t, "workloads after node-b is back", r, http.StatusOK, "peer", node(t, "node-b").IP.String()+":6443")
	t.Logf("200 from node-b %s after it was ready again", time.Since(up).Round(time.Millisecond))
}

// pollUntil asks url every 100 ms until it answers code; a 404 on the way
// is the false 404 skewgate exists to prevent.
func pollUntil(t *testing.T, c *http.Client, url string, code int, within time.Duration) response {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := do(t, c, http.MethodGet, url, nil)
		if r.Code == http.StatusNotFound {
			t.Fatalf("false 404 while waiting for %d: %s", code, trim(r.Body))
		}
		if r.Code == code {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d within %s; last %d: %s", code, within, r.Code, trim(r.Body))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func assertUnavailableStatus(t *testing.T, r response) {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(r.Body, &st); err != nil || r.Code != http.StatusServiceUnavailable || st.Kind != "Status" || st.Reason != metav1.StatusReasonServiceUnavailable {
		t.Errorf("want a 503 ServiceUnavailable Status, got %d (%v): %s", r.Code, err, trim(r.Body))
	}
	if r.Header.Get("Retry-After") == "" || r.Header.Get("X-Skewgate-Route") != "unavailable" {
		t.Errorf("503 headers: Retry-After=%q X-Skewgate-Route=%q", r.Header.Get("Retry-After"), r.Header.Get("X-Skewgate-Route"))
	}
}
