package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"text/template"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// nodeFiles are the files of one node in the kubelet mode, under
// <lab>/nodes/<node>: what a real node keeps in /etc/kubernetes,
// /var/lib/kubelet, /var/lib/containerd and so on.
type nodeFiles struct {
	node Node
	dir  string // absolute
}

func (p *Plane) nodeFiles(n Node) (nodeFiles, error) {
	dir, err := filepath.Abs(filepath.Join(p.Dir, "nodes", n.Name))
	return nodeFiles{node: n, dir: dir}, err
}

func (f nodeFiles) path(name string) string { return filepath.Join(f.dir, name) }

// KubeadmPKIDir is node n's kubeadm-named pki directory (apiserver.crt,
// ca.crt, front-proxy-*), which the node's pods see at /etc/kubernetes/pki.
func (p *Plane) KubeadmPKIDir(n Node) string { return filepath.Join(p.Dir, "nodes", n.Name, "pki") }

// StaticPodDir is node n's kubelet staticPodPath in the kubelet mode, its
// /etc/kubernetes/manifests: a pod file written there runs on the node.
func (p *Plane) StaticPodDir(n Node) string {
	return filepath.Join(p.Dir, "nodes", n.Name, "manifests")
}

// ContainerdSocket is node n's containerd socket in the kubelet mode.
func (p *Plane) ContainerdSocket(n Node) string {
	return filepath.Join(p.Dir, "nodes", n.Name, "containerd.sock")
}

// writeKubeadmPKI lays out the files kubeadm writes to /etc/kubernetes/pki
// that skewgate reads, by kubeadm's names: apiserver.crt is the node's
// serving certificate.
func (f nodeFiles) writeKubeadmPKI(pki *PKI) error {
	copies := map[string]string{
		"ca.crt":                 pki.CAFile,
		"front-proxy-ca.crt":     pki.FrontProxyCA,
		"front-proxy-client.crt": pki.FrontProxyClient.CertFile,
		"front-proxy-client.key": pki.FrontProxyClient.KeyFile,
		"apiserver.crt":          pki.Serving[f.node.Name].CertFile,
		"apiserver.key":          pki.Serving[f.node.Name].KeyFile,
	}
	for name, src := range copies {
		if err := copyFile(src, filepath.Join(f.path("pki"), name)); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, data, st.Mode().Perm())
}

// writeClientKubeconfig signs a client certificate for cn/orgs with the lab
// CA and writes a kubeconfig for it toward server.
func writeClientKubeconfig(path, server string, pki *PKI, cn string, orgs ...string) error {
	ca, err := LoadCA(pki.CAFile, pki.CAKey)
	if err != nil {
		return err
	}
	base := filepath.Join(filepath.Dir(path), filepath.Base(path)+"-client")
	kp := KeyPair{CertFile: base + ".crt", KeyFile: base + ".key"}
	if err := (issuance{ca, Leaf{CN: cn, Orgs: orgs}, kp}).write(); err != nil {
		return err
	}
	caFile, err := filepath.Abs(pki.CAFile)
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["lab"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos[cn] = &clientcmdapi.AuthInfo{ClientCertificate: kp.CertFile, ClientKey: kp.KeyFile}
	cfg.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: cn}
	cfg.CurrentContext = "lab"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// PauseImage is the lab's sandbox image, built from deploy/image/pause:
// no registry is reachable.
const PauseImage = "skewgate.lab/pause:v1"

// containerdConfig is containerd 1.6's config for one node: every path
// under the node's directory, and restrict_oom_score_adj: nothing on the
// lab's machines may lower a process's oom_score_adj.
var containerdConfig = template.Must(template.New("containerd").Parse(`version = 2
root = "{{.Dir}}/containerd/root"
state = "{{.Dir}}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "{{.Socket}}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{{.Dir}}/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.Pause}}"
  # Nothing here may lower oom_score_adj; runc otherwise fails with
  # "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    # Plain directories: no overlay mounts to leave behind.
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{.CNIBin}}"
    conf_dir = "{{.Dir}}/cni"
`))

// loopbackConflist is the only network the lab's pods get: the node turns
// Ready with a CNI config, and the DaemonSet is hostNetwork anyway.
const loopbackConflist = `{"cniVersion": "1.0.0", "name": "skewlab-loopback", "plugins": [{"type": "loopback"}]}
`

// cniBinDir is where Debian's containernetworking-plugins puts loopback.
const cniBinDir = "/usr/lib/cni"

// quietKubelet is the part of every lab kubelet's configuration that
// keeps evictions and image garbage collection from firing on a busy
// build machine.
const quietKubelet = `evictionHard:
  memory.available: 1Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`

// kubeletConfig is one node's KubeletConfiguration: cgroupfs on the
// host's cgroup v1 hybrid, every path and cgroup the lab's own, evictions
// that never fire on a busy build machine.
var kubeletConfig = template.Must(template.New("kubelet").Parse(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {{.IP}}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
cgroupDriver: cgroupfs
cgroupRoot: {{.CgroupRoot}}
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://{{.Socket}}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: {{.CA}}
authorization:
  mode: AlwaysAllow
registerWithTaints:
  - key: node-role.kubernetes.io/control-plane
    effect: NoSchedule
` + quietKubelet + `resolvConf: ""
serializeImagePulls: false
# kubeadm's /etc/kubernetes/manifests: skewgate's static-pod form.
staticPodPath: {{.Dir}}/manifests
`))

// writeContainerdConfig writes the node's containerd config, with pause
// its sandbox image, and its CNI conflist (the kubeadm mode: kubeadm
// writes the kubelet's config).
func (f nodeFiles) writeContainerdConfig(pause string) error {
	vars := map[string]string{"Dir": f.dir, "Socket": f.path("containerd.sock"), "Pause": pause, "CNIBin": cniBinDir}
	if err := renderFile(f.path("containerd.toml"), containerdConfig, vars); err != nil {
		return err
	}
	last := f.node.IP.As4()[3]
	return renderFile(f.path("cni/10-bridge.conflist"), bridgeConflist, map[string]any{
		"Subnet": fmt.Sprintf("10.244.%d.0/24", last), "Gateway": fmt.Sprintf("10.244.%d.1", last), "IPAM": f.path("cni-ipam"),
	})
}

// bridgeConflist gives pods that are not hostNetwork an address on the
// node's cni0 bridge (containerd wants an eth0 address for every sandbox;
// kubeadm's upgrade health check runs such a pod): Debian's bridge and
// host-local plugins, no masquerade (no iptables rule), the address
// leases in the node's directory.
var bridgeConflist = template.Must(template.New("bridge").Parse(`{"cniVersion": "0.4.0", "name": "skewlab-bridge", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": "{{.IPAM}}", "ranges": [[{"subnet": "{{.Subnet}}", "gateway": "{{.Gateway}}"}]]}}
]}
`))

// writeRuntimeConfigs writes the node's containerd and kubelet configs and
// its CNI conflist.
func (f nodeFiles) writeRuntimeConfigs(caFile string) error {
	ca, err := filepath.Abs(caFile)
	if err != nil {
		return err
	}
	vars := map[string]string{
		"Dir": f.dir, "Socket": f.path("containerd.sock"), "Pause": PauseImage, "CNIBin": cniBinDir,
		"IP": f.node.IP.String(), "CgroupRoot": "/" + kubeletCgroupRoot(f.node), "CA": ca,
	}
	for name, t := range map[string]*template.Template{"containerd.toml": containerdConfig, "kubelet.yaml": kubeletConfig} {
		if err := renderFile(f.path(name), t, vars); err != nil {
			return err
		}
	}
	for _, d := range []string{"cni", "manifests"} {
		if err := os.MkdirAll(f.path(d), 0o755); err != nil {
			return err
		}
	}
	return writeFile(f.path("cni/99-loopback.conflist"), loopbackConflist)
}

func renderFile(path string, t *template.Template, vars any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := t.Execute(out, vars); err != nil {
		out.Close()
		return fmt.Errorf("render %s: %w", path, err)
	}
	return out.Close()
}

// kubeletCgroupRoot is node n's kubelet cgroupRoot, the same name in every
// cgroup hierarchy.
func kubeletCgroupRoot(n Node) string { return "skewlab-" + n.Name }
