package lab

import (
	"fmt"
	"strconv"
	"strings"
)

// newAPIs are, by minor, the flags with which the lab's servers of that
// minor serve group/versions their predecessor does not, where the
// release's defaults add none a drill could use. 1.36 serves
// scheduling.k8s.io/v1alpha2 (the lab's 1.35 → 1.36 skew; 1.37 serves
// v1alpha3 instead). 1.37's own new types (storagemigration.k8s.io/v1,
// certificates.k8s.io/v1 podcertificaterequests and clustertrustbundles,
// resource.k8s.io/v1 devicetaintrules) need no runtime-config. 1.38.0-beta.0
// serves by default exactly what 1.37.2 does (their aggregated discovery is
// byte-identical), so its servers serve the beta scheduling.k8s.io/v1beta1
// of gang scheduling, CompositePodGroup (beta in 1.38, not in any v1beta1
// before) and the gates it needs, as a user adopting it switches it on.
// Servers of other minors run with their defaults.
var newAPIs = map[int]newAPIsConfig{
	36: {runtimeConfig: "scheduling.k8s.io/v1alpha2=true", gates: []string{"GenericWorkload=true"}},
	38: {runtimeConfig: "scheduling.k8s.io/v1beta1=true",
		gates: []string{"GenericWorkload=true", "TopologyAwareWorkloadScheduling=true", "CompositePodGroup=true"}},
}

// newAPIsConfig is how a minor's servers serve its new group/versions.
type newAPIsConfig struct {
	runtimeConfig string
	gates         []string
}

// newAPIsFor is what minor serves beyond its defaults in spec (none with
// DefaultAPIs).
func newAPIsFor(minor int, spec Spec) (newAPIsConfig, bool) {
	c, ok := newAPIs[minor]
	return c, ok && !spec.DefaultAPIs
}

// RequestHeaderGroupHeaders are the group headers the lab's apiservers
// trust from a front proxy: kubeadm's, plus one more, as a cluster may have,
// so the tests show that skewgate strips every name the apiservers trust.
var RequestHeaderGroupHeaders = []string{"X-Remote-Group", "X-Lab-Group"}

// APIServerArgs assembles kube-apiserver's flags for node n of spec.
func APIServerArgs(spec Spec, n Node, pki *PKI) []string {
	serving := pki.Serving[n.Name]
	args := []string{
		"--etcd-servers=" + EtcdURL(),
		"--bind-address=0.0.0.0",
		fmt.Sprintf("--secure-port=%d", n.APIPort()),
		"--advertise-address=" + n.IP.String(),
		"--tls-cert-file=" + serving.CertFile,
		"--tls-private-key-file=" + serving.KeyFile,
		"--client-ca-file=" + pki.CAFile,
		"--requestheader-client-ca-file=" + pki.FrontProxyCA,
		"--requestheader-allowed-names=" + FrontProxyClientCN,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-uid-headers=X-Remote-Uid",
		"--requestheader-group-headers=" + strings.Join(RequestHeaderGroupHeaders, ","),
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + pki.FrontProxyClient.CertFile,
		"--proxy-client-key-file=" + pki.FrontProxyClient.KeyFile,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.SAPublicKey,
		"--service-account-signing-key-file=" + pki.SAPrivateKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--profiling=false",
		"--v=1",
	}
	// Each server keeps its address in default/kubernetes while it runs
	// and removes it on a graceful shutdown: skewgate's --kubeconfig
	// membership reads it. 198.18.0.0/15 is accepted.
	reconciler := "lease"
	if spec.NoEndpoints {
		reconciler = "none"
	}
	args = append(args, "--endpoint-reconciler-type="+reconciler)
	if spec.GoawayChance > 0 {
		args = append(args, "--goaway-chance="+strconv.FormatFloat(spec.GoawayChance, 'f', -1, 64))
	}
	if spec.Kubelet {
		// Kubelets run privileged pods only if the apiserver allows them;
		// logs and exec reach a kubelet by its InternalIP (no DNS here),
		// authenticated with a client certificate of the lab CA (kubeadm's
		// apiserver-kubelet-client; the lab's kubelets authorize anyone the
		// CA vouches for).
		args = append(args, "--allow-privileged=true", "--kubelet-preferred-address-types=InternalIP",
			"--kubelet-client-certificate="+pki.Admin.CertFile, "--kubelet-client-key="+pki.Admin.KeyFile)
	}
	var gates []string
	if g := inTreeProxyGate(spec.InTreeProxy, n.Minor()); g != "" {
		gates = append(gates, g)
	}
	if c, ok := newAPIsFor(n.Minor(), spec); ok {
		gates = append(gates, c.gates...)
		args = append(args, "--runtime-config="+c.runtimeConfig)
	}
	if spec.InTreeProxy {
		// The in-tree proxy dials peers by their advertise address and
		// verifies them against this CA.
		args = append(args, "--peer-ca-file="+pki.CAFile, "--peer-advertise-ip="+n.IP.String(),
			fmt.Sprintf("--peer-advertise-port=%d", n.APIPort()))
	}
	if len(gates) > 0 {
		args = append(args, "--feature-gates="+strings.Join(gates, ","))
	}
	return args
}

// inTreeProxyMinor is the first minor whose in-tree Mixed Version Proxy
// (UnknownVersionInteroperabilityProxy) is beta and on by default; it
// still does nothing without --peer-ca-file.
const inTreeProxyMinor = 36

// inTreeProxyGate is the feature-gates entry that turns the in-tree proxy
// on or off for a server of minor, or "" where on is the default: the
// lab's convention is off unless measured, and measured as users switch
// it on (from 1.36, --peer-ca-file alone).
func inTreeProxyGate(on bool, minor int) string {
	if on && minor >= inTreeProxyMinor {
		return ""
	}
	return fmt.Sprintf("UnknownVersionInteroperabilityProxy=%t", on)
}

// EtcdURL is where every node's apiserver reaches etcd.
func EtcdURL() string { return fmt.Sprintf("http://%s:%d", BridgeAddr, EtcdClientPort) }

// EtcdArgs assembles etcd's flags with its data in dataDir.
func EtcdArgs(dataDir string) []string {
	peer := fmt.Sprintf("http://%s:%d", BridgeAddr, EtcdPeerPort)
	return []string{
		"--name=skewlab",
		"--data-dir=" + dataDir,
		"--listen-client-urls=" + EtcdURL(),
		"--advertise-client-urls=" + EtcdURL(),
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=skewlab=" + peer,
		"--log-level=warn",
		// Lab data is throwaway; fsync latency would only slow every write.
		"--unsafe-no-fsync",
	}
}
