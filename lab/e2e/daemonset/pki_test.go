package daemonset

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/skewgate/skewgate/lab"
)

// podPKI is what the DaemonSet mounts of kubeadm's /etc/kubernetes/pki.
var podPKI = []string{"apiserver.crt", "apiserver.key", "ca.crt", "front-proxy-ca.crt", "front-proxy-client.crt", "front-proxy-client.key"}

// decoyKey puts a ca.key beside every node's kubeadm files, where kubeadm
// keeps the cluster CA's key, for pkiSeen to look for in the pods.
func decoyKey(t *testing.T) {
	t.Helper()
	for _, n := range plane.Spec.Nodes {
		path := filepath.Join(plane.KubeadmPKIDir(n), "ca.key")
		if err := os.WriteFile(path, []byte("decoy: not a key\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(path) })
	}
}

// pkiSeen: in every node's running pod, /etc/kubernetes/pki holds exactly
// the six files skewgate reads; the ca.key beside them on the node is not
// there.
func pkiSeen(t *testing.T) {
	for _, n := range plane.Spec.Nodes {
		if _, err := os.Stat(filepath.Join(plane.KubeadmPKIDir(n), "ca.key")); err != nil {
			t.Fatalf("%s: the node has no ca.key to hide: %v", n.Name, err)
		}
		dir := fmt.Sprintf("/proc/%d/root/etc/kubernetes/pki", podPID(t, n))
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if !slices.Equal(names, podPKI) {
			t.Errorf("%s: the pod's /etc/kubernetes/pki holds %v, want exactly %v", n.Name, names, podPKI)
		}
		t.Logf("%s: the pod's /etc/kubernetes/pki: %v", n.Name, names)
	}
}

// renew replaces node a's apiserver.crt and apiserver.key with the pod
// running, first as `kubeadm certs renew` writes them — key, then
// certificate, each rewritten in place by client-go's keyutil.WriteKey and
// certutil.WriteCert (kubeadm's pkiutil.WriteCertAndKey) — and checks
// that clients of the node's address get the new certificate without a
// restart. Then it replaces them by rename, which the pod's file binds
// cannot see: the old certificate stays until the pod is replaced, as
// docs/deploy.md says.
func renew(t *testing.T, a lab.Node) {
	dir := plane.KubeadmPKIDir(a)
	before := served(t, a)
	t.Logf("%s serves certificate serial %s", a.Name, before)

	cert, keyPEM := reissue(t, filepath.Join(dir, "apiserver.crt"))
	if err := keyutil.WriteKey(filepath.Join(dir, "apiserver.key"), keyPEM); err != nil {
		t.Fatal(err)
	}
	if err := certutil.WriteCert(filepath.Join(dir, "apiserver.crt"), pemCert(cert)); err != nil {
		t.Fatal(err)
	}
	took := waitServed(t, a, cert.SerialNumber, 90*time.Second)
	t.Logf("renewed in place (kubeadm's writes): serial %s served through %s after %s", cert.SerialNumber, a.Name, took.Round(time.Millisecond))

	replaced, keyPEM := reissue(t, filepath.Join(dir, "apiserver.crt"))
	for name, data := range map[string][]byte{"apiserver.key": keyPEM, "apiserver.crt": pemCert(replaced)} {
		tmp := filepath.Join(dir, "."+name+".new")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// Past the reloader's re-read every minute: still the renewed one.
	time.Sleep(70 * time.Second)
	if got := served(t, a); got.Cmp(cert.SerialNumber) != 0 {
		t.Errorf("70s after apiserver.crt was replaced by rename the pod serves %s, want still %s (its file bind holds the old inode); docs/deploy.md says otherwise", got, cert.SerialNumber)
	}
	c := admin(t)
	pod := podOn(t, c, a.Name)
	deletePod(t, c, pod)
	waitRolledOut(t, c, images[0], 2*time.Minute)
	waitSteering(t, true, time.Minute)
	took = waitServed(t, a, replaced.SerialNumber, 30*time.Second)
	t.Logf("replaced by rename: the old serial stayed for 70s; after the pod was replaced, serial %s served (%s after it was Ready)", replaced.SerialNumber, took.Round(time.Millisecond))
}

// reissue signs a new certificate like the one in path (same subject and
// names) with the lab's cluster CA, as kubeadm's renewal does.
func reissue(t *testing.T, path string) (*x509.Certificate, []byte) {
	t.Helper()
	old, err := certutil.CertsFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := lab.LoadCA(plane.PKI.CAFile, plane.PKI.CAKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Sign(lab.Leaf{CN: old[0].Subject.CommonName, Orgs: old[0].Subject.Organization,
		IPs: old[0].IPAddresses, DNS: old[0].DNSNames, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	return cert, keyPEM
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: c.Raw})
}

// served is the serial of the certificate a new TLS connection to node
// a's address gets, verified against the cluster CA: skewgate's, while it
// steers (the lab's apiserver reads its serving pair from other files).
func served(t *testing.T, a lab.Node) *big.Int {
	t.Helper()
	serial, err := servedSerial(a)
	if err != nil {
		t.Fatal(err)
	}
	return serial
}

func servedSerial(a lab.Node) (*big.Int, error) {
	pool, err := certutil.NewPool(plane.PKI.CAFile)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d := tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: a.IP.String()}}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(a.IP.String(), "6443"))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// waitServed waits until node a's address serves the certificate serial.
func waitServed(t *testing.T, a lab.Node, serial *big.Int, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got, err := servedSerial(a)
		if err == nil && got.Cmp(serial) == 0 {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("%s: serial %s not served within %s: last %v %v", a.Name, serial, timeout, got, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
