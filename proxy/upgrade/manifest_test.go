package upgrade

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestManifestImage: the image of kubeadm's kube-apiserver container, from
// a manifest as kubeadm writes it and from others around it.
func TestManifestImage(t *testing.T) {
	kubeadm, err := os.ReadFile("testdata/kube-apiserver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, manifest, want, err string
	}{
		{name: "kubeadm's", manifest: string(kubeadm), want: "registry.k8s.io/kube-apiserver:v1.36.3"},
		{name: "a sidecar listed first", manifest: `
apiVersion: v1
kind: Pod
metadata: {name: kube-apiserver, namespace: kube-system}
spec:
  containers:
  - {name: audit-shipper, image: "example.org/shipper:v1.0.0"}
  - {name: kube-apiserver, image: "registry.local:5000/kube-apiserver:v1.35.4"}
`, want: "registry.local:5000/kube-apiserver:v1.35.4"},
		{name: "no apiserver container", manifest: `
apiVersion: v1
kind: Pod
metadata: {name: etcd, namespace: kube-system}
spec:
  containers:
  - {name: etcd, image: "registry.k8s.io/etcd:3.6.8-0"}
`, err: "no container kube-apiserver in pod kube-system/etcd"},
		{name: "no image", manifest: "spec: {containers: [{name: kube-apiserver}]}", err: "has no image"},
		{name: "half written", manifest: string(kubeadm[:len(kubeadm)/2]) + "\n  - {", err: "parse manifest"},
		{name: "empty", manifest: "", err: "no container kube-apiserver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ManifestImage([]byte(tc.manifest))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ManifestImage = %q, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ManifestImage = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestImageTag: the tag of every shape of reference kubeadm or an
// operator writes; a registry's port is no tag and a digest hides none.
func TestImageTag(t *testing.T) {
	const digest = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for image, want := range map[string]string{
		"registry.k8s.io/kube-apiserver:v1.36.3":          "v1.36.3",
		"registry.k8s.io/kube-apiserver:v1.36.3" + digest: "v1.36.3",
		"registry.k8s.io/kube-apiserver" + digest:         "",
		"registry.local:5000/kube-apiserver:v1.35.4":      "v1.35.4",
		"registry.local:5000/kube-apiserver":              "",
		"registry.local:5000/kube-apiserver" + digest:     "",
		"registry.local:5000/k8s/kube-apiserver:v1.35.4":  "v1.35.4",
		"[fd00::1]:5000/kube-apiserver:v1.36.3_k3s1":      "v1.36.3_k3s1",
		"kube-apiserver:v1.36.3":                          "v1.36.3",
		"kube-apiserver":                                  "",
		"localhost:5000/kube-apiserver:v1.36.3" + digest:  "v1.36.3",
		"registry.local:5000/kube-apiserver:latest":       "latest",
		"registry.local:5000/kube-apiserver:v1.36.0-rc.1": "v1.36.0-rc.1",
	} {
		if got := ImageTag(image); got != want {
			t.Errorf("ImageTag(%q) = %q, want %q", image, got, want)
		}
	}
}

// TestDecide: on when the manifest names another version than the
// apiserver runs, upgrade or rollback; off when they agree; no decision
// from a tag that names no version.
func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		tag, running string
		on           bool
		err          error
	}{
		{tag: "v1.36.3", running: "v1.36.3"},
		{tag: "v1.36.3", running: "v1.35.4", on: true},                 // upgrade
		{tag: "v1.35.4", running: "v1.36.3", on: true},                 // rollback
		{tag: "v1.36.4", running: "v1.36.3", on: true},                 // patch upgrade
		{tag: "v1.36.0", running: "v1.36.0-rc.1", on: true},            // pre-release to release
		{tag: "v1.36.3_k3s1", running: "v1.36.3+k3s1"},                 // "_" spells "+" in tags
		{tag: "v1.36.3", running: "v1.36.3+vendor.2"},                  // build metadata is no version
		{tag: "latest", running: "v1.36.3", err: ErrNoVersion},         // says nothing
		{tag: "", running: "v1.36.3", err: ErrNoVersion},               // digest only
		{tag: "v1.36.3", running: "devel", err: errors.New("running")}, // unparsable running
	} {
		on, err := Decide(tc.tag, tc.running)
		switch {
		case tc.err == nil && err != nil:
			t.Errorf("Decide(%q, %q): %v", tc.tag, tc.running, err)
		case tc.err != nil && err == nil:
			t.Errorf("Decide(%q, %q) = %t, want an error", tc.tag, tc.running, on)
		case errors.Is(tc.err, ErrNoVersion) && !errors.Is(err, ErrNoVersion):
			t.Errorf("Decide(%q, %q): %v, want ErrNoVersion", tc.tag, tc.running, err)
		case on != tc.on:
			t.Errorf("Decide(%q, %q) = %t, want %t", tc.tag, tc.running, on, tc.on)
		}
	}
}
