package agent

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// This kernel has no sch_netem, so latency comes from a userspace delay
// line: a TUN device in each of two namespaces and a pump that holds every
// IP packet for a fixed time before writing it into the other namespace.
// Unlike a userspace TCP relay, which would complete the handshake itself,
// a packet-level line delays the SYN and the SYN-ACK, so the kernel's
// handshake time and RTT grow by twice the one-way delay. (A tc-BPF program
// setting EDT timestamps under sch_fq would do the same in the kernel; TUN
// needs no extra program and no qdisc.)

// openTUN creates a TUN device (IP packets, no packet info header) in the
// calling thread's namespace, non-blocking so the Go poller serves it.
func openTUN(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// plumbTUN brings name up with local/32 and a route to remote/32 through it.
func plumbTUN(name string, local, remote netip.Addr) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	a, _ := netlink.ParseAddr(netip.PrefixFrom(local, 32).String())
	if err := netlink.AddrAdd(l, a); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return err
	}
	dst := &net.IPNet{IP: remote.AsSlice(), Mask: net.CIDRMask(32, 32)}
	return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst, Src: local.AsSlice()})
}

// delayLine pumps packets both ways between two TUN devices, each held for
// delay.
type delayLine struct {
	a, b  *os.File
	delay time.Duration
	wg    sync.WaitGroup
}

func newDelayLine(t *testing.T, nsA, nsB *testNetNS, addrA, addrB netip.Addr, delay time.Duration) {
	t.Helper()
	d := &delayLine{delay: delay}
	nsA.do(t, func() (err error) {
		if d.a, err = openTUN("sgtdl0"); err != nil {
			return err
		}
		return plumbTUN("sgtdl0", addrA, addrB)
	})
	nsB.do(t, func() (err error) {
		if d.b, err = openTUN("sgtdl1"); err != nil {
			return err
		}
		return plumbTUN("sgtdl1", addrB, addrA)
	})
	d.wg.Add(2)
	go d.pump(d.a, d.b)
	go d.pump(d.b, d.a)
	t.Cleanup(func() {
		d.a.Close()
		d.b.Close()
		d.wg.Wait()
	})
}

type delayed struct {
	due time.Time
	pkt []byte
}

// pump reads packets from src and writes each to dst once it is due, in
// order. A full queue drops the packet, as a real link would.
func (d *delayLine) pump(src, dst *os.File) {
	defer d.wg.Done()
	q := make(chan delayed, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for p := range q {
			time.Sleep(time.Until(p.due))
			dst.Write(p.pkt)
		}
	}()
	buf := make([]byte, 65536)
	for {
		n, err := src.Read(buf)
		if err != nil {
			close(q)
			<-done
			return
		}
		p := delayed{due: time.Now().Add(d.delay), pkt: append([]byte(nil), buf[:n]...)}
		select {
		case q <- p:
		default:
		}
	}
}

// TestConnStatDelayLine puts a peer apiserver behind a 20 ms (one way) delay
// line and checks that proxy_to_peer handshakes and min RTTs land in the
// bucket of the 40 ms round trip while local hops stay sub-millisecond.
func TestConnStatDelayLine(t *testing.T) {
	const oneWay = 20 * time.Millisecond
	nodeTun := netip.MustParseAddr("198.18.1.101")
	peerTun := netip.MustParseAddr("198.18.1.102")
	peerAddr := netip.AddrPortFrom(peerTun, 6443).String()

	n := newNode(t)
	peer := newTestNetNS(t)
	serveGreeter(t, "peer", listenIn(t, peer, "0.0.0.0:6443"))
	newDelayLine(t, n.ns, peer, nodeTun, peerTun, oneWay)

	c := n.steeredProxyWithConnStat(t)

	const conns = 10
	for i := 0; i < conns; i++ {
		for _, d := range []struct{ addr, want string }{
			{peerAddr, "peer"}, {"127.0.0.1:6443", "origin"}, {targetAddr, "proxy"},
		} {
			start := time.Now()
			got := n.dial.who(t, d.addr)
			if got != d.want {
				t.Fatalf("%s answered %s", d.addr, got)
			}
			if d.addr == peerAddr && i == 0 {
				t.Logf("dial+greeting through the delay line: %s", time.Since(start))
			}
		}
	}

	want := map[string]bool{
		HopProxyPeer + " " + peerAddr:     true,
		HopProxyLocal + " 127.0.0.1:6443": true,
		HopClientProxy + " " + targetAddr: true,
	}
	var hops map[string]HopStats
	deadline := time.Now().Add(5 * time.Second)
	for {
		hops = hopsByKey(t, c)
		done := true
		for k := range want {
			done = done && hops[k].MinRTT.Count() == conns
		}
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for k := range want {
		h := hops[k]
		hs, rtt := h.Handshake.Quantile(0.5), h.MinRTT.Quantile(0.5)
		t.Logf("%-40s opens %2d  handshake p50 ≤ %6.0fµs (mean %6.0fµs)  min RTT p50 ≤ %6.0fµs (mean %6.0fµs)",
			k, h.Opens, hs, mean(h.Handshake), rtt, mean(h.MinRTT))
		if h.Opens != conns || h.MinRTT.Count() != conns {
			t.Errorf("%s: %d opens, %d min RTTs; want %d", k, h.Opens, h.MinRTT.Count(), conns)
		}
		if k == HopProxyPeer+" "+peerAddr {
			// 2 × 20 ms = 40 ms → bucket [32.768 ms, 65.536 ms).
			if hs != 65536 || rtt != 65536 {
				t.Errorf("%s: handshake p50 bucket ≤ %.0fµs, min RTT ≤ %.0fµs; want ≤ 65536µs (40 ms)", k, hs, rtt)
			}
			continue
		}
		if hs > 1024 || rtt > 1024 {
			t.Errorf("%s: handshake ≤ %.0fµs, min RTT ≤ %.0fµs; want sub-millisecond", k, hs, rtt)
		}
	}
}

func mean(h Log2Histogram) float64 {
	if h.Count() == 0 {
		return 0
	}
	return float64(h.SumMicros) / float64(h.Count())
}
