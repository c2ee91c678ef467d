// Package lab runs a real mixed-version Kubernetes control plane on one
// machine: each control-plane node is a network namespace on a bridge with its
// own kube-apiserver, and etcd runs in the root namespace on the bridge.
package lab

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"golang.org/x/mod/semver"
)

// Addresses of the lab network. 198.18.0.0/15 is reserved for benchmarking
// (RFC 2544), so it never collides with a real network the machine uses.
var (
	Subnet     = netip.MustParsePrefix("198.18.0.0/24")
	BridgeAddr = netip.MustParseAddr("198.18.0.254")
)

const (
	// BridgeName is the root-namespace bridge every node's veth is enslaved to.
	BridgeName = "skewlab0"
	// APIServerPort is where a node's kube-apiserver listens unless its
	// Port says otherwise.
	APIServerPort = 6443
	// EtcdClientPort and EtcdPeerPort are etcd's ports on BridgeAddr.
	EtcdClientPort = 2379
	EtcdPeerPort   = 2380
)

// Versions the lab builds and runs by default. Its etcd is the one
// kubeadm of a version deploys (KubeadmEtcdVersion).
const (
	OldVersion = "v1.35.4"
	NewVersion = "v1.36.3"
)

// Node is one control-plane node: a network namespace named Name with address
// IP, running kube-apiserver Version.
type Node struct {
	Name    string
	IP      netip.Addr
	Version string
	// Port is the kube-apiserver's --secure-port; 0 is APIServerPort.
	Port uint16 `json:",omitempty"`
}

// Spec describes a plane to bring up.
type Spec struct {
	Nodes []Node
	// InTreeProxy turns on kube-apiserver's own Mixed Version Proxy
	// (UnknownVersionInteroperabilityProxy) where the version has it, for
	// comparisons with skewgate.
	InTreeProxy bool
	// NoEndpoints runs every apiserver with --endpoint-reconciler-type=none,
	// as installations behind their own load balancer do: default/kubernetes
	// then lists no apiserver, and peers are found elsewhere.
	NoEndpoints bool
	// Kubelet runs, on every node, containerd and a kubelet (the node's
	// version) registered as a control-plane node, and once per plane
	// kube-controller-manager and kube-scheduler: DaemonSets run as on a
	// kubeadm cluster.
	Kubelet bool
	// Kubeadm builds the plane with kubeadm itself (implies kubelets):
	// `kubeadm init` on the first node, `kubeadm join --control-plane` on
	// the others, stacked etcd, the control plane as static pods of
	// images the lab builds, kubeadm's own PKI, a controlPlaneEndpoint VIP
	// (KubeadmVIP) on the first node. No lab etcd and no lab apiservers.
	Kubeadm bool
	// DefaultAPIs runs every server with its version's default APIs. Without
	// it, servers of a minor in newAPIs also serve what it names (1.36
	// scheduling.k8s.io/v1alpha2, the lab's 1.35 → 1.36 skew); with it, a
	// 1.36 server is what a user upgrading to 1.37 runs.
	DefaultAPIs bool `json:",omitempty"`
	// Upgrades are versions nodes may move to besides their own (an
	// upgrade's target): the kubeadm mode prepares their kubeadm, kubelet
	// and images too.
	Upgrades []string `json:",omitempty"`
	// GoawayChance is every apiserver's --goaway-chance (0: unset, as
	// kube-apiserver's default): the chance that a request on an HTTP/2
	// connection ends it with a GOAWAY, the only way a busy client's
	// connection from before a window moves through skewgate (the sweep
	// ends only quiet ones). In kubeadm mode, an apiServer.extraArgs.
	GoawayChance float64 `json:",omitempty"`
}

// DefaultSpec is node-a on the old version and node-b on the new one.
func DefaultSpec() Spec {
	s, _ := ParseNodes("node-a=" + OldVersion + ",node-b=" + NewVersion)
	return s
}

// ParseNodes parses "name=version,name=version"; addresses are assigned in
// order from .1. The returned nodes are ordered oldest version first, because
// a 1.35 server that starts after a 1.36 server deletes the 1.36 server's
// registration of new group/versions.
func ParseNodes(list string) (Spec, error) {
	var s Spec
	seen := map[string]bool{}
	for i, item := range strings.Split(list, ",") {
		name, version, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || !validNodeName(name) || !semver.IsValid(version) {
			return Spec{}, fmt.Errorf("node %q: want name=vX.Y.Z with name of [a-z0-9-], at most 11 characters", item)
		}
		if seen[name] {
			return Spec{}, fmt.Errorf("node %q listed twice", name)
		}
		seen[name] = true
		ip := Subnet.Addr().As4()
		ip[3] = byte(i + 1)
		s.Nodes = append(s.Nodes, Node{Name: name, IP: netip.AddrFrom4(ip), Version: version})
	}
	if len(s.Nodes) > 250 {
		return Spec{}, fmt.Errorf("%d nodes do not fit in %s", len(s.Nodes), Subnet)
	}
	sort.SliceStable(s.Nodes, func(i, j int) bool {
		return semver.Compare(s.Nodes[i].Version, s.Nodes[j].Version) < 0
	})
	return s, nil
}

// validNodeName keeps names usable as namespace, hostname and (with the
// "sl-" prefix) interface names, which the kernel caps at 15 bytes.
func validNodeName(name string) bool {
	if name == "" || len(name) > 11 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// URL is the node's apiserver URL as clients in the root namespace reach it.
func (n Node) URL() string { return "https://" + n.Addr().String() }

// APIPort is the port the node's kube-apiserver listens on.
func (n Node) APIPort() uint16 {
	if n.Port != 0 {
		return n.Port
	}
	return APIServerPort
}

// Addr is the node's apiserver address.
func (n Node) Addr() netip.AddrPort { return netip.AddrPortFrom(n.IP, n.APIPort()) }

// Minor is the Kubernetes minor version of the node, e.g. 35.
func (n Node) Minor() int {
	var major, minor int
	fmt.Sscanf(semver.MajorMinor(n.Version), "v%d.%d", &major, &minor)
	return minor
}

// EnvName is the node name as used in .lab/env keys: NODE_A for node-a.
func (n Node) EnvName() string {
	return strings.ToUpper(strings.ReplaceAll(n.Name, "-", "_"))
}

// EtcdRelease is the Kubernetes version whose kubeadm's etcd a plane of
// lab processes runs: the newest of its nodes' and upgrades' versions.
// kubeadm upgrades etcd before the first apiserver, so that etcd is the
// one every skew window of an upgrade sees.
func (s Spec) EtcdRelease() string {
	vs := slices.Clone(s.Upgrades)
	for _, n := range s.Nodes {
		vs = append(vs, n.Version)
	}
	return slices.MaxFunc(vs, semver.Compare)
}
