package lab

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"time"
)

// Ports of a skewgate running on a lab node.
const (
	SkewgatePort      = 16443
	SkewgateAdminPort = 16444
)

// SkewgateURL is where clients in the root namespace reach node n's
// skewgate directly (without steering).
func SkewgateURL(n Node) string { return fmt.Sprintf("https://%s:%d", n.IP, SkewgatePort) }

// SkewgateAdminURL is node n's skewgate admin listener.
func SkewgateAdminURL(n Node) string { return fmt.Sprintf("http://%s:%d", n.IP, SkewgateAdminPort) }

// SkewgatePinPath is node n's bpffs pin directory: one per node, so the
// agents of several lab nodes on one kernel never share maps.
func SkewgatePinPath(n Node) string { return "/sys/fs/bpf/skewgate-lab-" + n.Name }

// SkewgateMode chooses how a lab skewgate runs.
type SkewgateMode struct {
	// Steering steers the node's apiserver address (IP:port) into skewgate.
	Steering bool
	// Kubeconfig makes skewgate find its peers in the cluster (the
	// default/kubernetes EndpointSlices and the apiserver identity leases)
	// instead of a --peers list.
	Kubeconfig bool
	// ExemptPeers exempts the peers' addresses from steering
	// (--steer-exempt-peers).
	ExemptPeers bool
	// Exempt are sources never steered (--steer-exempt), such as a
	// benchmark's address for direct connections.
	Exempt []string
	// SteeringMode is --steering-mode ("": skewgate's default, auto, as
	// users run it); tests that need steering whatever the plane say
	// "always".
	SteeringMode string
	// Extra are further flags.
	Extra []string
	// Env is added to skewgate's environment, such as the
	// SKEWGATE_MEMORY_LIMIT the DaemonSet sets from the container's limit.
	Env []string
}

// SkewgateArgs are `skewgate run` flags for a skewgate in front of node n:
// it reaches its own apiserver on loopback (never steered) and every other
// node's apiserver as a peer.
func (p *Plane) SkewgateArgs(n Node, mode SkewgateMode) []string {
	membership := "--kubeconfig=" + KubeconfigPath(p.Dir, n.Name)
	if !mode.Kubeconfig {
		var peers []string
		for _, o := range p.Spec.Nodes {
			if o.Name != n.Name {
				peers = append(peers, o.URL())
			}
		}
		membership = "--peers=" + strings.Join(peers, ",")
		// Without a kubeconfig skewgate cannot read the names the
		// apiservers publish: the operator gives them, as here.
		args := append(p.skewgateBaseArgs(n), "--requestheader-group-headers="+strings.Join(RequestHeaderGroupHeaders, ","))
		return append(p.modeArgs(n, mode, args), membership)
	}
	return append(p.modeArgs(n, mode, p.skewgateBaseArgs(n)), membership)
}

// modeArgs adds mode's steering flags to args.
func (p *Plane) modeArgs(n Node, mode SkewgateMode, args []string) []string {
	if mode.Steering {
		args = append(args, SteeringArgs(n)...)
	}
	if mode.ExemptPeers {
		args = append(args, "--steer-exempt-peers")
	}
	if len(mode.Exempt) > 0 {
		args = append(args, "--steer-exempt="+strings.Join(mode.Exempt, ","))
	}
	if mode.SteeringMode != "" {
		args = append(args, "--steering-mode="+mode.SteeringMode)
	}
	return append(args, mode.Extra...)
}

func (p *Plane) skewgateBaseArgs(n Node) []string {
	serving := p.PKI.Serving[n.Name]
	return []string{"run",
		"--bind-address=" + n.IP.String(),
		fmt.Sprintf("--secure-port=%d", SkewgatePort),
		fmt.Sprintf("--metrics-bind-address=%s", netip.AddrPortFrom(n.IP, SkewgateAdminPort)),
		"--tls-cert-file=" + serving.CertFile,
		"--tls-private-key-file=" + serving.KeyFile,
		"--client-ca-file=" + p.PKI.CAFile,
		"--requestheader-client-ca-file=" + p.PKI.FrontProxyCA,
		"--proxy-client-cert-file=" + p.PKI.FrontProxyClient.CertFile,
		"--proxy-client-key-file=" + p.PKI.FrontProxyClient.KeyFile,
		"--peer-ca-file=" + p.PKI.CAFile,
		fmt.Sprintf("--local-apiserver=https://127.0.0.1:%d", n.APIPort()),
		"--state-file=" + p.SkewgateStateFile(n),
		"--profiling", // make bench reads CPU profiles
		// The lab's nodes swap binaries, with no static-pod manifest; a
		// manifest on the host would be another cluster's.
		"--apiserver-manifest=",
		"--node-name=" + n.Name,
	}
}

// skewgateStateDir holds every lab skewgate's --state-file.
const skewgateStateDir = "skewgate-state"

// SkewgateStateFile is node n's skewgate --state-file.
func (p *Plane) SkewgateStateFile(n Node) string {
	return filepath.Join(p.Dir, skewgateStateDir, n.Name+".json")
}

// SteeringArgs are the flags that make node n's skewgate steer n's
// addresses into itself, with its own pin path. --steer-address is left
// to its default: every global address of the node (eth0's, cni0's), on
// the local apiserver's port (no manifest: --local-apiserver's).
func SteeringArgs(n Node) []string {
	return []string{"--steering", "--pin-path=" + SkewgatePinPath(n)}
}

// StartSkewgate starts skewgate (bin) inside node name's namespace in front
// of its apiserver, as mode says; records it
// (and its pins) for tear-down; and waits until its admin /readyz passes.
func (p *Plane) StartSkewgate(ctx context.Context, name, bin string, mode SkewgateMode, timeout time.Duration) (Proc, error) {
	n, ok := p.Node(name)
	if !ok {
		return Proc{}, fmt.Errorf("no node %s", name)
	}
	args := p.SkewgateArgs(n, mode)
	if mode.Steering {
		if err := p.State.addPins(SkewgatePinPath(n)); err != nil {
			return Proc{}, err
		}
	}
	proc, err := startProcessEnv("skewgate-"+n.Name, bin, args, mode.Env, NetNSPath(n.Name), "", p.logFile("skewgate-"+n.Name))
	if err != nil {
		return Proc{}, err
	}
	if err := p.State.setProc(proc); err != nil {
		return proc, err
	}
	ready := func(ctx context.Context) (bool, string) {
		code, body, err := get(ctx, http.DefaultClient, SkewgateAdminURL(n)+"/readyz")
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, strings.TrimSpace(body)
	}
	return proc, waitReady(ctx, proc, timeout, ready)
}

// SkewgateEnv are the .lab/env variables of the nodes' skewgates.
func (p *Plane) SkewgateEnv() map[string]string {
	e := map[string]string{}
	for _, n := range p.Spec.Nodes {
		k := "LAB_" + n.EnvName() + "_"
		e[k+"PIN_PATH"] = SkewgatePinPath(n)
		e[k+"METRICS_URL"] = SkewgateAdminURL(n) + "/metrics"
		e[k+"ADMIN_URL"] = SkewgateAdminURL(n)
		e[k+"SKEWGATE_URL"] = SkewgateURL(n)
	}
	return e
}
