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
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/agent"
	"github.com/skewgate/skewgate/forward"
	"github.com/skewgate/skewgate/route"
)

// steerOptions are `skewgate run`'s steering flags.
type steerOptions struct {
	enabled     bool
	address     string
	pinPath     string
	exempt      []string
	exemptPeers bool
}

func (s *steerOptions) addFlags(f *pflag.FlagSet) {
	f.BoolVar(&s.enabled, "steering", false, "steer new connections for --steer-address into the proxy with eBPF (sk_lookup), failing open")
	f.StringVar(&s.address, "steer-address", "", "address:port whose new connections are steered (default: <node-ip>:6443, the node's only global address)")
	f.StringVar(&s.pinPath, "pin-path", "/sys/fs/bpf/skewgate", "bpffs directory for skewgate's maps, programs and links")
	f.StringSliceVar(&s.exempt, "steer-exempt", nil, "source addresses or CIDRs whose connections are never steered, comma-separated")
	f.BoolVar(&s.exemptPeers, "steer-exempt-peers", false, "never steer connections from peer apiservers' addresses, so a peer's forwarded request skips this node's skewgate; "+
		"only for peers whose addresses carry nothing else: a load balancer on a peer node would bypass skewgate too")
}

// steering is what run keeps of the kernel side.
type steering struct {
	opts   *steerOptions
	target netip.AddrPort
	exempt []netip.Prefix
	ln     *net.TCPListener
	cs     *agent.ConnStat
	reason string // why there is no steering, while there is none

	mu sync.Mutex
	st *agent.Steering
}

func (s *steering) status() any {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	if s.st == nil {
		out["steering"] = s.reason
	} else {
		out["steering"] = s.st.Status().String()
	}
	if s.cs != nil {
		out["connstat"] = s.cs.Status().String()
	}
	return out
}

func (s *steering) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st != nil {
		s.st.Close()
	}
	if s.cs != nil {
		s.cs.Close()
	}
}

// listen opens the proxy's listener (never MPTCP, which a SOCKMAP refuses)
// and, with --steering, attaches connection stats at once, so the first
// connections to every apiserver are counted. Steering itself comes later
// (engage). A machine that cannot run BPF still proxies: the status says why.
func (o *steerOptions) listen(addr, local string, peers []string, reg prometheus.Registerer) (*net.TCPListener, *steering, error) {
	ln, err := agent.NewListener(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--bind-address/--secure-port: %w", err)
	}
	s := &steering{opts: o, ln: ln, reason: "disabled: --steering=false"}
	if !o.enabled {
		return ln, s, nil
	}
	if !o.exemptPeers {
		peers = nil
	}
	if s.target, s.exempt, err = o.targets(local, peers); err != nil {
		ln.Close()
		return nil, nil, err
	}
	s.reason = "waiting until skewgate is ready"
	cs, err := agent.StartConnStat(agent.ConnStatConfig{
		PinPath: o.pinPath, ProxyPort: uint16(ln.Addr().(*net.TCPAddr).Port), UpstreamPort: s.target.Port(),
		Clients: []netip.Prefix{netip.PrefixFrom(s.target.Addr(), s.target.Addr().BitLen())},
	})
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("connstat: %w", err)
	}
	reg.MustRegister(cs)
	s.cs = cs
	return ln, s, nil
}

// engage installs steering once ready passes: a proxy that does not yet
// know what every server serves would answer false 404s, so it gets no
// connections until it does. Each lease renewal checks ready again.
func (s *steering) engage(ctx context.Context, ready func() error, table func() *route.Table, trust forward.Trust, reg prometheus.Registerer, log *slog.Logger) {
	if !s.opts.enabled {
		return
	}
	for ready() != nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	steered := probeProxy(s.target, s.target, trust)
	direct := probeProxy(listenerAddr(s.ln, s.target.Addr()), s.target, trust)
	st, err := agent.StartSteering(ctx, agent.SteeringConfig{
		PinPath: s.opts.pinPath, Targets: []netip.AddrPort{s.target}, Exempt: s.exempt,
		Probe: func(ctx context.Context, isSteered bool) error {
			if err := ready(); err != nil {
				return err
			}
			if isSteered {
				return steered(ctx)
			}
			return direct(ctx)
		},
	}, s.ln)
	if err != nil { // an invalid configuration: flags were checked, so a bug
		log.Error("steering not installed", "err", err)
		return
	}
	reg.MustRegister(st)
	s.mu.Lock()
	s.st = st
	s.mu.Unlock()
	if st.Status().State == agent.StateDisabled {
		log.Warn("steering disabled; proxying clients that reach the listener directly", "reason", st.Status().String())
		return
	}
	log.Info("steering installed", "target", s.target.String(), "pins", s.opts.pinPath)
	if s.opts.exemptPeers {
		go s.followPeers(ctx, st, table, log)
	}
}

// followPeers keeps every member's address exempt from steering
// (--steer-exempt-peers), peers found in the cluster included, so their
// forwarded requests reach this node's apiserver without a second proxy.
func (s *steering) followPeers(ctx context.Context, st *agent.Steering, table func() *route.Table, log *slog.Logger) {
	var last []netip.Prefix
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		want := exemptFor(s.exempt, table(), s.target.Addr())
		if !slices.Equal(want, last) {
			if err := st.SetExempt(want); err != nil {
				log.Error("steering: exempt peers", "err", err)
			} else {
				last = want
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// exemptFor is static plus the address of every peer in t, sorted, but
// never the steered address: clients on this node connect from it, and
// exempting it would let them bypass skewgate.
func exemptFor(static []netip.Prefix, t *route.Table, steered netip.Addr) []netip.Prefix {
	set := map[netip.Prefix]bool{}
	for _, p := range static {
		set[p] = true
	}
	if t != nil {
		for _, p := range t.Peers {
			if ap, err := netip.ParseAddrPort(p.ID); err == nil {
				a := ap.Addr().Unmap()
				set[netip.PrefixFrom(a, a.BitLen())] = true
			}
		}
	}
	out := make([]netip.Prefix, 0, len(set))
	for p := range set {
		if !p.Contains(steered.Unmap()) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out
}

// targets resolves the steered address and the exempt sources:
// --steer-exempt and the given peers. local is the local apiserver's
// host:port, which must not be steered: skewgate's own requests to it would
// come back to skewgate.
//
// Peers are not exempt by default. Their forwarded requests are then steered
// into this node's skewgate, which answers them locally (rule 2: a verified
// peer's request is never proxied again), at the cost of one local hop.
// Exempting a peer's address would also exempt everything else that
// connects from it, e.g. haproxy on a peer node balancing clients across
// the apiservers, and those clients would get this node's false 404s.
func (s *steerOptions) targets(local string, peers []string) (netip.AddrPort, []netip.Prefix, error) {
	localHost, _, _ := net.SplitHostPort(local)
	addr := s.address
	if addr == "" {
		ip, err := nodeIP(localHost)
		if err != nil {
			return netip.AddrPort{}, nil, fmt.Errorf("--steer-address not set and %w", err)
		}
		addr = netip.AddrPortFrom(ip, 6443).String()
	}
	target, err := netip.ParseAddrPort(addr)
	if err != nil {
		return target, nil, fmt.Errorf("--steer-address %q: want ip:port", addr)
	}
	if l, err := netip.ParseAddrPort(local); err == nil && l.Addr().Unmap() == target.Addr().Unmap() && l.Port() == target.Port() {
		return target, nil, fmt.Errorf("--local-apiserver %s is the steered address: skewgate would forward to itself; "+
			"reach the local apiserver on an address that is not steered (https://127.0.0.1:%d) or steer another (--steer-address)", local, target.Port())
	}
	var exempt []netip.Prefix
	for _, e := range s.exempt {
		p, err := parsePrefix(e)
		if err != nil {
			return target, nil, fmt.Errorf("--steer-exempt %q: want an address or a CIDR", e)
		}
		if p.Contains(target.Addr().Unmap()) {
			return target, nil, fmt.Errorf("--steer-exempt %s covers the steered address %s: clients on this node would bypass skewgate", p, target.Addr())
		}
		exempt = append(exempt, p)
	}
	for _, p := range peers {
		if a, err := netip.ParseAddr(p); err == nil {
			exempt = append(exempt, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return target, exemptFor(exempt, nil, target.Addr()), nil
}

// parsePrefix reads a CIDR or a single address.
func parsePrefix(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	return p.Masked(), err
}

// nodeIP is the address to steer by default: the local apiserver's host,
// when it is an address other than loopback (then on another port than
// 6443, or targets refuses it), or else the one global unicast address of
// this network namespace.
func nodeIP(local string) (netip.Addr, error) {
	if ip, err := netip.ParseAddr(local); err == nil && !ip.IsLoopback() {
		return ip, nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("the node IP cannot be found: %w", err)
	}
	var found []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().IsGlobalUnicast() {
			found = append(found, p.Addr())
		}
	}
	if len(found) != 1 {
		return netip.Addr{}, fmt.Errorf("the node has %d global addresses %v: name the one to steer", len(found), found)
	}
	return found[0], nil
}

// errNotProxy is a probe answered by the apiserver itself: steering lapsed.
var errNotProxy = errors.New("steered address answered without skewgate")

// probeProxy checks that a new connection to dial is answered by skewgate:
// dial is the steered address itself, or the listener. Either way the
// request is for the steered address, whose IP the serving certificate
// must carry.
func probeProxy(dial, steered netip.AddrPort, trust forward.Trust) func(context.Context) error {
	u := "https://" + steered.String() + "/healthz"
	tr := forward.NewBackend("probe", mustURL(u), trust).Transport().(*http.Transport).Clone()
	dialer := &net.Dialer{Timeout: forward.DialTimeout}
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, dial.String())
	}
	client := &http.Client{Transport: tr, Timeout: time.Second}
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

// listenerAddr is where a direct probe reaches the listener: its own
// address, or ip when it listens on every address.
func listenerAddr(ln *net.TCPListener, ip netip.Addr) netip.AddrPort {
	a := ln.Addr().(*net.TCPAddr).AddrPort()
	if a.Addr().IsUnspecified() {
		return netip.AddrPortFrom(ip, a.Port())
	}
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err) // built from a netip.AddrPort: cannot fail
	}
	return u
}
