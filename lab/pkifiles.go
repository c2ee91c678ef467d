package lab

import (
	"fmt"
	"net"
	"path/filepath"
)

// PKI is the set of files a lab plane's processes and clients use.
type PKI struct {
	Dir              string
	CAFile           string
	CAKey            string
	FrontProxyCA     string
	FrontProxyCAKey  string
	FrontProxyClient KeyPair
	Admin            KeyPair
	User             KeyPair
	SAPublicKey      string
	SAPrivateKey     string
	Serving          map[string]KeyPair // by node name
}

// NewPKIPaths names the files of a PKI under dir without creating them.
func NewPKIPaths(dir string, nodes []Node) *PKI {
	p := &PKI{
		Dir:              dir,
		CAFile:           filepath.Join(dir, "ca.crt"),
		CAKey:            filepath.Join(dir, "ca.key"),
		FrontProxyCA:     filepath.Join(dir, "front-proxy-ca.crt"),
		FrontProxyCAKey:  filepath.Join(dir, "front-proxy-ca.key"),
		FrontProxyClient: pair(dir, "front-proxy-client"),
		Admin:            pair(dir, "admin"),
		User:             pair(dir, "user"),
		SAPublicKey:      filepath.Join(dir, "sa.pub"),
		SAPrivateKey:     filepath.Join(dir, "sa.key"),
		Serving:          map[string]KeyPair{},
	}
	for _, n := range nodes {
		p.Serving[n.Name] = pair(dir, n.Name+"-serving")
	}
	return p
}

func pair(dir, name string) KeyPair {
	return KeyPair{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key")}
}

// GeneratePKI writes a fresh cluster CA, front-proxy CA, serving certs for
// every node, the admin, user and front-proxy client certs and the
// service-account key pair under dir.
func GeneratePKI(dir string, nodes []Node) (*PKI, error) {
	p := NewPKIPaths(dir, nodes)
	ca, err := NewCA("skewgate-lab-ca")
	if err != nil {
		return nil, err
	}
	fpCA, err := NewCA("skewgate-lab-front-proxy-ca")
	if err != nil {
		return nil, err
	}
	if err := writeCA(ca, p.CAFile, p.CAKey); err != nil {
		return nil, err
	}
	if err := writeCA(fpCA, p.FrontProxyCA, p.FrontProxyCAKey); err != nil {
		return nil, err
	}
	leaves := []issuance{
		{fpCA, Leaf{CN: FrontProxyClientCN}, p.FrontProxyClient},
		{ca, Leaf{CN: AdminCN, Orgs: []string{"system:masters"}}, p.Admin},
		{ca, Leaf{CN: UserCN}, p.User},
	}
	for _, n := range nodes {
		leaves = append(leaves, issuance{ca, servingLeaf(n), p.Serving[n.Name]})
	}
	for _, l := range leaves {
		if err := l.write(); err != nil {
			return nil, err
		}
	}
	sa, err := NewCA("service-accounts") // only its key is used
	if err != nil {
		return nil, err
	}
	if err := WriteKey(p.SAPrivateKey, sa.Key); err != nil {
		return nil, err
	}
	return p, WritePublicKey(p.SAPublicKey, sa.Key)
}

func servingLeaf(n Node) Leaf {
	// kubeadm's apiserver.crt: CN kube-apiserver; the node name, the
	// kubernetes* names, the service IP and the advertise address.
	return Leaf{
		CN:     "kube-apiserver",
		IPs:    []net.IP{serviceIP, net.IP(n.IP.AsSlice())},
		DNS:    append([]string{n.Name}, apiserverDNSNames...),
		Server: true,
	}
}

func writeCA(ca *CA, certFile, keyFile string) error {
	if err := WriteCert(certFile, ca.Cert); err != nil {
		return err
	}
	return WriteKey(keyFile, ca.Key)
}

// issuance is one leaf certificate to sign and where to write it.
type issuance struct {
	ca   *CA
	leaf Leaf
	out  KeyPair
}

func (i issuance) write() error {
	cert, key, err := i.ca.Sign(i.leaf)
	if err != nil {
		return fmt.Errorf("issue %s: %w", i.leaf.CN, err)
	}
	if err := WriteCert(i.out.CertFile, cert); err != nil {
		return err
	}
	return WriteKey(i.out.KeyFile, key)
}
