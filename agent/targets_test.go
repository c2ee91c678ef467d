package agent

import (
	"net"
	"net/netip"
	"slices"
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
		_, _, err := Targets(addrs, tc.local, nil)
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
		_, got, err := Targets([]string{"198.18.0.1:6443"}, "127.0.0.1:6443", tc.exempt)
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

// By default every global address of the node IP's interface is steered
// (a VIP keepalived added there, an IPv6 address), on the local
// apiserver's port, not a hard-coded 6443; cni0's are not.
func TestDefaultTargetsAreTheNodeInterfaceAddresses(t *testing.T) {
	testenv.RequireRoot(t)
	ns := newTestNetNS(t)
	var got Steered
	ns.do(t, func() error {
		cni, eth := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "cni0"}}, &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0-peer"}
		for _, l := range []struct {
			link  netlink.Link
			addrs []string
		}{{cni, []string{"10.244.3.1/24"}}, {eth, []string{"198.18.7.3/24", "198.18.7.100/32", "fd00:7::3/64"}}} {
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
		got, _, err = Targets(nil, "127.0.0.1:6444", nil)
		return err
	})
	want := []netip.AddrPort{netip.MustParseAddrPort("198.18.7.3:6444"), netip.MustParseAddrPort("198.18.7.100:6444"), netip.MustParseAddrPort("[fd00:7::3]:6444")}
	if !slices.Equal(got.All, want) || got.Primary != want[0] || got.Follow != "eth0" {
		t.Errorf("Targets = %+v, want %v on eth0, the first primary", got, want)
	}
}
