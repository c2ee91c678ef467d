package agent

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// Steered is what a node steers.
type Steered struct {
	// Primary is the node IP on the apiserver's port: probed through, and
	// connstat's client address.
	Primary netip.AddrPort
	// All is every steered address, Primary first.
	All []netip.AddrPort
	// Follow names the interface whose global addresses are all steered,
	// followed as they change (a VIP that keepalived or kube-vip adds and
	// removes, IPv6 addresses), when no address was named; "" otherwise.
	Follow string
}

// Targets resolves the steered addresses and the static exempt sources.
// addresses empty means every global address of the node IP's interface
// (the node IP, a VIP held there, IPv6 ones) on the local apiserver's port
// (6443 when local names none), followed as they change. local is the
// local apiserver's host:port, which must not be steered: skewgate's own
// requests to it would come back to skewgate. Every error names the flag
// at fault.
//
// Peers are not exempt by default. Their forwarded requests are then steered
// into this node's skewgate, which answers them locally (rule 2: a verified
// peer's request is never proxied again), at the cost of one local hop.
// Exempting a peer's address would also exempt everything else that
// connects from it, e.g. haproxy on a peer node balancing clients across
// the apiservers, and those clients would get this node's false 404s.
func Targets(addresses []string, local string, exempt []string) (Steered, []netip.Prefix, error) {
	var st Steered
	localHost, localPort, _ := net.SplitHostPort(local)
	port := uint16(6443)
	if p, err := strconv.ParseUint(localPort, 10, 16); err == nil && p > 0 {
		port = uint16(p)
	}
	if len(addresses) == 0 {
		ip, err := ChooseNodeIP(localHost)
		if err != nil {
			return st, nil, fmt.Errorf("--steer-address not set and %w", err)
		}
		st.Primary = netip.AddrPortFrom(ip, port)
		st.All = []netip.AddrPort{st.Primary}
		if ifc, addrs, err := interfaceOf(ip); err == nil {
			st.Follow = ifc
			st.All = withPort(ip, addrs, port)
		}
	}
	for _, a := range addresses {
		target, err := netip.ParseAddrPort(a)
		if err != nil {
			return st, nil, fmt.Errorf("--steer-address %q: want ip:port", a)
		}
		target = netip.AddrPortFrom(target.Addr().Unmap(), target.Port())
		if len(st.All) == 0 {
			st.Primary = target
		}
		st.All = append(st.All, target)
	}
	for _, target := range st.All {
		if l, err := netip.ParseAddrPort(local); err == nil && l.Addr().Unmap() == target.Addr() && l.Port() == target.Port() {
			return st, nil, fmt.Errorf("--local-apiserver %s is the steered address: skewgate would forward to itself; "+
				"reach the local apiserver on an address that is not steered (https://127.0.0.1:%d) or steer another (--steer-address)", local, target.Port())
		}
	}
	var out []netip.Prefix
	for _, e := range exempt {
		p, err := ParsePrefix(e)
		if err != nil {
			return st, nil, fmt.Errorf("--steer-exempt %q: want an address or a CIDR", e)
		}
		for _, target := range st.All {
			if p.Contains(target.Addr()) {
				return st, nil, fmt.Errorf("--steer-exempt %s covers the steered address %s: clients on this node would bypass skewgate", p, target.Addr())
			}
		}
		out = append(out, p)
	}
	return st, ExemptFor(out, nil, st.Primary.Addr()), nil
}

// withPort is primary and every other address in addrs, on port.
func withPort(primary netip.Addr, addrs []netip.Addr, port uint16) []netip.AddrPort {
	out := []netip.AddrPort{netip.AddrPortFrom(primary, port)}
	for _, a := range addrs {
		if a != primary {
			out = append(out, netip.AddrPortFrom(a, port))
		}
	}
	return out
}

// interfaceOf finds the interface holding ip and lists its global unicast
// addresses, sorted.
func interfaceOf(ip netip.Addr) (string, []netip.Addr, error) {
	ifcs, err := net.Interfaces()
	if err != nil {
		return "", nil, err
	}
	for _, ifc := range ifcs {
		addrs, err := globalAddrs(&ifc)
		if err == nil && slices.Contains(addrs, ip) {
			return ifc.Name, addrs, nil
		}
	}
	return "", nil, fmt.Errorf("no interface holds %s", ip)
}

// globalAddrs lists an interface's global unicast addresses, sorted.
func globalAddrs(ifc *net.Interface) ([]netip.Addr, error) {
	list, err := ifc.Addrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range list {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().IsGlobalUnicast() {
			out = append(out, ip.Unmap())
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out, nil
}

// ExemptFor is static plus every peer address, sorted and deduplicated, but
// never the steered address: clients on this node connect from it, and
// exempting it would let them bypass skewgate.
func ExemptFor(static []netip.Prefix, peers []netip.Addr, steered netip.Addr) []netip.Prefix {
	set := map[netip.Prefix]bool{}
	for _, p := range static {
		set[p] = true
	}
	for _, a := range peers {
		a = a.Unmap()
		set[netip.PrefixFrom(a, a.BitLen())] = true
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

// ParsePrefix reads a CIDR or a single address.
func ParsePrefix(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	return p.Masked(), err
}

// ChooseNodeIP is the address to steer by default: the local apiserver's
// host, when it is an address other than loopback (then on another port
// than 6443, or Targets refuses it), or else the address kube-apiserver
// would advertise: apimachinery's ChooseHostInterface, the global address
// of the default route's interface. Other interfaces a node has (cni0,
// docker0, kube-ipvs0, cilium_host) do not confuse it.
func ChooseNodeIP(local string) (netip.Addr, error) {
	if ip, err := netip.ParseAddr(local); err == nil && !ip.IsLoopback() {
		return ip, nil
	}
	ip, err := utilnet.ChooseHostInterface()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("the node IP cannot be found (%w): name the address to steer", err)
	}
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}, fmt.Errorf("the node IP %v is no address: name the address to steer", ip)
	}
	return a.Unmap(), nil
}
