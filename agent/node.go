package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// NodeConfig is the kernel side of one node, as `skewgate run` configures
// it. The proxy half reaches it only through the seams Ready, PeerAddrs and
// Probe, which the composition supplies.
type NodeConfig struct {
	// Steering turns on sk_lookup steering of Addresses into the listener.
	Steering bool
	// Addresses are the steered ip:ports; empty: what the apiserver
	// serves, every global address of the node on its port, followed as
	// they change (see Targets).
	Addresses []string
	// Serving is where the apiserver listens, from its static-pod
	// manifest; nil: kube-apiserver's defaults on Local's port.
	Serving *Serving
	// Mode says when steering is wanted (nil: always); Window is the skew
	// window, for ModeAuto (nil: never open).
	Mode   func() Mode
	Window func() Window
	// ResetDirect ends the quiet connections the apiserver accepted
	// directly when steering engages after a standby for an upgrade (see
	// resetDirect), so their clients reconnect through skewgate
	// (--steering-reset-direct, on by default). ResetQuiet is how long a
	// connection's client must have been silent (see ResetQuiet; zero:
	// MinResetQuiet).
	ResetDirect bool
	ResetQuiet  time.Duration
	// PinPath is the bpffs directory of every pin.
	PinPath string
	// Inherited is the listener a predecessor handed over (see
	// Inheritance), used instead of binding the address. Predecessor is
	// the process ID of the skewgate that handed it over (0: none; -1:
	// one not visible from this PID namespace), whose connections a sweep
	// leaves alone (or, unknown, does not run).
	Inherited   *net.TCPListener
	Predecessor int
	// CgroupRoot is where connstat attaches (see CgroupRoot); empty: this
	// mount namespace's cgroup2 mount, which in a pod is the pod's own.
	CgroupRoot string
	// Exempt are sources (addresses or CIDRs) never steered.
	Exempt []string
	// ExemptPeers exempts every peer apiserver's address (PeerAddrs) too.
	ExemptPeers bool
	// Local is the local apiserver's host:port, which must not be steered:
	// skewgate's own requests to it would come back to skewgate.
	Local string
	// Ready reports whether the proxy can route: steering engages only
	// while it returns nil.
	Ready func() error
	// Shed, if set, says why skewgate is near its bounds (or ""): steering
	// is then withdrawn whatever the mode — failing open — until it is not.
	Shed func() string
	// Held, if set, says why a rollback grace or its settle holds a type
	// now ("" when none): the local apiserver would answer 404 for a type
	// clients still map from skewgate's merged discovery, and a garbage
	// collector deletes what such a 404 "owner" owned. While it holds, a
	// steering mode of off waits (steering that engaged stays engaged),
	// and the kernel's hold keeps a dead agent's connections refused, not
	// handed to the apiserver (SteeringConfig.Hold).
	Held func() string
	// PeerAddrs lists the peer apiservers' addresses, for ExemptPeers.
	PeerAddrs func() []netip.Addr
	// Probe returns a check that a new connection to dial is answered by
	// the proxy, for a request addressed to steered.
	Probe func(dial, steered netip.AddrPort) func(context.Context) error
	Log   *slog.Logger
}

// Node is the kernel side running on a node: the proxy's listener, connstat
// and, once the proxy is ready, steering.
type Node struct {
	cfg    NodeConfig
	target Steered
	exempt []netip.Prefix
	ln     *net.TCPListener
	cs     *ConnStat
	reason string // why there is no steering, while there is none
	sweep  string // whether the sweep can run here (NodeStatus.Sweep)

	mu sync.Mutex
	st *Steering
	// resets counts connections ended by resetDirect.
	resets atomic.Uint64
	// swept: resetDirect ran in the current engagement (under mu).
	swept bool
	// wants is whether steering was last wanted: mode off waits only for
	// steering that is engaged. It starts as the pinned hold says, so an
	// agent restarted inside a hold (a crash, a kill) keeps waiting.
	wants atomic.Bool
	// engaged is closed when Engage returns.
	engaged     chan struct{}
	engagedOnce sync.Once
}

// Listen opens the proxy's listener on addr (never MPTCP, which a SOCKMAP
// refuses) and, with cfg.Steering, attaches connection stats at once, so the
// first connections to every apiserver are counted. Steering itself comes
// later (Engage). A machine that cannot run BPF still proxies: Status says
// why. Errors are invalid flags or a listener that cannot be opened.
func Listen(addr string, cfg NodeConfig, reg prometheus.Registerer) (*Node, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	ln, err := cfg.Inherited, error(nil)
	if ln == nil {
		if ln, err = NewListener(addr); err != nil {
			return nil, fmt.Errorf("--bind-address/--secure-port: %w", err)
		}
	}
	n := &Node{cfg: cfg, ln: ln, reason: "disabled: --steering=false", engaged: make(chan struct{})}
	if !cfg.Steering {
		return n, nil
	}
	if n.target, n.exempt, err = Targets(TargetConfig{Addresses: cfg.Addresses, Local: cfg.Local, Exempt: cfg.Exempt, Serving: cfg.Serving}); err != nil {
		ln.Close()
		return nil, err
	}
	n.reason = "waiting until skewgate is ready"
	n.sweep = sweepStatus(cfg.ResetDirect)
	n.wants.Store(pinnedHold(cfg.PinPath))
	cs, err := StartConnStat(ConnStatConfig{
		PinPath: cfg.PinPath, CgroupPath: cfg.CgroupRoot, ProxyPort: uint16(ln.Addr().(*net.TCPAddr).Port), UpstreamPort: n.target.Primary.Port(), ProxyTGID: OwnTGID(),
		Clients: []netip.Prefix{netip.PrefixFrom(n.target.Primary.Addr(), n.target.Primary.Addr().BitLen())}, Log: cfg.Log,
	})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("connstat: %w", err)
	}
	reg.MustRegister(cs, modeCollector{n})
	n.cs = cs
	return n, nil
}

// wanted is whether steering is wanted now, and why.
func (n *Node) wanted() (bool, string) {
	want, why := n.decide()
	n.wants.Store(want)
	return want, why
}

// decide is wanted's answer. Mode off waits while a grace holds a type
// and steering is engaged: handing its clients back would give them the
// local apiserver's 404 for it. Shedding does not wait: it fails open.
func (n *Node) decide() (bool, string) {
	if n.cfg.Shed != nil {
		if why := n.cfg.Shed(); why != "" {
			return false, "shedding load, failing open: " + why
		}
	}
	mode, w := n.mode()
	want, why := wanted(mode, w)
	if !want && mode == ModeOff && n.wants.Load() {
		if held := n.held(); held != "" {
			return true, offWaits + held
		}
	}
	return want, why
}

// offWaits begins why steering goes on in mode off.
const offWaits = "steering off waits: "

// held is why a grace holds a type now, or "".
func (n *Node) held() string {
	if n.cfg.Held == nil {
		return ""
	}
	return n.cfg.Held()
}

// mode is the current mode and skew window.
func (n *Node) mode() (Mode, Window) {
	mode, w := ModeAlways, Window{}
	if n.cfg.Mode != nil {
		mode = n.cfg.Mode()
	}
	if n.cfg.Window != nil {
		w = n.cfg.Window()
	}
	return mode, w
}

// Listener is where the proxy accepts connections. Do not duplicate its fd:
// the SOCKMAP entry must vanish when it closes.
func (n *Node) Listener() *net.TCPListener { return n.ln }

// NodeStatus is the agent's side of a node for /debug/routes and explain.
type NodeStatus struct {
	// Steering is the steering state and why ("on (lease …)", "standby:
	// …", "disabled: …").
	Steering string
	// Connstat is the connstat program's state.
	Connstat string
	// Mode is the steering mode in force (auto, always, off); the rest is
	// set only where steering is configured.
	Mode string
	// Window is the skew window as mode auto sees it.
	Window Window
	// OffWaits, when set, says why a wanted `off` waits (a rollback grace
	// or its settle holds a type).
	OffWaits string
	// LocalAway says the local apiserver is away and its clients' new
	// connections go to peers.
	LocalAway string
	// Targets are the addresses steered; Unsteered the addresses the
	// apiserver serves that skewgate does not steer.
	Targets, Unsteered []netip.AddrPort
	// Apiserver says where the local apiserver serves (port, addresses,
	// the manifest read).
	Apiserver string
	// Direct are the connections the apiserver holds itself, per address;
	// DirectErr says why they could not be counted.
	Direct    []Direct
	DirectErr string
	// Sweep says whether the sweep of quiet direct connections can run
	// when a window opens: "ok", "off: …" or "unsupported: …" (ProbeSweep).
	Sweep string
}

// Status describes steering and connstat for /debug/routes: besides their
// state, the apiserver's addresses skewgate does not steer and the
// connections the apiserver holds directly, per address.
func (n *Node) Status() NodeStatus {
	out := n.status()
	if !n.cfg.Steering {
		return out
	}
	out.Unsteered = n.Unsteered()
	if d, err := n.Direct(); err != nil {
		out.DirectErr = err.Error()
	} else {
		out.Direct = d
	}
	return out
}

func (n *Node) status() NodeStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out NodeStatus
	if n.st == nil {
		out.Steering = n.reason
	} else {
		out.Steering = n.st.Status().String()
	}
	if n.cs != nil {
		out.Connstat = n.cs.Status().String()
	}
	if !n.cfg.Steering {
		return out
	}
	mode, w := n.mode()
	out.Mode, out.Window = string(mode), w
	if n.st != nil {
		if why := n.st.Status().Why; strings.HasPrefix(why, offWaits) {
			out.OffWaits = strings.TrimPrefix(why, offWaits)
		}
		out.Targets = n.st.Targets()
	}
	if w.LocalAway != "" {
		out.LocalAway = w.LocalAway + ": its clients' new connections go to peers until it is back"
	}
	out.Apiserver = n.target.Served.String()
	out.Sweep = n.sweep
	return out
}

// sweepStatus is NodeStatus.Sweep for a node whose sweep is on or not.
func sweepStatus(on bool) string {
	if !on {
		return "off: --steering-reset-direct=false"
	}
	if err := ProbeSweep(); err != nil {
		return "unsupported: " + err.Error() + ": direct connections from before a window stay on their apiserver until it sends them a GOAWAY"
	}
	return "ok"
}

// Withdraw stops steering new connections into the listener at once, as
// skewgate is about to stop: the lease is withdrawn and the listener
// leaves the SOCKMAP, so the kernel hands new connections to the
// apiserver while the proxy still accepts the ones already queued.
func (n *Node) Withdraw() {
	n.mu.Lock()
	st := n.st
	n.mu.Unlock()
	if st != nil {
		st.withdraw()
	}
}

// Close detaches nothing: the pins outlive the agent, and steering fails
// open once the listener closes and the lease runs out.
func (n *Node) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.st != nil {
		n.st.Close()
	}
	if n.cs != nil {
		n.cs.Close()
	}
}

// Engage installs steering once Ready passes: a proxy that does not yet
// know what every server serves would answer false 404s, so it gets no
// connections until it does. Its metrics are the node's collector's,
// registered by Listen, from start-up.
func (n *Node) Engage(ctx context.Context) {
	defer n.engagedOnce.Do(func() { close(n.engaged) })
	if !n.cfg.Steering {
		return
	}
	for n.cfg.Ready() != nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	primary := n.target.Primary
	steered := n.cfg.Probe(primary, primary)
	direct := n.cfg.Probe(listenerAddr(n.ln, primary.Addr()), primary)
	exempt := n.exempt
	if n.cfg.ExemptPeers && n.cfg.PeerAddrs != nil {
		exempt = ExemptFor(exempt, n.cfg.PeerAddrs(), primary.Addr())
	}
	st, err := StartSteering(ctx, SteeringConfig{
		PinPath: n.cfg.PinPath, Targets: n.target.All, Exempt: exempt, Log: n.cfg.Log, Want: n.wanted, Hold: n.held,
		OnEngage: func(fresh bool) { n.onEngage(ctx, fresh) },
		// Ready gates the first engagement only: a member that joins
		// later is not known yet, which routing answers with a 503, not a
		// 404; failing the probe for it would lapse steering on every node
		// for the 10 s hold-off whenever an apiserver joins.
		Probe: func(ctx context.Context, isSteered bool) error {
			if isSteered {
				return steered(ctx)
			}
			return direct(ctx)
		},
	}, n.ln)
	if err != nil { // an invalid configuration: flags were checked, so a bug
		n.cfg.Log.Error("steering not installed", "err", err)
		return
	}
	n.mu.Lock()
	n.st = st
	n.mu.Unlock()
	if st.Status().State == StateDisabled {
		n.cfg.Log.Warn("steering disabled; proxying clients that reach the listener directly", "reason", st.Status().String())
		return
	}
	n.cfg.Log.Info("steering installed", "targets", n.target.All, "following", n.target.Follow, "pins", n.cfg.PinPath)
	if n.target.Follow {
		go n.followAddresses(ctx, st)
	}
	if n.cfg.ExemptPeers && n.cfg.PeerAddrs != nil {
		go n.followPeers(ctx, st)
	}
}

// WaitEngaged returns once skewgate is ready (what every server serves is
// read) and Engage installed steering (or found it disabled), or when ctx
// ends.
func (n *Node) WaitEngaged(ctx context.Context) {
	for n.cfg.Ready != nil && n.cfg.Ready() != nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	select {
	case <-ctx.Done():
	case <-n.engaged:
	}
}

// followPeers keeps every peer's address exempt from steering
// (--steer-exempt-peers), peers found in the cluster included, so their
// forwarded requests reach this node's apiserver without a second proxy.
func (n *Node) followPeers(ctx context.Context, st *Steering) {
	last := st.cfg.Exempt
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		want := ExemptFor(n.exempt, n.cfg.PeerAddrs(), n.target.Primary.Addr())
		if !slices.Equal(want, last) {
			if err := st.SetExempt(want); err != nil {
				n.cfg.Log.Error("steering: exempt peers", "err", err)
			} else {
				n.cfg.Log.Info("steering: exempt sources changed", "exempt", want)
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

// resetFor is the least time after steering engaged that the busy direct
// connections are looked at again, once a second; with a longer quiet
// time, twice that, so a client that went silent as the window opened is
// moved too.
const resetFor = 2 * time.Minute

// onEngage runs resetDirect once per engagement, when its reason first
// warrants it: at once if steering engaged for a window or an arming, or
// later in the same engagement when a window opens while rule 3a engaged
// it (the local apiserver away for an etcd restart, then an upgrade
// announced).
func (n *Node) onEngage(ctx context.Context, fresh bool) {
	mode, w := n.mode()
	n.mu.Lock()
	run, swept := sweepNow(fresh, n.swept, n.cfg.ResetDirect && resetsFor(mode, w))
	n.swept = swept
	n.mu.Unlock()
	if run {
		n.resetDirect(ctx)
	}
}

// sweepNow is whether an engagement's change (fresh: it just engaged)
// sweeps, given whether it swept already and whether its reason warrants
// one now, and whether it has swept after.
func sweepNow(fresh, swept, warranted bool) (run, sweptAfter bool) {
	if fresh {
		swept = false
	}
	if warranted && !swept {
		return true, true
	}
	return false, swept
}

// resetDirect ends, when --steering-reset-direct says so, the quiet
// connections the apiserver accepted directly while steering was not
// engaged (an arming by the cluster switch included), and comes back for
// the busy ones every second for resetFor, while steering stays wanted.
func (n *Node) resetDirect(ctx context.Context) {
	if !n.cfg.ResetDirect || !resetsFor(n.mode()) {
		return
	}
	start := time.Now()
	var total sweep
	for {
		s, err := n.sweepDirect(ctx)
		total.ended, total.gone, total.busy = total.ended+s.ended, total.gone+s.gone, s.busy
		n.resets.Add(uint64(s.ended))
		if err != nil {
			n.cfg.Log.Warn("steering engaged: direct connections not all ended", "ended", total.ended, "err", err)
			return
		}
		if want, _ := n.wanted(); s.busy == 0 || !want || !resetsFor(n.mode()) || time.Since(start) > max(resetFor, 2*n.quiet()) {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	n.cfg.Log.Info("steering engaged: ended the quiet connections the apiserver accepted directly, so their clients reconnect through skewgate",
		"ended", total.ended, "closed before their turn", total.gone, "left busy", total.busy, "took", time.Since(start).Round(time.Millisecond))
}

// resetsFor is whether steering engaged for mode and w moves direct
// connections: for an upgrade (a skew window) or the operator's arming
// (mode always), not for rule 3a alone — the local apiserver away for an
// etcd restart or its own restart is a routine event, and ends nothing.
func resetsFor(mode Mode, w Window) bool {
	return mode == ModeAlways || mode == ModeAuto && w.Open
}

// sweepDirect is one pass of resetDirect over the current targets.
func (n *Node) sweepDirect(ctx context.Context) (sweep, error) {
	return resetDirect(ctx, n.steeredTargets(), n.quiet(), n.notDirect)
}

// quiet is the configured quiet time, MinResetQuiet when none is.
func (n *Node) quiet() time.Duration {
	if n.cfg.ResetQuiet <= 0 {
		return MinResetQuiet
	}
	return n.cfg.ResetQuiet
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

// Releasing reports whether the connections steering brought are to be
// handed back: steering is installed but no longer takes new connections,
// because it is not wanted (standby) or the operator turned it off.
func (n *Node) Releasing() bool {
	n.mu.Lock()
	st := n.st
	n.mu.Unlock()
	if st == nil {
		return false
	}
	switch st.Status().State {
	case StateStandby, StateOff:
		return true
	}
	return false
}

// Steers reports whether a connection to local is one steering brings:
// local is a steered target (the proxy's own port is never one).
func (n *Node) Steers(local netip.AddrPort) bool {
	n.mu.Lock()
	st := n.st
	n.mu.Unlock()
	if st == nil {
		return false
	}
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	return slices.Contains(st.Targets(), local)
}
