package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/lab"
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

// Bug: .lab/env and the kubeconfigs named the lab's files relative to the
// folder make ran in, and kubectl resolves a kubeconfig's relative paths
// from the kubeconfig's own folder: the README's
// `kubectl --kubeconfig $LAB_NODE_A_KUBECONFIG get ns` failed. This
// package's lab was brought up from a relative directory, as make lab-up
// does (labtest); run as documented (source the env, then kubectl) from
// another folder.
func TestLabKubeconfigWorksFromAnyFolder(t *testing.T) {
	kubectl, err := plane.Kubectl(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	script := ". " + lab.EnvPath(plane.Dir) + ` && "$KUBECTL" --kubeconfig "$LAB_NODE_A_KUBECONFIG" get ns default -o name`
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "KUBECTL="+kubectl)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "namespace/default" {
		t.Fatalf("kubectl --kubeconfig $LAB_NODE_A_KUBECONFIG get ns from another folder: %v: %s", err, out)
	}
	env, err := os.ReadFile(lab.EnvPath(plane.Dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(env), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		v = strings.Trim(v, `'"`)
		if ok && (strings.HasSuffix(k, "_FILE") || strings.HasSuffix(k, "_KUBECONFIG") || strings.HasSuffix(k, "_CERT") || strings.HasSuffix(k, "_KEY")) && !filepath.IsAbs(v) {
			t.Errorf(".lab/env: %s=%s is not an absolute path", k, v)
		}
	}
}
