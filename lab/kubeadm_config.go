package lab

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"text/template"

	"golang.org/x/mod/semver"
)

// KubeadmVIP is the kubeadm mode's controlPlaneEndpoint: a secondary
// address on the first node's eth0, as keepalived would hold it. No node
// address takes it (ParseNodes hands out at most .1–.250).
var KubeadmVIP = netip.MustParseAddr("198.18.0.253")

// KubeadmEndpoint is the controlPlaneEndpoint, host:port.
func KubeadmEndpoint() string { return fmt.Sprintf("%s:%d", KubeadmVIP, APIServerPort) }

// KubeadmSkipPhases are the kubeadm phases the lab skips: their addons'
// images (CoreDNS, kube-proxy) are not built here, and the lab's pods need
// neither (hostNetwork, no Services used inside the cluster).
var KubeadmSkipPhases = []string{"addon/coredns", "addon/kube-proxy"}

// kubeadmIgnorePreflight are the preflight errors the lab's nodes have;
// every other check must pass (warnings stay warnings, in the log):
// ip_forward is off in a node's fresh network namespace, and nothing
// routes pods here (a loopback-only CNI); SystemVerification refuses the
// host's cgroup v1 hierarchy, which kubelet 1.35 accepts only with
// failCgroupV1: false (set) and this check skipped, as kubeadm says.
var kubeadmIgnorePreflight = []string{
	"FileContent--proc-sys-net-ipv4-ip_forward",
	"SystemVerification",
}

// kubeadmUpgradeIgnorePreflight adds, for `kubeadm upgrade`, the CoreDNS
// checks, which fail because the lab skipped the CoreDNS addon (there is
// no CoreDNS to migrate).
var kubeadmUpgradeIgnorePreflight = append(slices.Clone(kubeadmIgnorePreflight), "CoreDNSUnsupportedPlugins", "CoreDNSMigration")

// kubeadmSecrets are a plane's bootstrap token and the key that encrypts
// the certificates `kubeadm init --upload-certs` uploads.
type kubeadmSecrets struct {
	Token          string `json:"token"`
	CertificateKey string `json:"certificateKey"`
}

func newKubeadmSecrets() (kubeadmSecrets, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 22+32)
	if _, err := rand.Read(b); err != nil {
		return kubeadmSecrets{}, err
	}
	tok := make([]byte, 22)
	for i := range tok {
		tok[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return kubeadmSecrets{
		Token:          string(tok[:6]) + "." + string(tok[6:]),
		CertificateKey: hex.EncodeToString(b[22:]),
	}, nil
}

// kubeadmNodeVars are what one node's kubeadm configuration says.
type kubeadmNodeVars struct {
	Node       Node
	Version    string // kubernetesVersion (init)
	Endpoint   string
	CRISocket  string
	CgroupRoot string
	Secrets    kubeadmSecrets
	CAHash     string // join
	Skip       []string
	Ignore     []string
	// InTreeProxy turns kube-apiserver's Mixed Version Proxy on (Spec).
	InTreeProxy bool
	// GoawayChance is kube-apiserver's --goaway-chance ("": unset; Spec).
	GoawayChance string
}

// Prerelease says whether Version is a pre-release (alpha, beta, rc).
func (v kubeadmNodeVars) Prerelease() bool { return semver.Prerelease(v.Version) != "" }

// ProxyGate is the feature-gates value the in-tree proxy's setting needs
// on Version ("" at the gate's default).
func (v kubeadmNodeVars) ProxyGate() string {
	return inTreeProxyGate(v.InTreeProxy, Node{Version: v.Version}.Minor())
}

func (p *Plane) kubeadmVars(f nodeFiles, s kubeadmSecrets) kubeadmNodeVars {
	v := kubeadmNodeVars{
		Node: f.node, Version: f.node.Version, Endpoint: KubeadmEndpoint(),
		CRISocket: "unix://" + f.path("containerd.sock"), CgroupRoot: "/" + kubeletCgroupRoot(f.node),
		Secrets: s, Skip: KubeadmSkipPhases, Ignore: kubeadmIgnorePreflight,
		InTreeProxy: p.Spec.InTreeProxy,
	}
	if p.Spec.GoawayChance > 0 {
		v.GoawayChance = strconv.FormatFloat(p.Spec.GoawayChance, 'f', -1, 64)
	}
	return v
}

// nodeRegistration is shared by init and join: the node's containerd,
// its address and the cgroup root of its kubelet (each lab kubelet needs
// its own: a kubelet removes pod cgroups it does not know); nothing is
// pulled (imagePullPolicy Never: a missing image fails preflight).
const nodeRegistration = `nodeRegistration:
  name: {{.Node.Name}}
  criSocket: {{.CRISocket}}
  imagePullPolicy: Never
  kubeletExtraArgs:
    - name: node-ip
      value: "{{.Node.IP}}"
    - name: cgroup-root
      value: {{.CgroupRoot}}
  ignorePreflightErrors:{{range .Ignore}}
    - {{.}}{{end}}
`

// kubeletConfiguration is the cluster's KubeletConfiguration (kubeadm
// uploads it to kube-system/kubelet-config): what the lab's host needs,
// the rest kubeadm's defaults.
const kubeletConfiguration = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The host is a cgroup v1 hybrid without systemd managing the lab.
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
` + quietKubelet + `serializeImagePulls: false
resolvConf: ""
`

var kubeadmInitConfig = template.Must(template.New("init").Parse(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
bootstrapTokens:
  - token: {{.Secrets.Token}}
    ttl: 2h0m0s
certificateKey: {{.Secrets.CertificateKey}}
localAPIEndpoint:
  advertiseAddress: {{.Node.IP}}
  bindPort: 6443
` + nodeRegistration + `skipPhases:{{range .Skip}}
  - {{.}}{{end}}
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: skewlab
kubernetesVersion: {{.Version}}
controlPlaneEndpoint: {{.Endpoint}}
# No etcd imageTag: kubeadm deploys its own release's etcd, and upgrades it
# on "kubeadm upgrade apply", as it does for users.
apiServer:
  extraArgs:
    # The lab's convention: the in-tree Mixed Version Proxy off unless
    # measured. On, as users switch it on (from 1.36 the gate at its
    # default, on, and this one argument kubeadm does not set), it dials
    # peers at their advertise address (the default of
    # --peer-advertise-ip) and verifies them with kubeadm's CA; kubeadm's
    # apiserver.crt has the SAN kubernetes.default.svc it asks.
{{- with .ProxyGate}}
    - name: feature-gates
      value: {{.}}
{{- end}}
{{- if .InTreeProxy}}
    - name: peer-ca-file
      value: /etc/kubernetes/pki/ca.crt
{{- end}}
{{- with .GoawayChance}}
    - name: goaway-chance
      value: "{{.}}"
{{- end}}
---
` + kubeletConfiguration))

var kubeadmJoinConfig = template.Must(template.New("join").Parse(`apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    token: {{.Secrets.Token}}
    apiServerEndpoint: {{.Endpoint}}
    caCertHashes:
      - {{.CAHash}}
controlPlane:
  localAPIEndpoint:
    advertiseAddress: {{.Node.IP}}
    bindPort: 6443
  certificateKey: {{.Secrets.CertificateKey}}
` + nodeRegistration))

// kubeadmUpgradeConfig is `kubeadm upgrade apply`'s (with --yes): the
// same skipped addons, nothing pulled.
var kubeadmUpgradeConfig = template.Must(template.New("upgrade").Parse(`apiVersion: kubeadm.k8s.io/v1beta4
kind: UpgradeConfiguration
apply:
  kubernetesVersion: {{.Version}}
{{- if .Prerelease}}
  # kubeadm refuses a pre-release target (v1.38.0-beta.0) unless allowed.
  allowExperimentalUpgrades: true
{{- end}}
  imagePullPolicy: Never
  ignorePreflightErrors:{{range .Ignore}}
    - {{.}}{{end}}
  skipPhases:{{range .Skip}}
    - {{.}}{{end}}
node:
  imagePullPolicy: Never
  ignorePreflightErrors:{{range .Ignore}}
    - {{.}}{{end}}
`))

// caCertHash is kubeadm's --discovery-token-ca-cert-hash of a CA
// certificate: sha256 of its SubjectPublicKeyInfo.
func caCertHash(caFile string) (string, error) {
	data, err := os.ReadFile(caFile)
	if err != nil {
		return "", err
	}
	b, _ := pem.Decode(data)
	if b == nil {
		return "", fmt.Errorf("%s: no PEM", caFile)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return "", fmt.Errorf("%s: %w", caFile, err)
	}
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
