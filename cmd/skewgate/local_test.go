package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeManifest writes kubeadm's kube-apiserver.yaml with --secure-port
// port and extra flags, and returns its path.
func writeManifest(t *testing.T, port string, extra ...string) string {
	t.Helper()
	data, err := os.ReadFile("../../agent/testdata/kube-apiserver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	flags := "- --secure-port=" + port
	for _, e := range extra {
		flags += "\n    - " + e
	}
	s := strings.Replace(string(data), "- --secure-port=6443", flags, 1)
	path := filepath.Join(t.TempDir(), "kube-apiserver.yaml")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// --local-apiserver follows the apiserver's manifest: derived from it when
// not given (kubeadm's 6443, or bindPort 6444 behind an HAProxy on 6443),
// refused when it names another port, 6443 without a manifest.
func TestLocalAPIServerFromTheManifest(t *testing.T) {
	kubeadm, haproxy := writeManifest(t, "6443"), writeManifest(t, "6444")
	bound := writeManifest(t, "6443", "--bind-address=198.18.0.1")
	for _, tc := range []struct {
		name, manifest, flag string
		steering             bool
		want, err            string
	}{
		{"kubeadm's default, not given", kubeadm, "", true, "https://127.0.0.1:6443", ""},
		{"kubeadm's default, given as the DaemonSet used to", kubeadm, "https://127.0.0.1:6443", true, "https://127.0.0.1:6443", ""},
		{"HAProxy on 6443, not given", haproxy, "", true, "https://127.0.0.1:6444", ""},
		{"HAProxy on 6443, given on 6443", haproxy, "https://127.0.0.1:6443", true, "", "--local-apiserver names port 6443, but this node's kube-apiserver serves on 6444"},
		{"HAProxy on 6443, given right", haproxy, "https://127.0.0.1:6444", true, "https://127.0.0.1:6444", ""},
		{"no manifest", filepath.Join(t.TempDir(), "none.yaml"), "", true, "https://127.0.0.1:6443", ""},
		{"not watched", "", "https://127.0.0.1:7443", true, "https://127.0.0.1:7443", ""},
		{"bound to the node IP, steering", bound, "", true, "", "listens only on 198.18.0.1"},
		{"bound to the node IP, behind a load balancer", bound, "", false, "https://198.18.0.1:6443", ""},
	} {
		o := &runOptions{}
		o.proxy.APIServerManifest, o.proxy.LocalAPIServer, o.node.Steering = tc.manifest, tc.flag, tc.steering
		errs := o.resolveLocal()
		switch {
		case tc.err != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.err)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, errs, tc.err)
		case tc.err == "" && (len(errs) != 0 || o.proxy.LocalAPIServer != tc.want):
			t.Errorf("%s: --local-apiserver %q, %v; want %s", tc.name, o.proxy.LocalAPIServer, errs, tc.want)
		}
	}
}

// The HAProxy case refuses to start, naming both ports and the fix.
func TestRunRefusesHAProxyForTheAPIServer(t *testing.T) {
	manifest := writeManifest(t, "6444")
	code, _, errOut := skewgate(t, "run", "--apiserver-manifest="+manifest, "--local-apiserver=https://127.0.0.1:6443")
	for _, want := range []string{"port 6443", "serves on 6444", manifest, "--local-apiserver=https://127.0.0.1:6444"} {
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("exit %d, stderr does not say %q: %s", code, want, errOut)
		}
	}
}

// TestResetQuietPastTheRequestTimeout: --steering-reset-quiet at or below
// the apiserver's --request-timeout (its manifest's, else kube-apiserver's
// 1m) refuses to start, naming both; past it, or unset, it starts.
func TestResetQuietPastTheRequestTimeout(t *testing.T) {
	manifest := writeManifest(t, "6443", "--request-timeout=2m")
	code, _, errOut := skewgate(t, "run", "--apiserver-manifest="+manifest, "--steering-reset-quiet=2m")
	for _, want := range []string{"--steering-reset-quiet=2m0s", "request timeout, 2m0s", "--request-timeout in " + manifest, "would be cut"} {
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("exit %d, stderr does not say %q: %s", code, want, errOut)
		}
	}
	code, _, errOut = skewgate(t, "run", "--apiserver-manifest=", "--steering-reset-quiet=45s")
	if code != 2 || !strings.Contains(errOut, "kube-apiserver's default --request-timeout") {
		t.Errorf("no manifest, 45s: exit %d: %s", code, errOut)
	}
	for _, tc := range []struct {
		manifest string
		flag     time.Duration
		want     time.Duration
	}{
		{manifest, 0, 3 * time.Minute},
		{manifest, 150 * time.Second, 150 * time.Second},
		{writeManifest(t, "6443"), 0, 90 * time.Second},
	} {
		o := &runOptions{}
		o.proxy.APIServerManifest, o.node.ResetQuiet = tc.manifest, tc.flag
		if errs := o.resolveLocal(); len(errs) != 0 {
			t.Fatal(errs)
		}
		if err := o.resolveQuiet(); err != nil || o.node.ResetQuiet != tc.want {
			t.Errorf("%s, --steering-reset-quiet=%s: %s, %v; want %s", tc.manifest, tc.flag, o.node.ResetQuiet, err, tc.want)
		}
	}
}
