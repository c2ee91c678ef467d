package agent

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/skewgate/skewgate/lab/testenv"
)

func TestExemptFor(t *testing.T) {
	static := []netip.Prefix{netip.MustParsePrefix("198.18.0.3/32")}
	peers := []netip.Addr{
		netip.MustParseAddr("198.18.0.2"),
		netip.MustParseAddr("198.18.0.3"), // also static: once
		netip.MustParseAddr("fd00::2"),
		netip.MustParseAddr("::ffff:198.18.0.4"), // mapped: unmapped
	}
	got := ExemptFor(static, peers, netip.MustParseAddr("198.18.0.1"))
	want := []netip.Prefix{
		netip.MustParsePrefix("198.18.0.2/32"),
		netip.MustParsePrefix("198.18.0.3/32"),
		netip.MustParsePrefix("198.18.0.4/32"),
		netip.MustParsePrefix("fd00::2/128"),
	}
	if !slices.Equal(got, want) {
		t.Errorf("ExemptFor = %v, want %v", got, want)
	}
	if got := ExemptFor(static, nil, netip.MustParseAddr("198.18.0.1")); !slices.Equal(got, static) {
		t.Errorf("ExemptFor without peers = %v, want the static set", got)
	}
	wide := []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}
	if got := ExemptFor(wide, nil, netip.MustParseAddr("198.18.0.1")); len(got) != 0 {
		t.Errorf("a prefix covering the steered address is exempt: %v", got)
	}
}

func TestTargetsRefuseSteeringTheLocalAPIServer(t *testing.T) {
	for _, tc := range []struct {
		address, local string
		ok             bool
	}{
		{"10.0.0.1:6443", "127.0.0.1:6443", true},
		{"10.0.0.1:6443", "10.0.0.1:6443", false},
		{"", "10.0.0.1:6443", false}, // the default would be the local apiserver itself
		{"10.0.0.1:6443", "10.0.0.1:16443", true},
		{"[fd00::1]:6443", "[fd00::1]:6443", false},
		{"10.0.0.1:6443", "apiserver.local:6443", true}, // a name is not an address that could be steered
	} {
		var addrs []string
		if tc.address != "" {
			addrs = []string{tc.address}
		}
		_, _, err := Targets(TargetConfig{Addresses: addrs, Local: tc.local})
		if (err == nil) != tc.ok {
			t.Errorf("steer %q local %q: err %v, want ok=%v", tc.address, tc.local, err, tc.ok)
		}
	}
}

func TestTargetsExempt(t *testing.T) {
	for _, tc := range []struct {
		exempt []string
		want   []string
		ok     bool
	}{
		{nil, nil, true},
		{[]string{"198.18.9.0/24", "198.18.8.8"}, []string{"198.18.8.8/32", "198.18.9.0/24"}, true},
		{[]string{"198.18.0.0/16"}, nil, false}, // covers the node itself
		{[]string{"nonsense"}, nil, false},
	} {
		_, got, err := Targets(TargetConfig{Addresses: []string{"198.18.0.1:6443"}, Local: "127.0.0.1:6443", Exempt: tc.exempt})
		if (err == nil) != tc.ok {
			t.Errorf("exempt %v: err %v, want ok=%v", tc.exempt, err, tc.ok)
			continue
		}
		var strs []string
		for _, p := range got {
			strs = append(strs, p.String())
		}
		if tc.ok && !slices.Equal(strs, tc.want) {
			t.Errorf("exempt %v: %v, want %v", tc.exempt, strs, tc.want)
		}
	}
}

// A node has more global addresses than its node IP (cni0, docker0, …):
// the default steered address is the default route's, as kube-apiserver
// chooses its advertise address, whatever order the interfaces come in.
func TestChooseNodeIPOnANodeWithMoreInterfaces(t *testing.T) {
	testenv.RequireRoot(t)
	ns := newTestNetNS(t)
	var got netip.Addr
	ns.do(t, func() error {
		// cni0 (a bridge, as on a node) first, so a first-interface
		// guess would be wrong; eth0 a veth (no dummy driver here).
		for _, l := range []struct {
			name, addr string
			link       netlink.Link
		}{
			{"cni0", "10.244.3.1/24", &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "cni0"}}},
			{"eth0", "198.18.7.3/24", &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0-peer"}},
		} {
			link := l.link
			if err := netlink.LinkAdd(link); err != nil {
				return err
			}
			a, _ := netlink.ParseAddr(l.addr)
			if err := netlink.AddrAdd(link, a); err != nil {
				return err
			}
			if err := netlink.LinkSetUp(link); err != nil {
				return err
			}
		}
		eth0, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: net.ParseIP("198.18.7.254")}); err != nil {
			return err
		}
		got, err = ChooseNodeIP("127.0.0.1")
		return err
	})
	if want := netip.MustParseAddr("198.18.7.3"); got != want {
		t.Errorf("ChooseNodeIP = %s, want %s (the default route's)", got, want)
	}
}

// By default every global address of the node is steered, on every
// interface (a VIP keepalived added on eth0, kube-vip's on lo, cni0's, an
// IPv6 address), on the local apiserver's port, not a hard-coded 6443; the
// node IP first; kube-ipvs0's Service IPs are not.
func TestDefaultTargetsAreTheNodeAddresses(t *testing.T) {
	testenv.RequireRoot(t)
	ns := newTestNetNS(t, netip.MustParsePrefix("198.18.7.200/32"))
	var got Steered
	ns.do(t, func() error {
		cni, eth := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "cni0"}}, &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0-peer"}
		ipvs := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "kube-ipvs0"}} // a dummy on a node; no dummy driver here
		for _, l := range []struct {
			link  netlink.Link
			addrs []string
		}{{cni, []string{"10.244.3.1/24"}}, {eth, []string{"198.18.7.3/24", "198.18.7.100/32", "fd00:7::3/64"}}, {ipvs, []string{"10.96.0.1/32"}}} {
			if err := netlink.LinkAdd(l.link); err != nil {
				return err
			}
			for _, s := range l.addrs {
				a, _ := netlink.ParseAddr(s)
				if err := netlink.AddrAdd(l.link, a); err != nil {
					return err
				}
			}
			if err := netlink.LinkSetUp(l.link); err != nil {
				return err
			}
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: net.ParseIP("198.18.7.254")}); err != nil {
			return err
		}
		var err error
		got, _, err = Targets(TargetConfig{Local: "127.0.0.1:6444"})
		return err
	})
	want := []netip.AddrPort{netip.MustParseAddrPort("198.18.7.3:6444"), netip.MustParseAddrPort("10.244.3.1:6444"),
		netip.MustParseAddrPort("198.18.7.100:6444"), netip.MustParseAddrPort("198.18.7.200:6444"), netip.MustParseAddrPort("[fd00:7::3]:6444")}
	if !slices.Equal(got.All, want) || got.Primary != want[0] || !got.Follow {
		t.Errorf("Targets = %+v, want %v followed, the first primary", got, want)
	}
}

// node is a control-plane node's interfaces: the node IP on eth0 (the
// default route's), kube-vip's BGP VIP on lo, keepalived's VIP on a bond's
// VLAN, a second NIC, a CNI bridge, and kube-proxy's IPVS Service IPs.
var fakeNode = []Interface{
	{"lo", addrs("127.0.0.1", "::1", "10.0.0.100")},
	{"eth0", addrs("10.0.0.1", "fe80::1", "2001:db8::1")},
	{"bond0.20", addrs("192.168.20.5", "192.168.20.100")},
	{"eth1", addrs("172.16.0.5")},
	{"cni0", addrs("10.244.0.1")},
	{"kube-ipvs0", addrs("10.96.0.1", "10.96.0.10", "10.0.0.100")},
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func onPort(port uint16, s ...string) []netip.AddrPort {
	out := make([]netip.AddrPort, len(s))
	for i, a := range addrs(s...) {
		out[i] = netip.AddrPortFrom(a, port)
	}
	return out
}

// fakeTargets is Targets on fakeNode, whose default route is eth0's.
func fakeTargets(cfg TargetConfig) (Steered, error) {
	st, _, err := targets(cfg, func() ([]Interface, error) { return fakeNode, nil },
		func(string) (netip.Addr, error) { return netip.MustParseAddr("10.0.0.1"), nil })
	return st, err
}

// What is steered follows what the apiserver serves, from its manifest.
func TestTargetsFollowTheAPIServer(t *testing.T) {
	every := []string{"10.0.0.1", "10.0.0.100", "10.244.0.1", "172.16.0.5", "192.168.20.5", "192.168.20.100", "2001:db8::1"}
	eth1First := []string{"172.16.0.5", "10.0.0.1", "10.0.0.100", "10.244.0.1", "192.168.20.5", "192.168.20.100", "2001:db8::1"}
	for _, tc := range []struct {
		name    string
		cfg     TargetConfig
		want    []netip.AddrPort
		follow  bool
		unsteer []netip.AddrPort
	}{
		{"kubeadm: every address of the node, lo's VIP and other interfaces' included, the advertise address first",
			TargetConfig{Local: "127.0.0.1:6443", Serving: &Serving{Port: 6443, Advertise: netip.MustParseAddr("10.0.0.1")}}, onPort(6443, every...), true, nil},
		{"bindPort 6444 behind an on-node HAProxy: the apiserver's port, not HAProxy's",
			TargetConfig{Local: "127.0.0.1:6444", Serving: &Serving{Port: 6444, Advertise: netip.MustParseAddr("10.0.0.1")}}, onPort(6444, every...), true, nil},
		{"advertiseAddress on a second NIC: primary there",
			TargetConfig{Local: "127.0.0.1:6443", Serving: &Serving{Port: 6443, Advertise: netip.MustParseAddr("172.16.0.5")}}, onPort(6443, eth1First...), true, nil},
		{"an advertise address the node does not hold (NAT): the node IP primary",
			TargetConfig{Local: "127.0.0.1:6443", Serving: &Serving{Port: 6443, Advertise: netip.MustParseAddr("203.0.113.7")}}, onPort(6443, every...), true, nil},
		{"bound to one address: that one alone",
			TargetConfig{Local: "127.0.0.1:6443", Serving: &Serving{Port: 6443, Bind: netip.MustParseAddr("172.16.0.5")}}, onPort(6443, "172.16.0.5"), false, nil},
		{"bound to every IPv6 address: every address (Go's dual-stack socket)",
			TargetConfig{Local: "127.0.0.1:6443", Serving: &Serving{Port: 6443, Bind: netip.MustParseAddr("::")}}, onPort(6443, every...), true, nil},
		{"no manifest: every address on --local-apiserver's port",
			TargetConfig{Local: "127.0.0.1:7443"}, onPort(7443, every...), true, nil},
		{"--steer-address overrides, and the rest is named as served, not steered",
			TargetConfig{Addresses: []string{"10.0.0.1:6443"}, Local: "127.0.0.1:6443", Serving: &Serving{Port: 6443}},
			onPort(6443, "10.0.0.1"), false, onPort(6443, every[1:]...)},
	} {
		st, err := fakeTargets(tc.cfg)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !slices.Equal(st.All, tc.want) || st.Primary != tc.want[0] || st.Follow != tc.follow {
			t.Errorf("%s:\n got %v (primary %s, follow %t)\nwant %v (follow %t)", tc.name, st.All, st.Primary, st.Follow, tc.want, tc.follow)
		}
		var unsteered []netip.AddrPort
		for _, a := range servedAddrs(st.Served, nodeAddrs(fakeNode)) {
			if !slices.Contains(st.All, a) {
				unsteered = append(unsteered, a)
			}
		}
		if !slices.Equal(unsteered, tc.unsteer) {
			t.Errorf("%s: served and not steered %v, want %v", tc.name, unsteered, tc.unsteer)
		}
	}
}

func TestTargetsRefuse(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  TargetConfig
		want string
	}{
		{"an apiserver on loopback only", TargetConfig{Local: "127.0.0.1:6443", Serving: &Serving{Port: 6443, Bind: netip.MustParseAddr("127.0.0.1"), Manifest: "m.yaml"}},
			"listens only on 127.0.0.1 (--bind-address in m.yaml)"},
		{"the local apiserver on a steered address", TargetConfig{Local: "172.16.0.5:6443", Serving: &Serving{Port: 6443}},
			"--local-apiserver 172.16.0.5:6443 is the steered address"},
		{"too many addresses named", TargetConfig{Local: "127.0.0.1:6443", Addresses: strings.Fields(strings.Repeat("10.0.0.1:6443 ", maxTargets+1))},
			"at most 64"},
	} {
		if _, err := fakeTargets(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

// A node with more addresses than steer_targets holds steers the primary
// and the first others; the rest are served and not steered, not an error.
func TestTargetsAtMostTheMapSize(t *testing.T) {
	many := Interface{Name: "eth0"}
	for i := range 100 {
		many.Addrs = append(many.Addrs, netip.AddrFrom4([4]byte{10, 1, byte(i / 250), byte(1 + i%250)}))
	}
	st, _, err := targets(TargetConfig{Local: "127.0.0.1:6443"}, func() ([]Interface, error) { return []Interface{many}, nil },
		func(string) (netip.Addr, error) { return netip.MustParseAddr("10.1.0.50"), nil })
	if err != nil || len(st.All) != maxTargets || st.All[0] != netip.MustParseAddrPort("10.1.0.50:6443") {
		t.Errorf("%d targets, primary %v, err %v; want %d with 10.1.0.50:6443 first", len(st.All), st.Primary, err, maxTargets)
	}
}
