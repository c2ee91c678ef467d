package e2e

import (
	"net/http"
	"testing"
)

// TestLabShowsFalse404 proves the problem skewgate exists to fix, on the
// real servers: the old server answers 404 for what the new one serves.
func TestLabShowsFalse404(t *testing.T) {
	admin := client(t, plane.PKI.Admin)
	a, b := node(t, "node-a"), node(t, "node-b")

	if r := do(t, admin, http.MethodGet, a.URL()+workloadsPath, nil); r.Code != http.StatusNotFound {
		t.Errorf("list workloads via node-a (%s) = %d, want 404: %s", a.Version, r.Code, r.Body)
	}
	if r := do(t, admin, http.MethodGet, b.URL()+workloadsPath, nil); r.Code != http.StatusOK {
		t.Errorf("list workloads via node-b (%s) = %d, want 200: %s", b.Version, r.Code, r.Body)
	}
	for _, n := range []string{a.URL(), b.URL()} {
		if r := do(t, admin, http.MethodGet, n+"/api/v1/namespaces", nil); r.Code != http.StatusOK {
			t.Errorf("GET %s/api/v1/namespaces = %d: %s", n, r.Code, r.Body)
		}
	}

	created := do(t, admin, http.MethodPost, b.URL()+workloadsPath, workloadJSON("lab-proof"))
	if created.Code != http.StatusCreated {
		t.Fatalf("create workload via node-b = %d: %s", created.Code, created.Body)
	}
	t.Cleanup(func() { do(t, admin, http.MethodDelete, b.URL()+workloadsPath+"/lab-proof", nil) })
	if r := do(t, admin, http.MethodGet, b.URL()+workloadsPath+"/lab-proof", nil); r.Code != http.StatusOK {
		t.Errorf("get created workload via node-b = %d: %s", r.Code, r.Body)
	}
	if r := do(t, admin, http.MethodGet, a.URL()+workloadsPath+"/lab-proof", nil); r.Code != http.StatusNotFound {
		t.Errorf("get created workload via node-a = %d, want the false 404: %s", r.Code, r.Body)
	}
}

// TestLabIdentity checks the lab's users: the admin is allowed, the user
// with no grants is authenticated and forbidden, an anonymous client is not
// taken for either.
func TestLabIdentity(t *testing.T) {
	a := node(t, "node-a")
	if r := do(t, client(t, plane.PKI.User), http.MethodGet, a.URL()+"/api/v1/namespaces", nil); r.Code != http.StatusForbidden {
		t.Errorf("user lists namespaces = %d, want 403: %s", r.Code, r.Body)
	}
	if r := do(t, client(t, plane.PKI.Admin), http.MethodGet, a.URL()+"/api/v1/namespaces", nil); r.Code != http.StatusOK {
		t.Errorf("admin lists namespaces = %d, want 200: %s", r.Code, r.Body)
	}
}
