package lab

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// EnvPath is the shell-sourceable file describing the plane in dir.
func EnvPath(dir string) string { return filepath.Join(dir, "env") }

// KubeconfigPath is node name's admin kubeconfig in dir.
func KubeconfigPath(dir, name string) string {
	return filepath.Join(dir, "kubeconfig", name+".kubeconfig")
}

// Env is the plane described as variables, one per line in .lab/env. Extra
// carries variables other components add (skewgate's pin paths, say).
func (p *Plane) Env() map[string]string {
	e := map[string]string{
		"LAB_CA_FILE":          p.PKI.CAFile,
		"LAB_ADMIN_CERT":       p.PKI.Admin.CertFile,
		"LAB_ADMIN_KEY":        p.PKI.Admin.KeyFile,
		"LAB_USER_CERT":        p.PKI.User.CertFile,
		"LAB_USER_KEY":         p.PKI.User.KeyFile,
		"LAB_FRONT_PROXY_CA":   p.PKI.FrontProxyCA,
		"LAB_FRONT_PROXY_CERT": p.PKI.FrontProxyClient.CertFile,
		"LAB_FRONT_PROXY_KEY":  p.PKI.FrontProxyClient.KeyFile,
		"LAB_ETCD_URL":         EtcdURL(),
	}
	var names []string
	for _, n := range p.Spec.Nodes {
		names = append(names, n.Name)
		k := "LAB_" + n.EnvName() + "_"
		e[k+"URL"] = n.URL()
		e[k+"IP"] = n.IP.String()
		e[k+"VERSION"] = n.Version
		e[k+"SERVING_CERT"] = p.PKI.Serving[n.Name].CertFile
		e[k+"SERVING_KEY"] = p.PKI.Serving[n.Name].KeyFile
		e[k+"KUBECONFIG"] = KubeconfigPath(p.Dir, n.Name)
		e[k+"NETNS"] = NetNSPath(n.Name)
	}
	e["LAB_NODES"] = strings.Join(names, " ")
	return e
}

// FormatEnv renders vars as sorted `export KEY='value'` lines.
func FormatEnv(vars map[string]string) string {
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# Written by skewlab up; source it: . .lab/env\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(vars[k]))
	}
	return b.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// ParseEnv reads a file written by FormatEnv back into variables.
func ParseEnv(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimPrefix(sc.Text(), "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		vars[k] = strings.ReplaceAll(strings.Trim(v, "'"), `'\''`, "'")
	}
	return vars, sc.Err()
}

// WriteEnv writes the plane's env file, merging extra variables in.
func (p *Plane) WriteEnv(extra map[string]string) error {
	vars := p.Env()
	for k, v := range extra {
		vars[k] = v
	}
	return writeFile(EnvPath(p.Dir), FormatEnv(vars))
}

func (p *Plane) writeClientFiles(extra map[string]string) error {
	for _, n := range p.Spec.Nodes {
		if err := writeKubeconfig(KubeconfigPath(p.Dir, n.Name), n, p.PKI); err != nil {
			return err
		}
	}
	return p.WriteEnv(extra)
}

// writeKubeconfig writes an admin kubeconfig for node n.
func writeKubeconfig(path string, n Node, pki *PKI) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	// The paths are absolute: Up and Open make the plane's directory so
	// (kubectl resolves a kubeconfig's relative paths from its own folder).
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["lab"] = &clientcmdapi.Cluster{Server: n.URL(), CertificateAuthority: pki.CAFile}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificate: pki.Admin.CertFile, ClientKey: pki.Admin.KeyFile}
	cfg.Contexts[n.Name] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: "admin"}
	cfg.CurrentContext = n.Name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }
