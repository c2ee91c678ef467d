package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/skewgate/skewgate/lab/testenv"
)

// inNS lists ns's interfaces, as nodeInterfaces does on the node.
func inNS(t *testing.T, ns *testNetNS) func() ([]Interface, error) {
	return func() (ifcs []Interface, err error) {
		ns.do(t, func() error {
			ifcs, err = nodeInterfaces()
			return nil
		})
		return ifcs, err
	}
}

// addAddr adds prefix to link name in ns.
func addAddr(t *testing.T, ns *testNetNS, name, prefix string) {
	t.Helper()
	ns.do(t, func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		a, err := netlink.ParseAddr(prefix)
		if err != nil {
			return err
		}
		return netlink.AddrAdd(l, a)
	})
}

// kube-vip in BGP mode puts the control plane's VIP on lo of the node that
// holds it, not on the node IP's interface: the default targets (every
// address of the node, followed) steer it as soon as it arrives, and a new
// connection to it lands in the proxy.
func TestFollowSteersAVIPAddedOnLo(t *testing.T) {
	testenv.RequireRoot(t)
	ns := newTestNetNS(t)
	ns.do(t, func() error {
		eth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0-peer"}
		if err := netlink.LinkAdd(eth); err != nil {
			return err
		}
		a, _ := netlink.ParseAddr(nodeAddr.String() + "/24")
		if err := netlink.AddrAdd(eth, a); err != nil {
			return err
		}
		peer, err := netlink.LinkByName("eth0-peer")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(peer); err != nil {
			return err
		}
		return netlink.LinkSetUp(eth)
	})
	serveGreeter(t, "origin", listenIn(t, ns, "0.0.0.0:6443"))
	n := &node{ns: ns, dial: newDialer(t, ns), pins: testPinPath(t)}
	serving := &Serving{Port: 6443, Advertise: nodeAddr}
	var st Steered
	n.ns.do(t, func() (err error) {
		st, _, err = Targets(TargetConfig{Local: "127.0.0.1:6443", Serving: serving})
		return err
	})
	if want := []netip.AddrPort{netip.MustParseAddrPort(targetAddr)}; !slices.Equal(st.All, want) || !st.Follow {
		t.Fatalf("targets %v (follow %t), want %v followed", st.All, st.Follow, want)
	}
	cfg := n.steeringConfig()
	cfg.Targets = st.All
	s := n.steerToProxy(t, cfg)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// As the agent does: netlink's notifications, and a re-read every
	// second (here too long to pass alone).
	h, err := netns.GetFromPath(n.ns.path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	updates, stop := make(chan netlink.AddrUpdate, 16), make(chan struct{})
	defer close(stop)
	if err := netlink.AddrSubscribeWithOptions(updates, stop, netlink.AddrSubscribeOptions{Namespace: &h}); err != nil {
		t.Fatal(err)
	}
	f := follower{primary: st.Primary, list: inNS(t, n.ns), st: s, log: slog.New(slog.DiscardHandler)}
	done := make(chan struct{})
	go func() { defer close(done); f.run(ctx, st.All, updates, time.Minute) }()
	defer func() { cancel(); <-done }()

	vip := "198.18.1.100:6443"
	added := time.Now()
	addAddr(t, n.ns, "lo", "198.18.1.100/32")
	for !slices.Contains(s.Targets(), netip.MustParseAddrPort(vip)) {
		if time.Since(added) > 5*time.Second {
			t.Fatalf("the VIP on lo not steered within 5 s: targets %v", s.Targets())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("VIP added on lo → steered in %s", time.Since(added).Round(time.Millisecond))
	if got := n.dial.who(t, vip); got != "proxy" {
		t.Fatalf("a new connection to the VIP on lo: %s answered, want the proxy", got)
	}
	if got := n.dial.who(t, "127.0.0.1:6443"); got != "origin" {
		t.Errorf("loopback (the proxy's way to its apiserver): %s answered, want the apiserver", got)
	}
}

// kubeadm's bindPort 6444 behind an HAProxy on 6443 on the node: with the
// manifest's port skewgate reaches its apiserver on loopback's 6444 and
// steers the node's 6444; HAProxy's 6443 is left alone. --local-apiserver
// on 6443 is refused.
func TestHAProxyOnTheNode(t *testing.T) {
	testenv.RequireRoot(t)
	ns := newTestNetNS(t, netip.PrefixFrom(nodeAddr, 32))
	serveGreeter(t, "haproxy", listenIn(t, ns, "0.0.0.0:6443"))
	serveGreeter(t, "origin", listenIn(t, ns, "0.0.0.0:6444"))
	proxy := listenIn(t, ns, proxyAddr)
	serveGreeter(t, "proxy", proxy)
	dial := newDialer(t, ns)

	serving, err := ParseServing(kubeadmManifest(t, "--secure-port=6443", "--secure-port=6444", "--advertise-address=198.18.0.1", "--advertise-address="+nodeAddr.String()))
	if err != nil {
		t.Fatal(err)
	}
	if err := serving.CheckLocal("127.0.0.1:6443"); err == nil {
		t.Error("--local-apiserver on HAProxy's port accepted")
	}
	local, err := serving.LocalURL(true)
	if err != nil || local != "https://127.0.0.1:6444" {
		t.Fatalf("LocalURL = %q, %v", local, err)
	}
	var st Steered
	ns.do(t, func() (err error) {
		st, _, err = Targets(TargetConfig{Local: "127.0.0.1:6444", Serving: &serving})
		return err
	})
	s := startSteering(t, SteeringConfig{PinPath: testPinPath(t), NetNSPath: ns.path, Targets: st.All, Lease: 2 * time.Second, Renew: 100 * time.Millisecond}, proxy)
	waitState(t, s, StateSteering)
	for addr, want := range map[string]string{
		nodeAddr.String() + ":6444": "proxy",   // the apiserver's port: steered
		nodeAddr.String() + ":6443": "haproxy", // HAProxy's: not skewgate's business
		"127.0.0.1:6444":            "origin",  // skewgate's own way to its apiserver
	} {
		if got := dial.who(t, addr); got != want {
			t.Errorf("%s: %s answered, want %s", addr, got, want)
		}
	}
}

// The direct-connections count: connections the apiserver accepted itself
// on each address it serves, an unsteered VIP's included; loopback's and
// those skip names are not counted.
func TestCountDirect(t *testing.T) {
	n := newNode(t)
	addAddr(t, n.ns, "lo", "198.18.1.100/32")
	var conns []dialResult
	for _, addr := range []string{targetAddr, "198.18.1.100:6443", "198.18.1.100:6443", "127.0.0.1:6443"} {
		r := n.dial.dial(addr)
		if r.err != nil {
			t.Fatal(r.err)
		}
		conns = append(conns, r)
	}
	defer func() {
		for _, r := range conns {
			r.conn.Close()
		}
	}()
	var counts map[netip.AddrPort]int
	n.ns.do(t, func() (err error) {
		counts, err = countDirect(func() (func(netip.AddrPort, uint32) bool, error) {
			return func(netip.AddrPort, uint32) bool { return false }, nil
		})
		return err
	})
	want := map[netip.AddrPort]int{netip.MustParseAddrPort(targetAddr): 1, netip.MustParseAddrPort("198.18.1.100:6443"): 2}
	for a, c := range want {
		if counts[a] != c {
			t.Errorf("%s: %d direct connections, want %d (all: %v)", a, counts[a], c, counts)
		}
	}
	if c := counts[netip.MustParseAddrPort("127.0.0.1:6443")]; c != 0 {
		t.Errorf("loopback counted: %d", c)
	}
}

// The status names what the apiserver serves and skewgate does not steer:
// here --steer-address names the node IP alone while kube-vip holds a VIP
// on lo.
func TestStatusNamesUnsteeredAddresses(t *testing.T) {
	n := newNode(t)
	addAddr(t, n.ns, "lo", "198.18.1.100/32")
	var st NodeStatus
	n.ns.do(t, func() error {
		target, _, err := Targets(TargetConfig{Addresses: []string{targetAddr}, Local: "127.0.0.1:6443", Serving: &Serving{Port: 6443, Manifest: "m.yaml"}})
		if err != nil {
			return err
		}
		node := &Node{cfg: NodeConfig{Steering: true, Log: slog.New(slog.DiscardHandler)}, target: target, reason: "test"}
		st = node.Status()
		return nil
	})
	got := map[string]string{
		"unsteered": fmt.Sprint(st.Unsteered),
		"apiserver": st.Apiserver,
		"direct":    fmt.Sprint(st.Direct),
	}
	want := map[string]string{
		"unsteered": "[198.18.1.100:6443]",
		"apiserver": "port 6443, every address (m.yaml)",
		"direct":    "[198.18.1.1:6443=0 198.18.1.100:6443=0 (not steered)]",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("status %s = %q, want %q (all: %+v)", k, got[k], v, st)
		}
	}
}
