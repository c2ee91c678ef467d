package agent

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/skewgate/skewgate/lab/testenv"
)

const (
	targetAddr = "198.18.1.1:6443"
	proxyAddr  = "127.0.0.1:16443"
)

// node is a throwaway node: a netns with the node address on lo, an
// "apiserver" greeting "origin" on 0.0.0.0:6443 and a proxy listener
// greeting "proxy" on 127.0.0.1:16443.
type node struct {
	ns   *testNetNS
	dial *dialer
	pins string
}

func newNode(t testing.TB) *node {
	t.Helper()
	testenv.RequireRoot(t)
	ns := newTestNetNS(t, netip.PrefixFrom(nodeAddr, 32))
	serveGreeter(t, "origin", listenIn(t, ns, "0.0.0.0:6443"))
	n := &node{ns: ns, dial: newDialer(t, ns), pins: testPinPath(t)}
	return n
}

func (n *node) steeringConfig() SteeringConfig {
	return SteeringConfig{
		PinPath:   n.pins,
		NetNSPath: n.ns.path,
		Targets:   []netip.AddrPort{netip.MustParseAddrPort(targetAddr)},
		Lease:     2 * time.Second,
		Renew:     100 * time.Millisecond,
	}
}

// steerToProxy serves a "proxy" greeter, steers n's target into it with
// cfg, and checks that a new connection reaches it.
func (n *node) steerToProxy(t *testing.T, cfg SteeringConfig) *Steering {
	t.Helper()
	ln := listenIn(t, n.ns, proxyAddr)
	serveGreeter(t, "proxy", ln)
	s := startSteering(t, cfg, ln)
	waitState(t, s, StateSteering)
	if got := n.dial.who(t, targetAddr); got != "proxy" {
		t.Fatalf("steering on: %s answered", got)
	}
	return s
}

func startSteering(t *testing.T, cfg SteeringConfig, ln *net.TCPListener) *Steering {
	t.Helper()
	s, err := StartSteering(context.Background(), cfg, ln)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if st := s.Status(); st.State == StateDisabled {
		t.Fatal(st)
	}
	return s
}

func waitState(t *testing.T, s *Steering, want StateName) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.Status().State != want {
		if time.Now().After(deadline) {
			t.Fatalf("state %s, want %s", s.Status(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSteeringOnOff(t *testing.T) {
	n := newNode(t)
	ln := listenIn(t, n.ns, proxyAddr)
	serveGreeter(t, "proxy", ln)

	if got := n.dial.who(t, targetAddr); got != "origin" {
		t.Fatalf("before steering: %s answered", got)
	}
	s := startSteering(t, n.steeringConfig(), ln)
	waitState(t, s, StateSteering)
	open := n.dial.dial(targetAddr)
	if open.err != nil || open.greet != "proxy" {
		t.Fatalf("steering on: %q, %v; want proxy", open.greet, open.err)
	}
	defer open.conn.Close()

	ctl, err := OpenControl(n.pins)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	ctl.SetEnabled(false)
	off := time.Now()
	if got := n.dial.who(t, targetAddr); got != "origin" {
		t.Fatalf("steering off: %s answered the first new connection", got)
	}
	t.Logf("steer off → first new connection to origin: %s", time.Since(off))
	if err := echo(open.conn); err != nil {
		t.Fatalf("connection opened while steering was on: %v", err)
	}
	waitState(t, s, StateOff)

	ctl.SetEnabled(true)
	if got := n.dial.who(t, targetAddr); got != "proxy" {
		t.Fatalf("steering back on: %s answered", got)
	}
	st, err := ctl.State()
	if err != nil {
		t.Fatal(err)
	}
	if !st.Steering() || st.Lookups["steered"] < 2 || st.Lookups["off"] < 1 {
		t.Fatalf("pinned state %s, lookups %v", st, st.Lookups)
	}
	checkSteeringMetrics(t, s)
}

func checkSteeringMetrics(t *testing.T, s *Steering) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(s); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() != "program" {
					name += "/" + l.GetValue()
				}
			}
			got[name] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for name, want := range map[string]float64{
		"skewgate_steering_state/steering":     1,
		"skewgate_steering_state/off":          0,
		"skewgate_bpf_collection_errors_total": 0,
	} {
		if got[name] != want {
			t.Errorf("%s = %g, want %g", name, got[name], want)
		}
	}
	if got["skewgate_steering_lookups_total/steered"] < 2 || got["skewgate_bpf_program_runs_total"] < 3 {
		t.Errorf("metrics %v", got)
	}
}

// TestSteeringLeaseExpiry: a proxy whose probes fail loses new connections
// within a lease, gets none back while it keeps failing (no trial leases on
// client traffic), and gets them back once it answers again, after Retry.
func TestSteeringLeaseExpiry(t *testing.T) {
	n := newNode(t)
	ln := listenIn(t, n.ns, proxyAddr)
	serveGreeter(t, "proxy", ln)

	var failing atomic.Bool
	var direct atomic.Int64
	cfg := n.steeringConfig()
	cfg.Retry = 1500 * time.Millisecond
	cfg.Probe = func(_ context.Context, steered bool) error {
		if !steered {
			direct.Add(1)
		}
		if failing.Load() {
			return errors.New("proxy unhealthy")
		}
		return nil
	}
	s := startSteering(t, cfg, ln)
	waitState(t, s, StateSteering)
	if got := n.dial.who(t, targetAddr); got != "proxy" {
		t.Fatalf("leased: %s answered", got)
	}

	str := startStream(t, n.ns, targetAddr, 100000)
	failing.Store(true)
	lapse := time.Now()
	str.waitGreet(t, "origin", lapse, cfg.Lease+time.Second)
	// Longer than Retry past the lapse: direct probes keep failing, so
	// nothing may be steered again.
	time.Sleep(time.Until(lapse.Add(cfg.Lease + cfg.Retry + time.Second)))
	str.halt()
	lapsed := 0
	for _, r := range str.snapshot() {
		if r.err != nil {
			t.Errorf("connection at %s failed: %v", r.start.Sub(lapse), r.err)
		}
		if r.start.After(lapse.Add(cfg.Lease + cfg.Renew)) {
			lapsed++
			if r.greet != "origin" {
				t.Errorf("connection %s after the probe failed reached %s", r.start.Sub(lapse), r.greet)
			}
		}
	}
	if lapsed < 100 {
		t.Fatalf("only %d connections while lapsed", lapsed)
	}
	if direct.Load() == 0 {
		t.Error("no direct probe while lapsed")
	}
	if st := s.Status(); st.State != StateLapsed {
		t.Fatalf("status %s, want lapsed", st)
	}
	healed := time.Now()
	failing.Store(false)
	waitState(t, s, StateSteering)
	if got := n.dial.who(t, targetAddr); got != "proxy" {
		t.Fatalf("renewed: %s answered", got)
	}
	t.Logf("%d connections while lapsed, all to the apiserver; %d direct probes; steering back %s after the proxy healed",
		lapsed, direct.Load(), time.Since(healed).Round(time.Millisecond))
}

// TestSteeringSurvivesASlowProbe: a proxy that answers its probe slowly
// (a starved machine: the upgrade drill's second run on 2 busy cores saw
// steering on two nodes lapse and re-engage 4 and 6 times in one window,
// and clients that reconnected meanwhile got the rolled-back apiserver's
// false 404s) is slow, not dead. A probe may take as long as the lease
// has left after the next renewal; the kernel's lease alone bounds how long
// a proxy that stopped answering keeps new connections.
func TestSteeringSurvivesASlowProbe(t *testing.T) {
	n := newNode(t)
	ln := listenIn(t, n.ns, proxyAddr)
	serveGreeter(t, "proxy", ln)
	cfg := n.steeringConfig()
	cfg.Renew = 500 * time.Millisecond // the agent's default
	var slow atomic.Bool
	cfg.Probe = func(ctx context.Context, steered bool) error {
		if !steered || !slow.Load() {
			return nil
		}
		select {
		case <-time.After(3 * cfg.Renew / 2): // past Renew, within Lease-Renew
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s := startSteering(t, cfg, ln)
	waitState(t, s, StateSteering)
	str := startStream(t, n.ns, targetAddr, 100000)
	slow.Store(true)
	since := time.Now()
	time.Sleep(4 * cfg.Lease)
	str.halt()
	if st := s.Status(); st.State != StateSteering {
		t.Errorf("status %s after %s of slow probes, want steering", st, time.Since(since).Round(time.Millisecond))
	}
	direct := 0
	for _, r := range str.snapshot() {
		if r.err == nil && r.start.After(since) && r.greet != "proxy" {
			direct++
		}
	}
	if direct > 0 {
		t.Errorf("%d new connections reached the apiserver while the proxy answered its probes slowly", direct)
	}
}

func TestLeaseRenew(t *testing.T) {
	const s, retry = uint64(time.Second), 10 * uint64(time.Second)
	type probe struct {
		at          uint64
		steered, ok bool
		want        bool
	}
	for name, probes := range map[string][]probe{
		"start: direct probe grants at once": {{1 * s, false, true, true}},
		"start: failed direct probe grants nothing": {
			{1 * s, false, false, false}, {2 * s, false, true, true}},
		"steered passes renew": {{1 * s, true, true, true}, {2 * s, true, true, true}},
		"steered failure holds direct grants off for retry": {
			{1 * s, true, true, true},
			{2 * s, true, false, false},
			{3 * s, true, false, false},
			{5 * s, false, true, false},
			{12 * s, false, true, false},
			{13 * s, false, true, true},
		},
		"one steered failure in a live lease does not stop renewals": {
			{1 * s, true, false, false}, {2 * s, true, true, true}},
	} {
		var l lease
		for i, p := range probes {
			if got := l.renew(p.at, p.steered, p.ok, retry); got != p.want {
				t.Errorf("%s: probe %d (at %ds steered=%v ok=%v): renew %v, want %v", name, i, p.at/s, p.steered, p.ok, got, p.want)
			}
		}
	}
}

// TestSteeringSwap restarts steering over and over in-process (each start
// swaps the program with link.Update) while connections stream in: every
// connection must reach the proxy.
func TestSteeringSwap(t *testing.T) {
	n := newNode(t)
	ln := listenIn(t, n.ns, proxyAddr)
	serveGreeter(t, "proxy", ln)

	cfg := n.steeringConfig()
	prev := startSteering(t, cfg, ln)
	waitState(t, prev, StateSteering)
	linkID := pinnedLinkID(t, n.pins)

	str := startStream(t, n.ns, targetAddr, 100000)
	const swaps = 20
	for i := 0; i < swaps; i++ {
		time.Sleep(20 * time.Millisecond)
		next := startSteering(t, cfg, ln)
		prev.Close()
		prev = next
	}
	time.Sleep(20 * time.Millisecond)
	str.halt()
	if id := pinnedLinkID(t, n.pins); id != linkID {
		t.Errorf("link %d replaced by %d: want the same link updated in place", linkID, id)
	}
	results := str.snapshot()
	var failed, origin int
	for _, r := range results {
		switch {
		case r.err != nil:
			failed++
			t.Errorf("connection failed: %v", r.err)
		case r.greet != "proxy":
			origin++
		}
	}
	t.Logf("%d swaps, %d connections: %d failed, %d not steered", swaps, len(results), failed, origin)
	if origin > 0 {
		t.Errorf("%d connections escaped steering during swaps", origin)
	}
}

func pinnedLinkID(t *testing.T, pins string) link.ID {
	t.Helper()
	l, err := link.LoadPinnedLink(filepath.Join(pins, pinSteerLink), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	info, err := l.Info()
	if err != nil {
		t.Fatal(err)
	}
	return info.ID
}

// TestSteeringSetExempt: a source made exempt while steering runs reaches
// the apiserver; taken out again, it is steered.
func TestSteeringSetExempt(t *testing.T) {
	n := newNode(t)
	s := n.steerToProxy(t, n.steeringConfig())
	if err := s.SetExempt([]netip.Prefix{netip.MustParsePrefix("198.18.7.0/24"), netip.PrefixFrom(nodeAddr, 32)}); err != nil {
		t.Fatal(err)
	}
	if got := n.dial.who(t, targetAddr); got != "origin" {
		t.Fatalf("source exempt: %s answered", got)
	}
	if err := s.SetExempt([]netip.Prefix{netip.MustParsePrefix("198.18.7.0/24")}); err != nil {
		t.Fatal(err)
	}
	if got := n.dial.who(t, targetAddr); got != "proxy" {
		t.Fatalf("exemption lifted: %s answered", got)
	}
	ctl, err := OpenControl(n.pins)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	st, err := ctl.State()
	if err != nil || st.Lookups["exempt"] != 1 {
		t.Fatalf("lookups %v (%v), want exactly one exempt", st.Lookups, err)
	}
	if want := []netip.Prefix{netip.MustParsePrefix("198.18.7.0/24")}; !slices.Equal(st.Exempt, want) {
		t.Errorf("pinned exempt %v, want %v", st.Exempt, want)
	}
	if want := []netip.AddrPort{netip.MustParseAddrPort(targetAddr)}; !slices.Equal(st.Targets, want) {
		t.Errorf("pinned targets %v, want %v", st.Targets, want)
	}
}

// TestSteeringIPv6 steers an IPv6 target into an IPv6 listener in a
// throwaway namespace: the same program, the AF_INET6 half of its keys.
func TestSteeringIPv6(t *testing.T) {
	testenv.RequireRoot(t)
	node6 := netip.MustParseAddr("fd00:5347::1")
	target := netip.AddrPortFrom(node6, 6443)
	ns := newTestNetNS(t, netip.PrefixFrom(node6, 128))
	serveGreeter(t, "origin", listenIn(t, ns, "[::]:6443"))
	ln := listenIn(t, ns, "[::1]:16443")
	serveGreeter(t, "proxy", ln)
	dial := newDialer(t, ns)
	s := startSteering(t, SteeringConfig{
		PinPath: testPinPath(t), NetNSPath: ns.path, Targets: []netip.AddrPort{target},
		Lease: 2 * time.Second, Renew: 100 * time.Millisecond,
	}, ln)
	waitState(t, s, StateSteering)
	if got := dial.who(t, target.String()); got != "proxy" {
		t.Fatalf("IPv6 target: %s answered", got)
	}
	if err := s.SetExempt([]netip.Prefix{netip.PrefixFrom(node6, 128)}); err != nil {
		t.Fatal(err)
	}
	if got := dial.who(t, target.String()); got != "origin" {
		t.Fatalf("IPv6 source exempt: %s answered", got)
	}
}

// Mode auto outside a skew window: the lease is withdrawn at once (new
// connections reach the apiserver) and no probe runs; wanted again, the
// next renewal engages steering without a hold-off.
func TestSteeringStandbyWhenNotWanted(t *testing.T) {
	n := newNode(t)
	var want atomic.Bool
	want.Store(true)
	cfg := n.steeringConfig()
	cfg.Want = func() (bool, string) { return want.Load(), "test" }
	s := n.steerToProxy(t, cfg)
	want.Store(false)
	waitState(t, s, StateStandby)
	if got := n.dial.who(t, targetAddr); got != "origin" {
		t.Fatalf("standby: %s answered a new connection", got)
	}
	want.Store(true)
	on := time.Now()
	waitState(t, s, StateSteering)
	if got := n.dial.who(t, targetAddr); got != "proxy" {
		t.Fatalf("wanted again: %s answered", got)
	}
	if d := time.Since(on); d > time.Second {
		t.Errorf("steering engaged %s after it was wanted again, want within a renewal", d)
	}
}

// SetTargets steers an address that arrives (a VIP) and releases one that
// leaves, without touching the others.
func TestSteeringSetTargets(t *testing.T) {
	n := newNode(t)
	vip := "198.18.1.100:6443"
	n.ns.do(t, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		a, _ := netlink.ParseAddr("198.18.1.100/32")
		return netlink.AddrAdd(lo, a)
	})
	s := n.steerToProxy(t, n.steeringConfig())
	if got := n.dial.who(t, vip); got != "origin" {
		t.Fatalf("the VIP before it is steered: %s answered", got)
	}
	both := []netip.AddrPort{netip.MustParseAddrPort(targetAddr), netip.MustParseAddrPort(vip)}
	if err := s.SetTargets(both); err != nil {
		t.Fatal(err)
	}
	if got := n.dial.who(t, vip); got != "proxy" {
		t.Fatalf("the VIP steered: %s answered", got)
	}
	if err := s.SetTargets(both[:1]); err != nil {
		t.Fatal(err)
	}
	if a, b := n.dial.who(t, vip), n.dial.who(t, targetAddr); a != "origin" || b != "proxy" {
		t.Fatalf("the VIP released: %s answered it, %s the node address", a, b)
	}
	if !slices.Equal(s.Targets(), both[:1]) {
		t.Errorf("Targets = %v", s.Targets())
	}
}

// A connection the apiserver accepted while steering was in standby is
// ended when steering engages, so its client reconnects through the
// proxy; connections skip names stay.
func TestResetDirectEndsConnectionsFromBeforeTheWindow(t *testing.T) {
	n := newNode(t)
	var want atomic.Bool
	cfg := n.steeringConfig()
	cfg.Want = func() (bool, string) { return want.Load(), "test" }
	ln := listenIn(t, n.ns, proxyAddr)
	serveGreeter(t, "proxy", ln)
	s := startSteering(t, cfg, ln)
	waitState(t, s, StateStandby)
	direct, kept := n.dial.dial(targetAddr), n.dial.dial(targetAddr)
	if direct.err != nil || direct.greet != "origin" || kept.err != nil {
		t.Fatalf("in standby: %q %v", direct.greet, direct.err)
	}
	defer direct.conn.Close()
	defer kept.conn.Close()
	keep := kept.conn.LocalAddr().(*net.TCPAddr).AddrPort()
	want.Store(true)
	waitState(t, s, StateSteering)
	// Traffic on the direct connection just now: it is busy, not ended.
	if err := echo(direct.conn); err != nil {
		t.Fatal(err)
	}
	skip := func() (func(netip.AddrPort, uint32) bool, error) {
		return func(remote netip.AddrPort, _ uint32) bool { return remote == keep }, nil
	}
	var got sweep
	n.ns.do(t, func() (err error) {
		got, err = resetDirect(context.Background(), cfg.Targets, time.Hour, skip)
		return err
	})
	if got.ended != 0 || got.busy != 1 {
		t.Fatalf("a connection with recent traffic: %+v, want it left busy", got)
	}
	// The client silent for 50 ms, a quiet time of 20 ms: quiet, ended.
	time.Sleep(50 * time.Millisecond)
	n.ns.do(t, func() (err error) {
		got, err = resetDirect(context.Background(), cfg.Targets, 20*time.Millisecond, skip)
		return err
	})
	if got.ended != 1 {
		t.Fatalf("ended %+v, want the one direct connection not skipped", got)
	}
	if err := echo(direct.conn); err == nil {
		t.Error("the direct connection from before the window still works")
	}
	if err := echo(kept.conn); err != nil {
		t.Errorf("the skipped connection was ended: %v", err)
	}
	if got := n.dial.who(t, targetAddr); got != "proxy" {
		t.Errorf("a new connection after the reset: %s answered", got)
	}
}

// withdraw, as skewgate stops, hands new connections to the apiserver at
// once while the listener still accepts: nothing steered to it after that
// can be left in its queue when it closes.
func TestSteeringWithdraw(t *testing.T) {
	n := newNode(t)
	s := n.steerToProxy(t, n.steeringConfig())
	s.withdraw()
	if got := n.dial.who(t, targetAddr); got != "origin" {
		t.Fatalf("after withdraw: %s answered a new connection", got)
	}
	var cookie uint64
	if err := s.objs.SteerSocket.Lookup(uint32(0), &cookie); err == nil {
		t.Errorf("the listener is still in steer_socket (cookie %d)", cookie)
	}
	s.withdraw() // idempotent
}

// A connection that closed after the sweep listed it answers SOCK_DESTROY
// with ENOENT, which the sweep counts as gone and goes on past (a test
// once saw a sweep stop there and leave 9 of 9 connections).
func TestResetDirectGoesOnPastVanishedSockets(t *testing.T) {
	n := newNode(t)
	c := n.dial.dial(targetAddr)
	if c.err != nil {
		t.Fatal(c.err)
	}
	local := c.conn.LocalAddr().(*net.TCPAddr).AddrPort()
	var listed *netlink.Socket
	n.ns.do(t, func() error {
		// kube-apiserver-like listeners on 0.0.0.0 are dual-stack IPv6.
		socks, err := netlink.SocketDiagTCPInfo(unix.AF_INET6)
		v4, err4 := netlink.SocketDiagTCPInfo(unix.AF_INET)
		socks = append(socks, v4...)
		if err == nil {
			err = err4
		}
		for _, r := range socks {
			if r.InetDiagMsg.ID.DestinationPort == local.Port() && r.InetDiagMsg.State == netlink.TCP_ESTABLISHED {
				listed = r.InetDiagMsg
			}
		}
		return err
	})
	if listed == nil {
		t.Fatal("the connection is not listed")
	}
	c.conn.Close()
	time.Sleep(200 * time.Millisecond) // both ends closed: the greeter closes on EOF
	n.ns.do(t, func() error {
		if err := destroy(listed); !errors.Is(err, unix.ENOENT) {
			t.Errorf("SOCK_DESTROY of a closed connection: %v, want ENOENT", err)
		}
		return nil
	})
}

// Bug, seen once in CI (TestDaemonSet/pod_deleted: 1 of 248 new
// connections reset while the replacement pod swept): a sweep read which
// sockets are skewgate's own, then listed the connections. One skewgate
// accepted between the two was not its own yet, and, idle, was ended. A
// sweep now lists first and asks whose they are after: every connection it
// lists was accepted before, so its owner holds it by then.
func TestResetDirectSparesConnectionsAcceptedDuringTheSweep(t *testing.T) {
	n := newNode(t)
	cfg := n.steeringConfig()
	n.steerToProxy(t, cfg)
	own := func() (func(netip.AddrPort, uint32) bool, error) {
		inodes, err := ownSocketInodes()
		return func(_ netip.AddrPort, inode uint32) bool { return inodes[uint64(inode)] }, err
	}
	stop := make(chan struct{})
	// Every connection is held open until the sweeps end: one its client
	// closed during a sweep may be ended by it (listed established, its
	// proxy end closed on EOF before whose-is-it was asked), harmlessly,
	// and CI once counted such a one (1 in 2316) when the test kept only
	// the last 64. Held, any connection ended is one the sweep took from
	// skewgate. 1500 of them (3000 fds) stay well inside the fd limit, and
	// the old order ended one in eight (below).
	const held = 1500
	var conns []net.Conn
	var dialed, failed int
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(conns) < held {
			select {
			case <-stop:
				return
			default:
			}
			r := n.dial.dial(targetAddr)
			if r.err != nil || r.greet != "proxy" {
				failed++
				continue
			}
			dialed++
			conns = append(conns, r.conn)
		}
	}()
	// Measured with the old order: 2045 of 16487 ended in 300 sweeps.
	const sweeps = 100
	var total sweep
	for range sweeps {
		n.ns.do(t, func() error {
			// Quiet time 0: a connection is quiet the moment it is
			// accepted, the worst case for this race.
			s, err := resetDirect(context.Background(), cfg.Targets, 0, own)
			total.ended += s.ended
			return err
		})
	}
	close(stop)
	<-done
	for _, c := range conns {
		c.Close()
	}
	if total.ended != 0 || dialed < 100 {
		t.Fatalf("%d sweeps beside %d connections steered into the proxy (%d dials failed): ended %d of them, want 0", sweeps, dialed, failed, total.ended)
	}
	t.Logf("%d sweeps beside %d connections steered into the proxy: none ended", sweeps, dialed)
}
