package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/proxy/admin"
)

// TestYFailover adds node-c (v1.36.3) to the running plane: node-a's
// skewgate finds it in default/kubernetes and has two capable peers. The
// preferred one crashes; reads go on without one failure, moving to the
// other before any byte was sent to the dead one. It runs before
// TestZPeerDown and leaves node-c shut down (departed), which that test
// relies on: only node-b then serves workloads.
func TestYFailover(t *testing.T) {
	ctx := context.Background()
	if _, err := plane.AddNode(ctx, "node-c", lab.NewVersion, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := plane.StopNode("node-c"); err != nil {
			t.Errorf("stop node-c: %v", err)
		}
	})
	var peers []string
	waitFor(t, 15*time.Second, "two capable peers for workloads", func() bool {
		peers = explainWorkloads(t).Servers
		return len(peers) == 2
	})
	first, second := nodeByAddr(t, peers[0]), nodeByAddr(t, peers[1])
	if err := plane.KillNode(first); err != nil {
		t.Fatal(err)
	}
	admin, sg := client(t, plane.PKI.Admin), via(t)
	for i := 0; i < 50; i++ {
		r := do(t, admin, http.MethodGet, sg+workloadsPath, nil)
		if r.Code != http.StatusOK || r.Header.Get("X-Skewgate-Server") != peers[1] {
			t.Fatalf("read %d after %s crashed: %d from %q, want 200 from %s (%s): %s", i, first, r.Code,
				r.Header.Get("X-Skewgate-Server"), second, peers[1], trim(r.Body))
		}
	}
	metrics := string(do(t, http.DefaultClient, http.MethodGet, lab.SkewgateAdminURL(node(t, "node-a"))+"/metrics", nil).Body)
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "skewgate_forward_errors_total") {
			t.Logf("%s (a failed connection to %s, failed over before the first byte)", line, peers[0])
		}
	}
	if err := plane.StartNode(ctx, first, 60*time.Second); err != nil {
		t.Fatalf("restart %s: %v", first, err)
	}
}

func explainWorkloads(t *testing.T) admin.Explanation { return explain(t, "list", workloadsPath) }

// nodeByAddr is the lab node whose apiserver listens at addr (host:port).
func nodeByAddr(t *testing.T, addr string) string {
	t.Helper()
	for _, n := range plane.Spec.Nodes {
		if n.URL() == "https://"+addr {
			return n.Name
		}
	}
	t.Fatalf("no lab node at %s", addr)
	return ""
}
