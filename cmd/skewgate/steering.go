package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/agent"
	"github.com/skewgate/skewgate/forward"
)

// steerOptions are `skewgate run`'s steering flags.
type steerOptions struct {
	enabled bool
	address string
	pinPath string
}

func (s *steerOptions) addFlags(f *pflag.FlagSet) {
	f.BoolVar(&s.enabled, "steering", false, "steer new connections for --steer-address into the proxy with eBPF (sk_lookup), failing open")
	f.StringVar(&s.address, "steer-address", "", "address:port whose new connections are steered (default: the local apiserver's host, port 6443)")
	f.StringVar(&s.pinPath, "pin-path", "/sys/fs/bpf/skewgate", "bpffs directory for skewgate's maps, programs and links")
}

// steering is what run keeps of the kernel side.
type steering struct {
	st     *agent.Steering
	cs     *agent.ConnStat
	reason string
}

func (s *steering) status() any {
	if s.st == nil {
		return map[string]string{"state": "disabled", "reason": s.reason}
	}
	out := map[string]string{"steering": s.st.Status().String()}
	if s.cs != nil {
		out["connstat"] = s.cs.Status().String()
	}
	return out
}

func (s *steering) close() {
	if s.st != nil {
		s.st.Close()
	}
	if s.cs != nil {
		s.cs.Close()
	}
}

// listen opens the proxy's listener (never MPTCP, which a SOCKMAP refuses)
// and, with --steering, installs steering and connection stats. A machine
// that cannot steer still proxies: the status says why steering is off.
func (s *steerOptions) listen(ctx context.Context, addr string, local string, peers []string,
	trust forward.Trust, reg prometheus.Registerer, log *slog.Logger) (net.Listener, *steering, error) {
	ln, err := agent.NewListener(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--bind-address/--secure-port: %w", err)
	}
	if !s.enabled {
		return ln, &steering{reason: "--steering=false"}, nil
	}
	target, exempt, err := s.targets(local, peers)
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	st, err := agent.StartSteering(ctx, agent.SteeringConfig{
		PinPath: s.pinPath, Targets: []netip.AddrPort{target}, Exempt: exempt,
		Probe: probeThroughProxy(target, trust),
	}, ln)
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("steering: %w", err)
	}
	reg.MustRegister(st)
	out := &steering{st: st}
	cs, err := agent.StartConnStat(agent.ConnStatConfig{
		PinPath: s.pinPath, ProxyPort: uint16(ln.Addr().(*net.TCPAddr).Port),
		UpstreamPort: target.Port(), Clients: []netip.Prefix{netip.PrefixFrom(target.Addr(), target.Addr().BitLen())},
	})
	if err == nil {
		reg.MustRegister(cs)
		out.cs = cs
	}
	if st.Status().State == agent.StateDisabled {
		log.Warn("steering disabled; proxying clients that reach the listener directly", "reason", st.Status().String())
	} else {
		log.Info("steering installed", "target", target.String(), "pins", s.pinPath)
	}
	return ln, out, nil
}

// targets resolves the steered address and the exempt sources: every peer,
// so a peer's forwarded request reaches this node's apiserver, never a
// second proxy.
func (s *steerOptions) targets(local string, peers []string) (netip.AddrPort, []netip.Prefix, error) {
	addr := s.address
	if addr == "" {
		if ip, err := netip.ParseAddr(local); err != nil || ip.IsLoopback() {
			return netip.AddrPort{}, nil, fmt.Errorf("--steer-address is required with --steering when --local-apiserver (%s) is not the node's IP", local)
		}
		addr = net.JoinHostPort(local, "6443")
	}
	target, err := netip.ParseAddrPort(addr)
	if err != nil {
		return target, nil, fmt.Errorf("--steer-address %q: want ip:port", addr)
	}
	var exempt []netip.Prefix
	for _, p := range peers {
		if a, err := netip.ParseAddr(p); err == nil {
			exempt = append(exempt, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return target, exempt, nil
}

// errNotProxy is a probe answered by the apiserver itself: steering lapsed.
var errNotProxy = errors.New("steered address answered without skewgate")

// probeThroughProxy checks the steered path end to end: a TLS request to
// the target must be answered by this proxy (it sets X-Skewgate-Route).
func probeThroughProxy(target netip.AddrPort, trust forward.Trust) func(context.Context) error {
	u := "https://" + target.String() + "/healthz"
	b := forward.NewBackend("probe", mustURL(u), trust)
	client := &http.Client{Transport: b.Transport(), Timeout: time.Second}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		// A fresh connection each time: only new connections are steered.
		req.Close = true
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.Header.Get(forward.HeaderRoute) == "" {
			return errNotProxy
		}
		return nil
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err) // built from a netip.AddrPort: cannot fail
	}
	return u
}
