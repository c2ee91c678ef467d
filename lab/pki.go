package lab

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certValidity is long enough for any test run or demo, short enough that a
// leaked lab key is worthless soon.
const certValidity = 7 * 24 * time.Hour

// Names every lab certificate is known by. Kube-apiserver's requestheader
// authenticator accepts only front-proxy client certs whose CN is listed in
// --requestheader-allowed-names, hence the constant.
const (
	FrontProxyClientCN = "front-proxy-client"
	AdminCN            = "lab-admin"
	UserCN             = "lab-user"
)

// apiserverDNSNames are the DNS SANs kubeadm gives apiserver.crt besides
// the node name: what clients inside a cluster use, and what
// kube-apiserver's in-tree peer proxy dials by (kubernetes.default.svc).
// kubeadm adds no localhost and no 127.0.0.1, and neither does the lab:
// skewgate must reach its local apiserver on loopback as on a stock
// kubeadm node (--local-apiserver-server-name).
var apiserverDNSNames = []string{
	"kubernetes", "kubernetes.default",
	"kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
}

// serviceIP is the first address of the lab's --service-cluster-ip-range,
// which kubeadm puts in apiserver.crt.
var serviceIP = net.IPv4(10, 96, 0, 1)

// CA is a certificate authority that can sign leaf certificates.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// KeyPair is a PEM certificate and key written to disk.
type KeyPair struct{ CertFile, KeyFile string }

// NewCA creates a self-signed CA named cn.
func NewCA(cn string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := baseTemplate(cn)
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("sign CA %s: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA %s: %w", cn, err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Leaf describes a certificate to sign.
type Leaf struct {
	CN     string
	Orgs   []string
	IPs    []net.IP
	DNS    []string
	Server bool // server auth; otherwise client auth
}

// Sign issues a leaf certificate and returns it with its new key.
func (ca *CA) Sign(l Leaf) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate key for %s: %w", l.CN, err)
	}
	tmpl := baseTemplate(l.CN)
	tmpl.Subject.Organization = l.Orgs
	tmpl.IPAddresses = l.IPs
	tmpl.DNSNames = l.DNS
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if l.Server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign %s: %w", l.CN, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parse %s: %w", l.CN, err)
	}
	return cert, key, nil
}

func baseTemplate(cn string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour), // tolerate small clock skew between processes
		NotAfter:     now.Add(certValidity),
	}
}

// WriteCert writes cert as PEM to path.
func WriteCert(path string, cert *x509.Certificate) error {
	return writePEM(path, "CERTIFICATE", cert.Raw, 0o644)
}

// WriteKey writes key as a PKCS#8 PEM to path, readable by root only.
func WriteKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("marshal key %s: %w", path, err)
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

// WritePublicKey writes the public half of key as a PKIX PEM to path.
func WritePublicKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return fmt.Errorf("marshal public key %s: %w", path, err)
	}
	return writePEM(path, "PUBLIC KEY", der, 0o644)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// LoadCA reads a CA written by WriteCert and WriteKey, to sign more
// certificates with it (tests forging look-alike credentials, say).
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("load CA %s: no PEM", certFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("load CA %s: %w", certFile, err)
	}
	key, err := parsePrivateKey(kb)
	if err != nil {
		return nil, fmt.Errorf("load CA key %s: %w", keyFile, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("load CA key %s: not a signing key", keyFile)
	}
	return &CA{Cert: cert, Key: signer}, nil
}

// parsePrivateKey reads the lab's PKCS#8 keys and kubeadm's PKCS#1 RSA
// ("RSA PRIVATE KEY") and SEC 1 ("EC PRIVATE KEY") ones.
func parsePrivateKey(b *pem.Block) (any, error) {
	switch b.Type {
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(b.Bytes)
	}
	return x509.ParsePKCS8PrivateKey(b.Bytes)
}
