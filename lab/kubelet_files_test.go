package lab

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func testNodeFiles(t *testing.T) nodeFiles {
	t.Helper()
	spec := DefaultSpec()
	return nodeFiles{node: spec.Nodes[0], dir: t.TempDir()}
}

func TestKubeletConfig(t *testing.T) {
	f := testNodeFiles(t)
	if err := f.writeRuntimeConfigs("ca.crt"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(f.path("kubelet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("kubelet.yaml: %v\n%s", err, data)
	}
	want := map[string]any{
		"kind": "KubeletConfiguration", "cgroupDriver": "cgroupfs", "failCgroupV1": false,
		"failSwapOn": false, "cgroupRoot": "/skewlab-node-a", "address": "198.18.0.1",
		"containerRuntimeEndpoint": "unix://" + f.path("containerd.sock"),
		"staticPodPath":            f.path("manifests"),
	}
	for k, v := range want {
		if cfg[k] != v {
			t.Errorf("kubelet.yaml %s = %v, want %v", k, cfg[k], v)
		}
	}
}

func TestContainerdConfig(t *testing.T) {
	f := testNodeFiles(t)
	if err := f.writeRuntimeConfigs("ca.crt"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(f.path("containerd.toml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`root = "` + f.dir + `/containerd/root"`,
		`address = "` + f.path("containerd.sock") + `"`,
		`sandbox_image = "` + PauseImage + `"`,
		"restrict_oom_score_adj = true",
		"SystemdCgroup = false",
		`conf_dir = "` + f.dir + `/cni"`,
	} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("containerd.toml lacks %s:\n%s", want, data)
		}
	}
	if conf, err := os.ReadFile(f.path("cni/99-loopback.conflist")); err != nil || !strings.Contains(string(conf), `"type": "loopback"`) {
		t.Errorf("conflist %s: %v", conf, err)
	}
}

// TestKubeadmPKI: a node's pki directory has kubeadm's names, and
// apiserver.crt is that node's serving certificate.
func TestKubeadmPKI(t *testing.T) {
	spec := DefaultSpec()
	pki, err := GeneratePKI(t.TempDir(), spec.Nodes)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range spec.Nodes {
		f := nodeFiles{node: n, dir: t.TempDir()}
		if err := f.writeKubeadmPKI(pki); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"ca.crt", "front-proxy-ca.crt", "front-proxy-client.crt", "front-proxy-client.key", "apiserver.key"} {
			if _, err := os.Stat(filepath.Join(f.path("pki"), name)); err != nil {
				t.Error(err)
			}
		}
		got, _ := os.ReadFile(filepath.Join(f.path("pki"), "apiserver.crt"))
		want, _ := os.ReadFile(pki.Serving[n.Name].CertFile)
		if len(got) == 0 || !bytes.Equal(got, want) {
			t.Errorf("%s: apiserver.crt is not the node's serving certificate", n.Name)
		}
		if st, err := os.Stat(filepath.Join(f.path("pki"), "apiserver.key")); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: apiserver.key mode %v %v, want 0600", n.Name, st.Mode(), err)
		}
	}
}

func TestMissingDirs(t *testing.T) {
	root := t.TempDir()
	got := missingDirs(filepath.Join(root, "etc/kubernetes/pki"), root)
	want := []string{filepath.Join(root, "etc"), filepath.Join(root, "etc/kubernetes"), filepath.Join(root, "etc/kubernetes/pki")}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("missingDirs = %v, want %v", got, want)
	}
}

func TestInKubeletCgroup(t *testing.T) {
	if inKubeletCgroup(os.Getpid(), []string{"skewlab-node-a"}) {
		t.Error("this test process counted as a kubelet's")
	}
}
