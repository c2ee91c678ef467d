package agent

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"

	"github.com/vishvananda/netlink"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// Steered is what a node steers.
type Steered struct {
	// Primary is the node IP on the apiserver's port: probed through, and
	// connstat's client address.
	Primary netip.AddrPort
	// All is every steered address, Primary first.
	All []netip.AddrPort
	// Follow is whether every global address the node holds is steered,
	// followed as addresses come and go (a VIP that keepalived or kube-vip
	// adds on any interface or on lo, IPv6 addresses): no address was
	// named and the apiserver listens on every address.
	Follow bool
	// Served says where the apiserver listens, for telling the operator
	// which of the node's addresses it serves that are not steered.
	Served Serving
}

// TargetConfig is what Targets resolves.
type TargetConfig struct {
	// Addresses are --steer-address: ip:port, the explicit override; empty
	// follows the apiserver (Serving).
	Addresses []string
	// Local is the local apiserver's host:port, which must not be steered:
	// skewgate's own requests to it would come back to skewgate.
	Local string
	// Exempt are --steer-exempt: addresses or CIDRs.
	Exempt []string
	// Serving is where the apiserver listens, from its manifest; nil when
	// there is none: then it listens on every address (kube-apiserver's
	// default) on Local's port.
	Serving *Serving
}

// Targets resolves the steered addresses and the static exempt sources.
// No addresses named means what the apiserver serves: every global unicast
// address the node holds on any interface (the node IP, a VIP on lo or on
// another interface, a second NIC's, IPv6 ones), followed as they change,
// when it listens on every address; its --bind-address alone otherwise;
// on its port. Every error names the flag at fault.
//
// Peers are not exempt by default. Their forwarded requests are then steered
// into this node's skewgate, which answers them locally (rule 2: a verified
// peer's request is never proxied again), at the cost of one local hop.
// Exempting a peer's address would also exempt everything else that
// connects from it, e.g. haproxy on a peer node balancing clients across
// the apiservers, and those clients would get this node's false 404s.
func Targets(cfg TargetConfig) (Steered, []netip.Prefix, error) {
	return targets(cfg, nodeInterfaces, ChooseNodeIP)
}

// targets is Targets with the node's interfaces and its IP as seams.
func targets(cfg TargetConfig, interfaces func() ([]Interface, error), nodeIP func(string) (netip.Addr, error)) (Steered, []netip.Prefix, error) {
	localHost, _, _ := net.SplitHostPort(cfg.Local)
	st := Steered{Served: served(cfg)}
	if len(cfg.Addresses) == 0 {
		var err error
		if st, err = followed(st.Served, localHost, interfaces, nodeIP); err != nil {
			return st, nil, err
		}
	}
	for _, a := range cfg.Addresses {
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
	if len(st.All) > maxTargets {
		return st, nil, fmt.Errorf("--steer-address names %d addresses; skewgate steers at most %d", len(st.All), maxTargets)
	}
	for _, target := range st.All {
		if l, err := netip.ParseAddrPort(cfg.Local); err == nil && l.Addr().Unmap() == target.Addr() && l.Port() == target.Port() {
			return st, nil, fmt.Errorf("--local-apiserver %s is the steered address: skewgate would forward to itself; "+
				"reach the local apiserver on an address that is not steered (https://127.0.0.1:%d) or steer another (--steer-address)", cfg.Local, target.Port())
		}
	}
	var out []netip.Prefix
	for _, e := range cfg.Exempt {
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

// served is where the apiserver listens: its manifest's word, or else
// kube-apiserver's defaults (every address) on the local apiserver's port
// (6443 when it names none).
func served(cfg TargetConfig) Serving {
	if cfg.Serving != nil {
		return *cfg.Serving
	}
	s := Serving{Port: DefaultAPIServerPort, Manifest: "no manifest: kube-apiserver's defaults on --local-apiserver's port"}
	_, localPort, _ := net.SplitHostPort(cfg.Local)
	if p, err := strconv.ParseUint(localPort, 10, 16); err == nil && p > 0 {
		s.Port = uint16(p)
	}
	return s
}

// followed is the default: the apiserver's --bind-address alone when it
// binds one, else every global address the node holds, the primary first
// (see primaryAddr), and followed.
func followed(s Serving, localHost string, interfaces func() ([]Interface, error), nodeIP func(string) (netip.Addr, error)) (Steered, error) {
	st := Steered{Served: s}
	if !s.AllAddresses() {
		if s.Bind.IsLoopback() {
			return st, fmt.Errorf("--steer-address not set and this node's kube-apiserver listens only on %s (--bind-address in %s): "+
				"no client outside the node reaches it; name the address to steer", s.Bind, s.Manifest)
		}
		st.Primary = netip.AddrPortFrom(s.Bind, s.Port)
		st.All = []netip.AddrPort{st.Primary}
		return st, nil
	}
	ifcs, err := interfaces()
	if err != nil {
		return st, fmt.Errorf("--steer-address not set and the node's addresses cannot be listed: %w", err)
	}
	held := nodeAddrs(ifcs)
	primary, err := primaryAddr(s, localHost, held, nodeIP)
	if err != nil {
		return st, fmt.Errorf("--steer-address not set and %w", err)
	}
	st.Primary = netip.AddrPortFrom(primary, s.Port)
	st.All = withPort(primary, held, s.Port)
	st.Follow = true
	return st, nil
}

// primaryAddr is the address probed through: the apiserver's
// --advertise-address when the node holds it, else ChooseNodeIP's.
func primaryAddr(s Serving, localHost string, held []netip.Addr, nodeIP func(string) (netip.Addr, error)) (netip.Addr, error) {
	if s.Advertise.IsValid() && slices.Contains(held, s.Advertise) {
		return s.Advertise, nil
	}
	return nodeIP(localHost)
}

// withPort is primary and every other address in addrs, on port, at most
// maxTargets (steer_targets' size): the ones left out are reported as
// served and not steered (Node.Status, the direct-connections gauge).
func withPort(primary netip.Addr, addrs []netip.Addr, port uint16) []netip.AddrPort {
	out := []netip.AddrPort{netip.AddrPortFrom(primary, port)}
	for _, a := range addrs {
		if a != primary && len(out) < maxTargets {
			out = append(out, netip.AddrPortFrom(a, port))
		}
	}
	return out
}

// Interface is a network interface and its addresses.
type Interface struct {
	Name  string
	Addrs []netip.Addr
}

// serviceInterfaces hold no address of the node's own: kube-proxy's IPVS
// mode puts every Service's ClusterIP, external and load-balancer IP on
// kube-ipvs0 (thousands, on a large cluster), and IPVS rewrites
// connections to them before any socket lookup.
var serviceInterfaces = []string{"kube-ipvs0"}

// nodeAddrs is every global unicast address of ifcs but the service
// interfaces', sorted and deduplicated: the addresses a client can reach
// an apiserver listening on every address at. Loopback and link-local
// addresses are not among them (the proxy reaches its apiserver on
// loopback, which must stay unsteered); a /32 VIP on lo is.
func nodeAddrs(ifcs []Interface) []netip.Addr {
	var out []netip.Addr
	for _, ifc := range ifcs {
		if slices.Contains(serviceInterfaces, ifc.Name) {
			continue
		}
		for _, a := range ifc.Addrs {
			if a = a.Unmap(); a.IsGlobalUnicast() && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// servedAddrs are the addresses the apiserver serves clients at, as s
// says: its --bind-address, or every one of held.
func servedAddrs(s Serving, held []netip.Addr) []netip.AddrPort {
	if !s.AllAddresses() {
		return []netip.AddrPort{netip.AddrPortFrom(s.Bind, s.Port)}
	}
	out := make([]netip.AddrPort, 0, len(held))
	for _, a := range held {
		out = append(out, netip.AddrPortFrom(a, s.Port))
	}
	return out
}

// nodeInterfaces lists this network namespace's interfaces and addresses
// with one dump of each: it runs on every address notification and every
// second, on nodes with a veth per pod (net.Interface.Addrs dumps every
// address once per interface).
func nodeInterfaces() ([]Interface, error) {
	links, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	list, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	byIndex := map[int][]netip.Addr{}
	for _, a := range list {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			byIndex[a.LinkIndex] = append(byIndex[a.LinkIndex], ip.Unmap())
		}
	}
	out := make([]Interface, 0, len(links))
	for _, l := range links {
		out = append(out, Interface{Name: l.Name, Addrs: byIndex[l.Index]})
	}
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
