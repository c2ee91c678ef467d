package steer

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/skewgate/skewgate/lab/testenv"
)

// lookupCtx is struct bpf_sk_lookup as BPF_PROG_RUN takes it (Linux 5.19+
// layout, 72 bytes). Addresses and remote_port are in network byte order.
type lookupCtx struct {
	Cookie         uint64
	Family         uint32
	Protocol       uint32
	RemoteIP4      [4]byte
	RemoteIP6      [16]byte
	RemotePort     [2]byte
	_              [2]byte
	LocalIP4       [4]byte
	LocalIP6       [16]byte
	LocalPort      uint32
	IngressIfindex uint32
	_              [4]byte
}

func newLookupCtx(remote, local netip.AddrPort) lookupCtx {
	c := lookupCtx{Protocol: unix.IPPROTO_TCP, LocalPort: uint32(local.Port())}
	binary.BigEndian.PutUint16(c.RemotePort[:], remote.Port())
	if local.Addr().Is4() {
		c.Family = unix.AF_INET
		c.RemoteIP4 = remote.Addr().As4()
		c.LocalIP4 = local.Addr().As4()
	} else {
		c.Family = unix.AF_INET6
		c.RemoteIP6 = remote.Addr().As16()
		c.LocalIP6 = local.Addr().As16()
	}
	return c
}

// run runs steer on a synthetic SYN and returns the cookie of the socket it
// selected, 0 for none. steer must return SK_PASS.
func run(t *testing.T, prog *ebpf.Program, in lookupCtx) uint64 {
	t.Helper()
	cookie, ret := runVerdict(t, prog, in)
	if ret != skPass {
		t.Fatalf("steer returned %d, want SK_PASS (1)", ret)
	}
	return cookie
}

// sk_lookup's verdicts.
const (
	skDrop = 0
	skPass = 1
)

// runVerdict runs steer on a synthetic SYN and returns the cookie of the
// socket it selected (0 for none) and its verdict.
func runVerdict(t *testing.T, prog *ebpf.Program, in lookupCtx) (uint64, uint32) {
	t.Helper()
	var out lookupCtx
	ret, err := prog.Run(&ebpf.RunOptions{Context: in, ContextOut: &out})
	if err != nil {
		t.Fatal(err)
	}
	return out.Cookie, ret
}

func monotonicNow(t *testing.T) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

func targetKey(ap netip.AddrPort) SteerTarget {
	family := uint16(unix.AF_INET6)
	if ap.Addr().Is4() {
		family = unix.AF_INET
	}
	return SteerTarget{Addr: ap.Addr().As16(), Port: ap.Port(), Family: family}
}

func prefixKey(p netip.Prefix) SteerPrefixKey {
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	return SteerPrefixKey{Prefixlen: uint32(bits), Addr: p.Addr().As16()}
}

// listen returns a TCP listener without MPTCP (an MPTCP socket cannot enter a
// SOCKMAP) and its socket cookie.
func listen(t *testing.T, network, addr string) (*net.TCPListener, uint64) {
	t.Helper()
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(context.Background(), network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ln := l.(*net.TCPListener)
	var cookie uint64
	var serr error
	rc, err := ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Control(func(fd uintptr) {
		cookie, serr = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_COOKIE)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	return ln, cookie
}

func insertListener(t *testing.T, m *ebpf.Map, ln *net.TCPListener) {
	t.Helper()
	rc, err := ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var uerr error
	if err := rc.Control(func(fd uintptr) {
		uerr = m.Update(uint32(0), uint64(fd), ebpf.UpdateAny)
	}); err != nil || uerr != nil {
		t.Fatal(err, uerr)
	}
}

func counters(t *testing.T, m *ebpf.Map) map[SteerReason]uint64 {
	t.Helper()
	got := map[SteerReason]uint64{}
	for r := SteerReason(0); r < SteerReasonREASON_MAX; r++ {
		var perCPU []uint64
		if err := m.Lookup(uint32(r), &perCPU); err != nil {
			t.Fatal(err)
		}
		for _, n := range perCPU {
			got[r] += n
		}
	}
	return got
}

func TestSteerDecisions(t *testing.T) {
	testenv.RequireRoot(t)

	target := netip.MustParseAddrPort("198.18.1.1:6443")
	target6 := netip.MustParseAddrPort("[fd00:5347::1]:6443")
	client := netip.MustParseAddrPort("198.18.1.20:40000")
	client6 := netip.MustParseAddrPort("[fd00:5347::20]:40000")

	tests := []struct {
		name   string
		cfg    func(now uint64) SteerConfig
		socket bool
		exempt []netip.Prefix
		remote netip.AddrPort
		local  netip.AddrPort
		proto  uint32
		want   SteerReason
	}{
		{name: "on", socket: true, remote: client, local: target, want: SteerReasonREASON_STEERED},
		{name: "on ipv6 to ipv4 listener", socket: true, remote: client6, local: target6, want: SteerReasonREASON_ASSIGN_ERROR},
		{name: "off", cfg: func(now uint64) SteerConfig { return SteerConfig{Enabled: 0, LeaseUntilNs: now + 10e9} }, socket: true, remote: client, local: target, want: SteerReasonREASON_OFF},
		{name: "lease expired", cfg: func(now uint64) SteerConfig { return SteerConfig{Enabled: 1, LeaseUntilNs: now - 1} }, socket: true, remote: client, local: target, want: SteerReasonREASON_LEASE_EXPIRED},
		{name: "never leased", cfg: func(uint64) SteerConfig { return SteerConfig{Enabled: 1} }, socket: true, remote: client, local: target, want: SteerReasonREASON_LEASE_EXPIRED},
		{name: "no socket", socket: false, remote: client, local: target, want: SteerReasonREASON_NO_SOCKET},
		{name: "exempt source", socket: true, exempt: []netip.Prefix{netip.MustParsePrefix("198.18.1.16/28")}, remote: client, local: target, want: SteerReasonREASON_EXEMPT},
		{name: "exempt elsewhere", socket: true, exempt: []netip.Prefix{netip.MustParsePrefix("198.18.1.32/28")}, remote: client, local: target, want: SteerReasonREASON_STEERED},
		{name: "other port", socket: true, remote: client, local: netip.AddrPortFrom(target.Addr(), 6444), want: SteerReasonREASON_NOT_TARGET},
		{name: "other address", socket: true, remote: client, local: netip.MustParseAddrPort("198.18.1.2:6443"), want: SteerReasonREASON_NOT_TARGET},
		{name: "udp", socket: true, remote: client, local: target, proto: unix.IPPROTO_UDP, want: SteerReasonREASON_NOT_TARGET},
		// The hold: while it is in the future, a proxy that is gone (its
		// lease lapsed, its listener out of the SOCKMAP) refuses instead of
		// passing; the kill switch and exempt sources pass whatever it
		// says, and a live proxy steers.
		{name: "held, lease lapsed", cfg: held(1, -1, 10e9), socket: true, remote: client, local: target, want: SteerReasonREASON_HELD},
		{name: "held, never leased", cfg: func(now uint64) SteerConfig { return SteerConfig{Enabled: 1, HoldUntilNs: now + 10e9} }, socket: true, remote: client, local: target, want: SteerReasonREASON_HELD},
		{name: "held, no socket", cfg: held(1, 10e9, 10e9), socket: false, remote: client, local: target, want: SteerReasonREASON_HELD},
		{name: "held, ipv6, no socket", cfg: held(1, 10e9, 10e9), socket: false, remote: client6, local: target6, want: SteerReasonREASON_HELD},
		{name: "held, steering", cfg: held(1, 10e9, 10e9), socket: true, remote: client, local: target, want: SteerReasonREASON_STEERED},
		{name: "held, kill switch off", cfg: held(0, -1, 10e9), socket: false, remote: client, local: target, want: SteerReasonREASON_OFF},
		{name: "held, exempt source, lease lapsed", cfg: held(1, -1, 10e9), socket: true, exempt: []netip.Prefix{netip.MustParsePrefix("198.18.1.16/28")}, remote: client, local: target, want: SteerReasonREASON_LEASE_EXPIRED},
		{name: "held, exempt source, no socket", cfg: held(1, 10e9, 10e9), socket: false, exempt: []netip.Prefix{netip.MustParsePrefix("198.18.1.16/28")}, remote: client, local: target, want: SteerReasonREASON_EXEMPT},
		{name: "held, not a target", cfg: held(1, -1, 10e9), socket: false, remote: client, local: netip.AddrPortFrom(target.Addr(), 6444), want: SteerReasonREASON_NOT_TARGET},
		{name: "hold ended, lease lapsed", cfg: held(1, -1, -1), socket: true, remote: client, local: target, want: SteerReasonREASON_LEASE_EXPIRED},
		{name: "hold ended, no socket", cfg: held(1, 10e9, -1), socket: false, remote: client, local: target, want: SteerReasonREASON_NO_SOCKET},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs SteerObjects
			if err := LoadSteerObjects(&objs, nil); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { objs.Close() })

			now := monotonicNow(t)
			cfg := SteerConfig{Enabled: 1, LeaseUntilNs: now + 10e9}
			if tt.cfg != nil {
				cfg = tt.cfg(now)
			}
			if err := objs.SteerConfig.Put(uint32(0), cfg); err != nil {
				t.Fatal(err)
			}
			for _, ap := range []netip.AddrPort{target, target6} {
				if err := objs.SteerTargets.Put(targetKey(ap), SteerDest{}); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range tt.exempt {
				if err := objs.SteerExempt.Put(prefixKey(p), SteerExempt{}); err != nil {
					t.Fatal(err)
				}
			}
			ln, cookie := listen(t, "tcp4", "127.0.0.1:0")
			if tt.socket {
				insertListener(t, objs.SteerSocket, ln)
			}

			in := newLookupCtx(tt.remote, tt.local)
			if tt.proto != 0 {
				in.Protocol = tt.proto
			}
			got, verdict := runVerdict(t, objs.Steer, in)
			wantVerdict := uint32(skPass)
			if tt.want == SteerReasonREASON_HELD {
				wantVerdict = skDrop
			}
			if verdict != wantVerdict {
				t.Errorf("verdict %d, want %d", verdict, wantVerdict)
			}

			wantCookie := uint64(0)
			if tt.want == SteerReasonREASON_STEERED {
				wantCookie = cookie
			}
			if got != wantCookie {
				t.Errorf("selected socket cookie %d, want %d", got, wantCookie)
			}
			c := counters(t, objs.SteerCounters)
			for r, n := range c {
				want := uint64(0)
				if r == tt.want {
					want = 1
				}
				if n != want {
					t.Errorf("counter %d = %d, want %d", r, n, want)
				}
			}
			var flows int
			it := objs.SteeredFlows.Iterate()
			var k SteerFlowKey
			var v SteerFlowValue
			for it.Next(&k, &v) {
				flows++
			}
			if wantFlows := int(c[SteerReasonREASON_STEERED]); flows != wantFlows {
				t.Errorf("%d steered flows recorded, want %d", flows, wantFlows)
			}
		})
	}
}

// held is a config with the kill switch at enabled and the lease and the
// hold that many ns from now (-1: just past).
func held(enabled uint32, lease, hold int64) func(now uint64) SteerConfig {
	return func(now uint64) SteerConfig {
		return SteerConfig{Enabled: enabled, LeaseUntilNs: uint64(int64(now) + lease), HoldUntilNs: uint64(int64(now) + hold)}
	}
}

// TestSteerClosedListener checks the fail-open for a dead agent: closing the
// listener's last fd empties the SOCKMAP slot.
func TestSteerClosedListener(t *testing.T) {
	testenv.RequireRoot(t)
	var objs SteerObjects
	if err := LoadSteerObjects(&objs, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	target := netip.MustParseAddrPort("198.18.1.1:6443")
	if err := objs.SteerConfig.Put(uint32(0), SteerConfig{Enabled: 1, LeaseUntilNs: monotonicNow(t) + 10e9}); err != nil {
		t.Fatal(err)
	}
	if err := objs.SteerTargets.Put(targetKey(target), SteerDest{}); err != nil {
		t.Fatal(err)
	}
	ln, cookie := listen(t, "tcp4", "127.0.0.1:0")
	insertListener(t, objs.SteerSocket, ln)
	in := newLookupCtx(netip.MustParseAddrPort("198.18.1.20:40000"), target)
	if got := run(t, objs.Steer, in); got != cookie {
		t.Fatalf("with listener: cookie %d, want %d", got, cookie)
	}
	ln.Close()
	// Socket destruction is RCU-deferred; poll briefly.
	deadline := time.Now().Add(2 * time.Second)
	for run(t, objs.Steer, in) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("closed listener still selected")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkSteer reports the kernel's own run time per lookup (bpf stats) for
// a SYN of a new flow to a target that is steered: each run is another
// client port, and connstat's deletion of the flow once the handshake
// completes is done between runs, outside the measured time.
func BenchmarkSteer(b *testing.B) {
	testenv.RequireRoot(b)
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	var objs SteerObjects
	if err := LoadSteerObjects(&objs, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { objs.Close() })
	target := netip.MustParseAddrPort("198.18.1.1:6443")
	if err := objs.SteerTargets.Put(targetKey(target), SteerDest{}); err != nil {
		b.Fatal(err)
	}
	if err := objs.SteerConfig.Put(uint32(0), SteerConfig{Enabled: 1, LeaseUntilNs: ^uint64(0)}); err != nil {
		b.Fatal(err)
	}
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	rc, _ := l.(*net.TCPListener).SyscallConn()
	rc.Control(func(fd uintptr) { err = objs.SteerSocket.Update(uint32(0), uint64(fd), ebpf.UpdateAny) })
	if err != nil {
		b.Fatal(err)
	}
	port := uint16(1024)
	for b.Loop() {
		port = max(1024, port+1)
		in := newLookupCtx(netip.AddrPortFrom(netip.MustParseAddr("198.18.1.20"), port), target)
		if _, err := objs.Steer.Run(&ebpf.RunOptions{Context: in}); err != nil {
			b.Fatal(err)
		}
		var key SteerFlowKey
		for k, v := 0, uint64(0); objs.SteeredFlows.NextKey(nil, &key) == nil && k < 2; k++ {
			if err := objs.SteeredFlows.LookupAndDelete(&key, &v); err != nil {
				b.Fatal(err)
			}
		}
	}
	s, err := objs.Steer.Stats()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(s.Runtime.Nanoseconds())/float64(s.RunCount), "bpf-ns/lookup")
}
