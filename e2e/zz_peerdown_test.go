package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestZPeerDownIs503 runs last (Z): it stops node-b. Requests for workloads
// must turn into 503 Status within 3 s — never a 404 — and come back after
// node-b does.
func TestZPeerDownIs503(t *testing.T) {
	admin, sg := client(t, plane.PKI.Admin), via(t)
	if err := plane.StopNode("node-b"); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() {
		if err := plane.StartNode(context.Background(), "node-b", 60*time.Second); err != nil {
			t.Errorf("restart node-b: %v", err)
		}
	})
	var last response
	for time.Since(stopped) < 3*time.Second {
		last = do(t, admin, http.MethodGet, sg+workloadsPath, nil)
		if last.Code == http.StatusNotFound {
			t.Fatalf("false 404 %s after node-b stopped: %s", time.Since(stopped), trim(last.Body))
		}
		if last.Code == http.StatusServiceUnavailable {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last.Code != http.StatusServiceUnavailable {
		t.Fatalf("3 s after node-b stopped: %d, want 503: %s", last.Code, trim(last.Body))
	}
	t.Logf("503 after %s", time.Since(stopped).Round(time.Millisecond))
	var st metav1.Status
	if err := json.Unmarshal(last.Body, &st); err != nil || st.Kind != "Status" || st.Reason != metav1.StatusReasonServiceUnavailable {
		t.Errorf("503 body is not a ServiceUnavailable Status (%v): %s", err, trim(last.Body))
	}
	if last.Header.Get("Retry-After") == "" || last.Header.Get("X-Skewgate-Route") != "unavailable" {
		t.Errorf("503 headers: Retry-After=%q X-Skewgate-Route=%q", last.Header.Get("Retry-After"), last.Header.Get("X-Skewgate-Route"))
	}
	if r := do(t, admin, http.MethodGet, sg+"/api/v1/namespaces", nil); r.Code != http.StatusOK {
		t.Errorf("core request while node-b is down = %d", r.Code)
	}
}
