package lab

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
)

// adoptKubeadmPKI lays kubeadm's PKI out under the lab's pki directory by
// the lab's names, so the lab's clients, env and kubeconfigs work as in
// the other modes: the CAs, front-proxy client and service-account keys
// of the first node, each node's apiserver.crt as its serving pair, the
// admin credentials of admin.conf, and a lab-user certificate signed with
// kubeadm's CA.
func (p *Plane) adoptKubeadmPKI() error {
	pki := NewPKIPaths(filepath.Join(p.Dir, "pki"), p.Spec.Nodes)
	first := filepath.Join(p.KubeadmDir(p.Spec.Nodes[0]), "pki")
	copies := map[string]string{
		"ca.crt": pki.CAFile, "ca.key": pki.CAKey,
		"front-proxy-ca.crt": pki.FrontProxyCA, "front-proxy-ca.key": pki.FrontProxyCAKey,
		"front-proxy-client.crt": pki.FrontProxyClient.CertFile, "front-proxy-client.key": pki.FrontProxyClient.KeyFile,
		"sa.pub": pki.SAPublicKey, "sa.key": pki.SAPrivateKey,
	}
	for src, dst := range copies {
		if err := copyFile(filepath.Join(first, src), dst); err != nil {
			return fmt.Errorf("adopt kubeadm pki: %w", err)
		}
	}
	for _, n := range p.Spec.Nodes {
		dir := filepath.Join(p.KubeadmDir(n), "pki")
		kp := pki.Serving[n.Name]
		if err := copyFile(filepath.Join(dir, "apiserver.crt"), kp.CertFile); err != nil {
			return err
		}
		if err := copyFile(filepath.Join(dir, "apiserver.key"), kp.KeyFile); err != nil {
			return err
		}
	}
	if err := writeAdminFromKubeconfig(filepath.Join(p.KubeadmDir(p.Spec.Nodes[0]), "admin.conf"), pki.Admin); err != nil {
		return err
	}
	ca, err := LoadCA(pki.CAFile, pki.CAKey)
	if err != nil {
		return err
	}
	if err := (issuance{ca, Leaf{CN: UserCN}, pki.User}).write(); err != nil {
		return err
	}
	p.PKI = pki
	return nil
}

// writeAdminFromKubeconfig writes the client certificate and key of the
// kubeconfig's current user (kubeadm embeds them) to kp.
func writeAdminFromKubeconfig(path string, kp KeyPair) error {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return fmt.Errorf("%s: no current context", path)
	}
	user, ok := cfg.AuthInfos[ctx.AuthInfo]
	if !ok || len(user.ClientCertificateData) == 0 || len(user.ClientKeyData) == 0 {
		return fmt.Errorf("%s: no embedded client certificate", path)
	}
	if err := os.WriteFile(kp.CertFile, user.ClientCertificateData, 0o644); err != nil {
		return err
	}
	return os.WriteFile(kp.KeyFile, user.ClientKeyData, 0o600)
}
