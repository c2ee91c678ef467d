package upgrade

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeManifest replaces path as kubeadm does (a new file renamed over the
// old), with testdata's manifest naming image.
func writeManifest(t *testing.T, path, image string) {
	t.Helper()
	data, err := os.ReadFile("testdata/kube-apiserver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte("registry.k8s.io/kube-apiserver:v1.36.3"), []byte(image), 1)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestManifestWatch walks one node through a kubeadm upgrade and rollback
// as its manifest and its apiserver's /version show them.
func TestManifestWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kube-apiserver.yaml")
	running := "v1.35.4"
	var logs bytes.Buffer
	w := &manifestWatch{node: "node-a", path: path, running: func() string { return running },
		log: slog.New(slog.NewTextHandler(&logs, nil))}
	step := func(what string, wantOn bool, wantReason string) {
		t.Helper()
		c, decided := w.check()
		if c.On != wantOn || (wantOn && c.Reason() != wantReason) {
			t.Fatalf("%s: %+v (%s), want on %t (%s)", what, c, c.Reason(), wantOn, wantReason)
		}
		// Undecided exactly where the test leaves the last decision
		// standing: the apiserver's version unknown, a half-written file.
		if undecided := running == "" || strings.HasPrefix(what, "a half-written"); decided == undecided {
			t.Fatalf("%s: decided %t", what, decided)
		}
	}

	step("no manifest", false, "")
	step("still none", false, "")
	if n := strings.Count(logs.String(), "not a kubeadm node"); n != 1 {
		t.Errorf("a missing manifest logged %d times in two checks, want once:\n%s", n, logs.String())
	}

	writeManifest(t, path, "registry.k8s.io/kube-apiserver:v1.35.4")
	step("the running version", false, "")

	writeManifest(t, path, "registry.k8s.io/kube-apiserver:v1.36.3")
	upgrading := "node node-a: manifest names kube-apiserver v1.36.3, running v1.35.4"
	step("kubeadm upgrade wrote the new manifest", true, upgrading)
	running = ""
	step("the apiserver down for its restart", true, upgrading)
	if err := os.WriteFile(path, []byte("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - {"), 0o600); err != nil {
		t.Fatal(err)
	}
	running = "v1.35.4"
	step("a half-written manifest", true, upgrading)
	writeManifest(t, path, "registry.k8s.io/kube-apiserver:v1.36.3")
	running = "v1.36.3"
	step("the new apiserver up", false, "")

	writeManifest(t, path, "registry.k8s.io/kube-apiserver:v1.35.4@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	step("rollback: the old manifest restored", true, "node node-a: manifest names kube-apiserver v1.35.4, running v1.36.3")
	running = "v1.35.4"
	step("the old apiserver up again", false, "")

	writeManifest(t, path, "registry.local:5000/kube-apiserver:latest")
	step("a tag that names no version", false, "")
	if !strings.Contains(logs.String(), "names no version") {
		t.Errorf("a tag naming no version not logged:\n%s", logs.String())
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, filepath.Join(filepath.Dir(path), "other.yaml"), "registry.k8s.io/kube-apiserver:v1.36.3")
	step("the manifest removed", false, "")
}
