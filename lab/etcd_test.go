package lab

import "testing"

func TestParseDefaultEtcdVersion(t *testing.T) {
	// As kubeadm v1.38.0-beta.0 declares it, inside a const block.
	src := `package constants

const (
	// DefaultEtcdVersion indicates the default etcd version that kubeadm uses
	DefaultEtcdVersion = "3.7.1-0"
	Other = "x"
)
`
	got, err := parseDefaultEtcdVersion([]byte(src))
	if err != nil || got != "v3.7.1" {
		t.Fatalf("got %q %v, want v3.7.1", got, err)
	}
	if _, err := parseDefaultEtcdVersion([]byte("package constants\n\nconst Other = \"x\"\n")); err == nil {
		t.Error("no DefaultEtcdVersion: want an error")
	}
}
