package agent

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// Targets resolves the steered address and the static exempt sources.
// address empty means the node IP on port 6443. local is the local
// apiserver's host:port, which must not be steered: skewgate's own requests
// to it would come back to skewgate. Every error names the flag at fault.
//
// Peers are not exempt by default. Their forwarded requests are then steered
// into this node's skewgate, which answers them locally (rule 2: a verified
// peer's request is never proxied again), at the cost of one local hop.
// Exempting a peer's address would also exempt everything else that
// connects from it, e.g. haproxy on a peer node balancing clients across
// the apiservers, and those clients would get this node's false 404s.
func Targets(address, local string, exempt []string) (netip.AddrPort, []netip.Prefix, error) {
	localHost, _, _ := net.SplitHostPort(local)
	if address == "" {
		ip, err := ChooseNodeIP(localHost)
		if err != nil {
			return netip.AddrPort{}, nil, fmt.Errorf("--steer-address not set and %w", err)
		}
		address = netip.AddrPortFrom(ip, 6443).String()
	}
	target, err := netip.ParseAddrPort(address)
	if err != nil {
		return target, nil, fmt.Errorf("--steer-address %q: want ip:port", address)
	}
	if l, err := netip.ParseAddrPort(local); err == nil && l.Addr().Unmap() == target.Addr().Unmap() && l.Port() == target.Port() {
		return target, nil, fmt.Errorf("--local-apiserver %s is the steered address: skewgate would forward to itself; "+
			"reach the local apiserver on an address that is not steered (https://127.0.0.1:%d) or steer another (--steer-address)", local, target.Port())
	}
	var out []netip.Prefix
	for _, e := range exempt {
		p, err := ParsePrefix(e)
		if err != nil {
			return target, nil, fmt.Errorf("--steer-exempt %q: want an address or a CIDR", e)
		}
		if p.Contains(target.Addr().Unmap()) {
			return target, nil, fmt.Errorf("--steer-exempt %s covers the steered address %s: clients on this node would bypass skewgate", p, target.Addr())
		}
		out = append(out, p)
	}
	return target, ExemptFor(out, nil, target.Addr()), nil
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
