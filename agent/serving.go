package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// DefaultAPIServerPort is kube-apiserver's --secure-port when none is given,
// DefaultRequestTimeout its --request-timeout.
const (
	DefaultAPIServerPort  = 6443
	DefaultRequestTimeout = time.Minute
)

// Serving is where this node's kube-apiserver accepts connections, as its
// static-pod manifest says: the addresses and port skewgate must steer, and
// the one it must reach its local apiserver on.
type Serving struct {
	// Manifest is the file it was read from, for messages.
	Manifest string
	// Port is --secure-port (DefaultAPIServerPort when not given).
	Port uint16
	// Bind is --bind-address. Unspecified (not given, 0.0.0.0 or ::)
	// means every address of the node, both families: Go listens on a
	// dual-stack socket then, so sk_lookup sees connections to any of
	// them, a VIP on lo included.
	Bind netip.Addr
	// Advertise is --advertise-address; invalid when not given.
	Advertise netip.Addr
	// RequestTimeout is --request-timeout (DefaultRequestTimeout when not
	// given): the longest the apiserver works on a request that is not
	// long-running, its queue time included (see ResetQuiet).
	RequestTimeout time.Duration
}

// AllAddresses reports whether the apiserver listens on every address.
func (s Serving) AllAddresses() bool { return !s.Bind.IsValid() || s.Bind.IsUnspecified() }

// String reads like "port 6444, every address (from /etc/kubernetes/manifests/kube-apiserver.yaml)".
func (s Serving) String() string {
	where := "every address"
	if !s.AllAddresses() {
		where = "only " + s.Bind.String()
	}
	return fmt.Sprintf("port %d, %s (%s)", s.Port, where, s.Manifest)
}

// ReadServing reads the kube-apiserver static-pod manifest at path. It
// returns nil and no error when path is empty or names no file (not a
// kubeadm node, or the manifest not written yet): the caller keeps its
// defaults. A manifest that exists but cannot be read is an error naming
// the file, not a reason to guess.
func ReadServing(path string) (*Serving, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--apiserver-manifest: %w", err)
	}
	s, err := ParseServing(data)
	if err != nil {
		return nil, fmt.Errorf("--apiserver-manifest %s: %w", path, err)
	}
	s.Manifest = path
	return &s, nil
}

// ParseServing reads --secure-port, --bind-address, --advertise-address and
// --request-timeout from the kube-apiserver container of a static-pod manifest (command and
// args, "--flag=value" or "--flag value", the last one winning as pflag
// has it). A port or bind address it cannot read, such as a $(VAR) the
// kubelet would expand, is an error naming the flag.
func ParseServing(data []byte) (Serving, error) {
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return Serving{}, fmt.Errorf("parse manifest: %w", err)
	}
	i := -1
	for j, c := range pod.Spec.Containers {
		if c.Name == "kube-apiserver" {
			i = j
		}
	}
	if i < 0 {
		return Serving{}, errors.New("no container kube-apiserver")
	}
	c := pod.Spec.Containers[i]
	flags := apiserverFlags(append(append([]string(nil), c.Command...), c.Args...))
	s := Serving{Port: DefaultAPIServerPort, RequestTimeout: DefaultRequestTimeout}
	if v, ok := flags["secure-port"]; ok {
		p, err := strconv.ParseUint(v, 10, 16)
		if err != nil || p == 0 {
			return Serving{}, fmt.Errorf("kube-apiserver --secure-port=%q: want a port skewgate can steer (1-65535)", v)
		}
		s.Port = uint16(p)
	}
	if v := flags["bind-address"]; v != "" {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return Serving{}, fmt.Errorf("kube-apiserver --bind-address=%q: not an IP address", v)
		}
		s.Bind = a.Unmap()
	}
	if v, ok := flags["request-timeout"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return Serving{}, fmt.Errorf("kube-apiserver --request-timeout=%q: want a positive duration", v)
		}
		s.RequestTimeout = d
	}
	// The advertise address only picks the address probed through: one
	// that is not an address ($(POD_IP)) leaves the choice to the node.
	if a, err := netip.ParseAddr(flags["advertise-address"]); err == nil {
		s.Advertise = a.Unmap()
	}
	return s, nil
}

// apiserverFlags maps the long flags among args to their values.
func apiserverFlags(args []string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok || name == "" {
			continue
		}
		if k, v, ok := strings.Cut(name, "="); ok {
			out[k] = v
		} else if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			out[name] = args[i+1]
			i++
		}
	}
	return out
}

// CheckLocal returns an error when local (--local-apiserver's host:port)
// is not where the apiserver serves: another port (kubeadm's bindPort 6444
// behind an HAProxy on 6443 — skewgate would take HAProxy for its
// apiserver, and route on the discovery of whichever server it picked),
// or an address it does not bind. A host name is not checked.
func (s Serving) CheckLocal(local string) error {
	host, portStr, err := net.SplitHostPort(local)
	if err != nil {
		return nil // the URL's own check names it
	}
	if port, err := strconv.ParseUint(portStr, 10, 16); err == nil && uint16(port) != s.Port {
		return fmt.Errorf("--local-apiserver names port %d, but this node's kube-apiserver serves on %d (--secure-port in %s): "+
			"whatever listens on %d (an HAProxy or a load balancer in front of the apiservers?) is not this node's apiserver; "+
			"set --local-apiserver=https://127.0.0.1:%d, or leave it unset to follow the manifest", port, s.Port, s.Manifest, port, s.Port)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || s.AllAddresses() || ip.Unmap() == s.Bind {
		return nil
	}
	return fmt.Errorf("--local-apiserver names %s, but this node's kube-apiserver listens only on %s (--bind-address in %s)", host, s.Bind, s.Manifest)
}

// LocalURL is the URL skewgate reaches this node's apiserver on when
// --local-apiserver is not given: loopback on its port, which skewgate
// never steers. An apiserver bound to one address other than loopback can
// be reached only there; with steering that address is steered, and
// skewgate's own requests would come back to itself: an error says so.
func (s Serving) LocalURL(steering bool) (string, error) {
	switch {
	case s.AllAddresses():
		return "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(int(s.Port))), nil
	case s.Bind.IsLoopback() || !steering:
		return "https://" + net.JoinHostPort(s.Bind.String(), strconv.Itoa(int(s.Port))), nil
	}
	return "", fmt.Errorf("this node's kube-apiserver listens only on %s (--bind-address in %s), the address skewgate would steer: "+
		"skewgate could not reach it except through itself; bind it to every address (0.0.0.0, kubeadm's default), "+
		"or run skewgate without --steering behind a load balancer", s.Bind, s.Manifest)
}
