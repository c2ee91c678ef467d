package agent

import (
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skewgate/skewgate/lab/testenv"
)

// Which loopback address may the proxy listen on, so that nothing reaches
// it from outside the node but through steering, while steering delivers
// both families' connections into it? The real steer program, a node
// with an IPv4 and an IPv6 address both steered, and each candidate
// listener in turn: only an AF_INET6 socket that is not v6only takes both
// families (the kernel's bpf_sk_assign refuses an IPv6 connection for an
// AF_INET socket and an IPv4 one for a v6only socket: EAFNOSUPPORT, and
// the program fails open to the apiserver). 127.0.0.1 is AF_INET; ::1 is
// v6only however it is made (Go sets IPV6_V6ONLY there, and the kernel
// sets it when binding any address but :: and v4-mapped ones). Bound to
// ::ffff:127.0.0.1 (LoopbackBoth) the socket stays dual-stack, takes both,
// and is reachable directly from 127.0.0.1 only, where the agent's direct
// probe dials it — from no address of the node's.
func TestSteeringIntoLoopback(t *testing.T) {
	testenv.RequireRoot(t)
	node6 := netip.MustParseAddr("fd00:5347::1")
	targets := []netip.AddrPort{netip.AddrPortFrom(nodeAddr, 6443), netip.AddrPortFrom(node6, 6443)}
	for _, tc := range []struct {
		name, addr string
		dualStack  bool      // an AF_INET6 socket on addr, IPV6_V6ONLY cleared
		want       [2]string // who answers the IPv4 and the IPv6 target
		loopback   string    // an address that reaches the listener directly
	}{
		{"127.0.0.1 (AF_INET)", "127.0.0.1:16443", false, [2]string{"proxy", "origin"}, "127.0.0.1:16443"},
		{"::1 (v6only, as Go listens there)", "[::1]:16443", false, [2]string{"origin", "proxy"}, "[::1]:16443"},
		// The kernel makes a socket bound to an IPv6 address that is
		// neither :: nor v4-mapped v6only at bind (__inet6_bind), whatever
		// IPV6_V6ONLY said before.
		{"::1, IPV6_V6ONLY cleared", "[::1]:16443", true, [2]string{"origin", "proxy"}, "[::1]:16443"},
		{"::ffff:127.0.0.1, not v6only (LoopbackBoth)", "[" + LoopbackBoth + "]:16443", false, [2]string{"proxy", "proxy"}, "127.0.0.1:16443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newTestNetNS(t, netip.PrefixFrom(nodeAddr, 32), netip.PrefixFrom(node6, 128))
			serveGreeter(t, "origin", listenIn(t, ns, "[::]:6443")) // both families, as kube-apiserver's 0.0.0.0 is not
			var ln *net.TCPListener
			if tc.dualStack {
				ln = listenDualStack(t, ns, tc.addr)
			} else {
				ln = listenIn(t, ns, tc.addr)
			}
			serveGreeter(t, "proxy", ln)
			if tc.addr[0] == '[' {
				controlFD(ln, func(fd int) error {
					v6only, err := unix.GetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY)
					t.Logf("%s: IPV6_V6ONLY %d after bind (%v)", tc.addr, v6only, err)
					return nil
				})
			}
			dial := newDialer(t, ns)
			s := startSteering(t, SteeringConfig{PinPath: testPinPath(t), NetNSPath: ns.path, Targets: targets,
				Lease: 2 * time.Second, Renew: 100 * time.Millisecond}, ln)
			waitState(t, s, StateSteering)
			for i, target := range targets {
				if got := dial.who(t, target.String()); got != tc.want[i] {
					t.Errorf("%s: %s answered, want %s", target, got, tc.want[i])
				}
			}
			if got := dial.who(t, tc.loopback); got != "proxy" {
				t.Errorf("%s, directly: %s answered, want the proxy", tc.loopback, got)
			}
			for _, a := range []netip.Addr{nodeAddr, node6} {
				if r := dial.dial(netip.AddrPortFrom(a, 16443).String()); r.err == nil {
					r.conn.Close()
					t.Errorf("the node's %s reaches the listener directly (%s answered)", a, r.greet)
				}
			}
		})
	}
}

// listenDualStack listens on an IPv6 addr inside ns with a socket that is
// not v6only.
func listenDualStack(t *testing.T, ns *testNetNS, addr string) *net.TCPListener {
	t.Helper()
	var ln *net.TCPListener
	ns.do(t, func() error {
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0) }); err != nil {
				return err
			}
			return serr
		}}
		lc.SetMultipathTCP(false)
		l, err := lc.Listen(t.Context(), "tcp6", addr)
		if err != nil {
			return err
		}
		ln = l.(*net.TCPListener)
		return nil
	})
	t.Cleanup(func() { ln.Close() })
	return ln
}
