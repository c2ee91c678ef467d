package lab

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"slices"
	"testing"
)

func TestGeneratePKIChains(t *testing.T) {
	dir := t.TempDir()
	spec := DefaultSpec()
	p, err := GeneratePKI(dir, spec.Nodes)
	if err != nil {
		t.Fatal(err)
	}
	ca := pool(t, p.CAFile)
	fp := pool(t, p.FrontProxyCA)
	client := x509.VerifyOptions{Roots: ca, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}

	admin := leaf(t, p.Admin)
	if _, err := admin.Verify(client); err != nil {
		t.Errorf("admin cert does not chain to the cluster CA: %v", err)
	}
	if !slices.Contains(admin.Subject.Organization, "system:masters") {
		t.Errorf("admin orgs = %v, want system:masters", admin.Subject.Organization)
	}
	if user := leaf(t, p.User); len(user.Subject.Organization) != 0 {
		t.Errorf("user cert has groups %v; it must have no grants", user.Subject.Organization)
	}
	front := leaf(t, p.FrontProxyClient)
	if _, err := front.Verify(x509.VerifyOptions{Roots: fp, KeyUsages: client.KeyUsages}); err != nil {
		t.Errorf("front-proxy client does not chain to the front-proxy CA: %v", err)
	}
	if _, err := front.Verify(client); err == nil {
		t.Error("front-proxy client chains to the cluster CA: apiservers would take it as a user")
	}
	for _, n := range spec.Nodes {
		serving := leaf(t, p.Serving[n.Name])
		// kubeadm's apiserver.crt SANs, and nothing it does not add.
		for _, host := range []string{n.IP.String(), n.Name, "10.96.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"} {
			if _, err := serving.Verify(x509.VerifyOptions{Roots: ca, DNSName: host}); err != nil {
				t.Errorf("%s serving cert not valid for %s: %v", n.Name, host, err)
			}
		}
		for _, host := range []string{"127.0.0.1", "localhost"} {
			if _, err := serving.Verify(x509.VerifyOptions{Roots: ca, DNSName: host}); err == nil {
				t.Errorf("%s serving cert valid for %s, which kubeadm's is not", n.Name, host)
			}
		}
		if slices.ContainsFunc(serving.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.IPv4(198, 18, 0, 99)) }) {
			t.Errorf("%s serving cert valid for a foreign address", n.Name)
		}
	}
	if fi, err := os.Stat(p.Admin.KeyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("admin key mode = %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if _, err := os.Stat(p.SAPublicKey); err != nil {
		t.Errorf("service-account public key: %v", err)
	}
}

func pool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(data) {
		t.Fatalf("no certificate in %s", file)
	}
	return p
}

func leaf(t *testing.T, kp KeyPair) *x509.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(kp.CertFile, kp.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
