package agent

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// kubeadmManifest is kubeadm's kube-apiserver.yaml (v1.36, the lab's
// node-a: --advertise-address=198.18.0.1, --secure-port=6443, no
// --bind-address) with old replaced by new.
func kubeadmManifest(t *testing.T, oldnew ...string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/kube-apiserver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for i := 0; i+1 < len(oldnew); i += 2 {
		if !strings.Contains(s, oldnew[i]) {
			t.Fatalf("manifest has no %q", oldnew[i])
		}
		s = strings.Replace(s, oldnew[i], oldnew[i+1], 1)
	}
	return []byte(s)
}

func TestParseServing(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name   string
		oldnew []string
		want   Serving
		err    string
	}{
		{"kubeadm's default", nil, Serving{Port: 6443, Advertise: a("198.18.0.1")}, ""},
		{"bindPort 6444 behind an HAProxy", []string{"--secure-port=6443", "--secure-port=6444"}, Serving{Port: 6444, Advertise: a("198.18.0.1")}, ""},
		{"a bind address, flag and value apart", []string{"- --secure-port=6443", "- --bind-address\n    - 198.18.0.1\n    - --secure-port=6443"},
			Serving{Port: 6443, Bind: a("198.18.0.1"), Advertise: a("198.18.0.1")}, ""},
		{"bound to every IPv6 address", []string{"- --secure-port=6443", "- \"--bind-address=::\""}, Serving{Port: 6443, Bind: a("::"), Advertise: a("198.18.0.1")}, ""},
		{"no secure port: kube-apiserver's default", []string{"- --secure-port=6443\n", ""}, Serving{Port: 6443, Advertise: a("198.18.0.1")}, ""},
		{"the last flag wins", []string{"- --secure-port=6443", "- --secure-port=6443\n    - --secure-port=7443"}, Serving{Port: 7443, Advertise: a("198.18.0.1")}, ""},
		{"an advertise address from a variable: left to the node", []string{"--advertise-address=198.18.0.1", "--advertise-address=$(POD_IP)"}, Serving{Port: 6443}, ""},
		{"a bind address from a variable", []string{"- --secure-port=6443", "- --bind-address=$(POD_IP)"}, Serving{}, `--bind-address="$(POD_IP)": not an IP address`},
		{"HTTPS off", []string{"--secure-port=6443", "--secure-port=0"}, Serving{}, `--secure-port="0"`},
		{"another container", []string{"name: kube-apiserver\n    ports", "name: apiserver\n    ports"}, Serving{}, "no container kube-apiserver"},
		{"a request timeout", []string{"- --secure-port=6443", "- --secure-port=6443\n    - --request-timeout=2m30s"}, Serving{Port: 6443, Advertise: a("198.18.0.1"), RequestTimeout: 150 * time.Second}, ""},
		{"a request timeout that is no duration", []string{"- --secure-port=6443", "- --secure-port=6443\n    - --request-timeout=60"}, Serving{}, `--request-timeout="60"`},
	} {
		if tc.want.RequestTimeout == 0 {
			tc.want.RequestTimeout = DefaultRequestTimeout
		}
		got, err := ParseServing(kubeadmManifest(t, tc.oldnew...))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// A missing manifest (not a kubeadm node; --apiserver-manifest="") keeps
// the defaults; one that is there but unreadable is an error naming it.
func TestReadServing(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"", filepath.Join(dir, "none.yaml")} {
		if s, err := ReadServing(p); s != nil || err != nil {
			t.Errorf("ReadServing(%q) = %v, %v; want nil, nil", p, s, err)
		}
	}
	bad := filepath.Join(dir, "kube-apiserver.yaml")
	if err := os.WriteFile(bad, []byte("spec: {containers: [{name: kube-apiserver, command: [kube-apiserver, --secure-port=https]}]}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadServing(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "--secure-port") {
		t.Errorf("a bad manifest: %v, want an error naming %s and the flag", err, bad)
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, kubeadmManifest(t, "--secure-port=6443", "--secure-port=6444"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := ReadServing(good); err != nil || s.Port != 6444 || s.Manifest != good {
		t.Errorf("ReadServing = %+v, %v", s, err)
	}
}

// The HAProxy pattern: kubeadm's bindPort 6444, an on-node HAProxy on
// 6443. --local-apiserver on 6443 is refused naming both ports; unset, it
// is the manifest's port on loopback.
func TestLocalAgainstTheManifest(t *testing.T) {
	haproxy := Serving{Manifest: "/etc/kubernetes/manifests/kube-apiserver.yaml", Port: 6444}
	err := haproxy.CheckLocal("127.0.0.1:6443")
	for _, want := range []string{"port 6443", "serves on 6444", "--local-apiserver=https://127.0.0.1:6444", haproxy.Manifest} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckLocal(127.0.0.1:6443) on 6444: %v, want it to say %q", err, want)
		}
	}
	for _, ok := range []string{"127.0.0.1:6444", "[::1]:6444", "apiserver.local:6444"} {
		if err := haproxy.CheckLocal(ok); err != nil {
			t.Errorf("CheckLocal(%s): %v", ok, err)
		}
	}
	if u, err := haproxy.LocalURL(true); err != nil || u != "https://127.0.0.1:6444" {
		t.Errorf("LocalURL = %q, %v", u, err)
	}
	if u, err := (Serving{Port: 6443}).LocalURL(true); err != nil || u != "https://127.0.0.1:6443" {
		t.Errorf("kubeadm's default: LocalURL = %q, %v", u, err)
	}

	bound := Serving{Manifest: "m.yaml", Port: 6443, Bind: netip.MustParseAddr("10.0.0.1")}
	if err := bound.CheckLocal("127.0.0.1:6443"); err == nil || !strings.Contains(err.Error(), "listens only on 10.0.0.1") {
		t.Errorf("loopback toward an apiserver bound to 10.0.0.1: %v", err)
	}
	if _, err := bound.LocalURL(true); err == nil || !strings.Contains(err.Error(), "without --steering") {
		t.Errorf("bound to the address skewgate steers: LocalURL err %v", err)
	}
	if u, err := bound.LocalURL(false); err != nil || u != "https://10.0.0.1:6443" {
		t.Errorf("bound, no steering: LocalURL = %q, %v", u, err)
	}
	if u, err := (Serving{Port: 6443, Bind: netip.MustParseAddr("::1")}).LocalURL(true); err != nil || u != "https://[::1]:6443" {
		t.Errorf("bound to ::1: LocalURL = %q, %v", u, err)
	}
}
