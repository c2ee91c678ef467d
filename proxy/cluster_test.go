package proxy

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// serviceAccountDir writes what the kubelet mounts into a pod: files named
// as rest.InClusterConfig reads them.
func serviceAccountDir(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestClusterConfigServiceAccount(t *testing.T) {
	local, _ := url.Parse("https://127.0.0.1:6443")
	for _, tc := range []struct {
		name, serverName, wantServerName string
	}{
		{"loopback defaults to kubeadm's SAN", "", "kubernetes"},
		{"the flag's name", "node-a", "node-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := serviceAccountDir(t, "token", "ca.crt", "namespace")
			rc, source, err := clusterConfig(Config{LocalServerName: tc.serverName}, local, dir)
			if err != nil {
				t.Fatal(err)
			}
			if rc == nil {
				t.Fatal("no config from a mounted service account")
			}
			// The local apiserver, never KUBERNETES_SERVICE_HOST.
			if rc.Host != "https://127.0.0.1:6443" {
				t.Errorf("host %q", rc.Host)
			}
			if rc.BearerTokenFile != filepath.Join(dir, "token") || rc.BearerToken != "" {
				t.Errorf("token file %q, token %q: want the file, re-read on rotation", rc.BearerTokenFile, rc.BearerToken)
			}
			if rc.TLSClientConfig.CAFile != filepath.Join(dir, "ca.crt") || rc.TLSClientConfig.ServerName != tc.wantServerName {
				t.Errorf("CA %q, server name %q", rc.TLSClientConfig.CAFile, rc.TLSClientConfig.ServerName)
			}
			if !strings.Contains(string(source), "service account") {
				t.Errorf("source %q", source)
			}
		})
	}
}

func TestClusterConfigNone(t *testing.T) {
	local, _ := url.Parse("https://127.0.0.1:6443")
	rc, _, err := clusterConfig(Config{}, local, serviceAccountDir(t))
	if err != nil || rc != nil {
		t.Fatalf("no kubeconfig, no service account: got %v, %v; want static peers only", rc, err)
	}
}

func TestClusterConfigServiceAccountWithoutCA(t *testing.T) {
	local, _ := url.Parse("https://127.0.0.1:6443")
	_, _, err := clusterConfig(Config{}, local, serviceAccountDir(t, "token"))
	if err == nil || !strings.Contains(err.Error(), "ca.crt") {
		t.Fatalf("token without ca.crt: err %v, want one naming ca.crt", err)
	}
}

// A kubeconfig wins over a mounted service account, as before.
func TestClusterConfigKubeconfig(t *testing.T) {
	local, _ := url.Parse("https://127.0.0.1:6443")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://198.18.0.1:6443"}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	rc, _, err := clusterConfig(Config{Kubeconfig: path}, local, serviceAccountDir(t, "token", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://198.18.0.1:6443" || rc.BearerToken != "t" {
		t.Errorf("host %q token %q: want the kubeconfig's", rc.Host, rc.BearerToken)
	}
	if _, _, err := clusterConfig(Config{Kubeconfig: path + ".missing"}, local, ""); err == nil || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("missing kubeconfig: err %v, want one naming --kubeconfig", err)
	}
}
