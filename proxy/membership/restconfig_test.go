package membership

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// TestPeerConfigs: only healthy, present peers, each verified as an
// apiserver (kubernetes.default.svc) with the node's CA and credentials;
// none when the node's own config does not verify certificates.
func TestPeerConfigs(t *testing.T) {
	departed := time.Now()
	members := []Status{
		{ID: "127.0.0.1:6443", URL: "https://127.0.0.1:6443", Local: true, Healthy: true},
		{ID: "10.0.0.2:6443", URL: "https://10.0.0.2:6443", Healthy: true},
		{ID: "10.0.0.3:6443", URL: "https://10.0.0.3:6443", Healthy: false},
		{ID: "10.0.0.4:6443", URL: "https://10.0.0.4:6443", Healthy: true, Departed: &departed},
		{ID: "10.0.0.5:6443", URL: "https://10.0.0.5:6443", Healthy: true},
	}
	rc := &rest.Config{Host: "https://127.0.0.1:6443", BearerTokenFile: "/sa/token",
		TLSClientConfig: rest.TLSClientConfig{CAFile: "/sa/ca.crt", ServerName: "kubernetes"}}
	got := PeerConfigs(rc, members)
	var hosts []string
	for _, c := range got {
		hosts = append(hosts, c.Host)
		if c.ServerName != "kubernetes.default.svc" || c.CAFile != "/sa/ca.crt" || c.BearerTokenFile != "/sa/token" {
			t.Errorf("%s: server name %q, CA %q, token %q; want kubernetes.default.svc and the node's CA and token", c.Host, c.ServerName, c.CAFile, c.BearerTokenFile)
		}
	}
	if want := "https://10.0.0.2:6443 https://10.0.0.5:6443"; strings.Join(hosts, " ") != want {
		t.Errorf("peers asked: %v, want %s", hosts, want)
	}
	if rc.ServerName != "kubernetes" {
		t.Errorf("the node's own config changed: server name %q", rc.ServerName)
	}
	rc.Insecure = true
	if got := PeerConfigs(rc, members); len(got) != 0 {
		t.Errorf("without certificate verification: %d peers would get tokens, want none", len(got))
	}
}
