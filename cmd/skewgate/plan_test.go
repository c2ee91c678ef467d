package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlanCommandLines: a wrong rollback-plan or preflight command line is
// a usage error (exit 2) that says what is wrong, before any cluster is
// asked.
func TestPlanCommandLines(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rollback-plan"}, "--to is required"},
		{[]string{"rollback-plan", "--to", "latest"}, "unknown version"},
		{[]string{"rollback-plan", "--to", "v1.35", "-o", "yaml"}, `--output "yaml"`},
		{[]string{"preflight", "-o", "wide"}, `--output "wide"`},
		{[]string{"preflight", "extra"}, "unknown command"},
	} {
		code, _, errOut := skewgate(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestPlanClusterErrors: a cluster that cannot be read is a failure
// (exit 1) naming what could not be read, not a plan that lacks nothing
// or a preflight without checks; a version no node's skewgate recorded
// (none could be read) names the versions known.
func TestPlanClusterErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "etcd is on fire", http.StatusInternalServerError)
	}))
	defer srv.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := skewgate(t, "preflight", "--kubeconfig", kubeconfig)
	if code != 1 || !strings.Contains(errOut, "default/kubernetes endpoints") || out != "" {
		t.Errorf("preflight: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = skewgate(t, "rollback-plan", "--to", "v1.35", "--kubeconfig", kubeconfig, "--admin", srv.URL)
	if code != 1 || !strings.Contains(errOut, "releases: "+srv.URL+": "+srv.URL+"/debug/routes: 500") || !strings.Contains(errOut, "etcd is on fire") ||
		!strings.Contains(errOut, "skewgate: --to: unknown version v1.35: no skewgate of this cluster saw a kube-apiserver of v1.35 run; known: none") || out != "" {
		t.Errorf("rollback-plan: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
