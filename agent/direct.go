package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Direct is one address the apiserver serves and the connections it
// accepted there itself, not through skewgate.
type Direct struct {
	Address netip.AddrPort
	// Steered is whether skewgate steers the address: if so its direct
	// connections were made while steering did not take them (standby,
	// off, lapsed, before it engaged); if not, every connection there
	// bypasses skewgate.
	Steered     bool
	Connections int
}

// String reads like "198.18.0.1:6443=3" or "10.0.0.100:6443=2 (not steered)".
func (d Direct) String() string {
	if d.Steered {
		return fmt.Sprintf("%s=%d", d.Address, d.Connections)
	}
	return fmt.Sprintf("%s=%d (not steered)", d.Address, d.Connections)
}

var descDirect = prometheus.NewDesc("skewgate_direct_connections",
	"Established connections this node's kube-apiserver accepted itself, not through skewgate, by address it serves (steered=\"false\": an address skewgate does not steer, whose every client bypasses it; "+
		"steered=\"true\": made while steering did not take them). Loopback and peer apiservers' addresses are not counted. Read at scrape time.",
	[]string{"address", "steered"}, nil)

// Direct lists every address the apiserver serves (and every steered one)
// with the established connections the apiserver holds there: a socket
// whose local address is it, not skewgate's (a steered connection has the
// target as its local address too), from no peer apiserver's address (its
// skewgate's forwarded requests) and not from loopback. Addresses come in
// order, the steered ones first. It is nil when steering is not
// configured.
func (n *Node) Direct() ([]Direct, error) {
	if !n.cfg.Steering {
		return nil, nil
	}
	out := n.addresses()
	if len(out) == 0 {
		return nil, nil
	}
	counts, err := countDirect(n.notDirect)
	for i := range out {
		out[i].Connections = counts[out[i].Address]
	}
	return out, err
}

// addresses are the steered targets, then every address the apiserver
// serves that is not one of them.
func (n *Node) addresses() []Direct {
	targets := n.steeredTargets()
	var out []Direct
	for _, t := range targets {
		out = append(out, Direct{Address: t, Steered: true})
	}
	var held []netip.Addr
	if n.target.Served.AllAddresses() {
		ifcs, err := nodeInterfaces()
		if err != nil {
			return out
		}
		held = nodeAddrs(ifcs)
	}
	for _, a := range servedAddrs(n.target.Served, held) {
		if !slices.Contains(targets, a) {
			out = append(out, Direct{Address: a})
		}
	}
	return out
}

// Unsteered lists the addresses the apiserver serves that skewgate does
// not steer: their clients reach the apiserver directly, whatever the
// mode. Nil when steering is not configured.
func (n *Node) Unsteered() []netip.AddrPort {
	if !n.cfg.Steering {
		return nil
	}
	var out []netip.AddrPort
	for _, d := range n.addresses() {
		if !d.Steered {
			out = append(out, d.Address)
		}
	}
	return out
}

// countDirect counts the established, accepted TCP connections by local
// address, but those notDirect's answer names and those from loopback. Both families are
// listed: a Go server on 0.0.0.0 holds IPv4 connections as AF_INET6 with
// mapped addresses.
func countDirect(notDirect func() (func(remote netip.AddrPort, inode uint32) bool, error)) (map[netip.AddrPort]int, error) {
	out := map[netip.AddrPort]int{}
	var socks []*netlink.Socket
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		list, err := netlink.SocketDiagTCP(family)
		if err != nil {
			return out, fmt.Errorf("list tcp sockets: %w", err)
		}
		socks = append(socks, list...)
	}
	// Whose they are, asked after they are listed (see resetDirect).
	skip, err := notDirect()
	if err != nil {
		return out, err
	}
	for _, s := range socks {
		local, ok1 := addrPort(s.ID.Source, s.ID.SourcePort)
		remote, ok2 := addrPort(s.ID.Destination, s.ID.DestinationPort)
		if !ok1 || !ok2 || s.State != netlink.TCP_ESTABLISHED || s.INode == 0 || remote.Addr().IsLoopback() || skip(remote, s.INode) {
			continue
		}
		out[local]++
	}
	return out, nil
}

// collectDirect exports Direct; when the sockets cannot be listed it
// exports nothing (an absent series, not a false 0) and logs why.
func (n *Node) collectDirect(ch chan<- prometheus.Metric) {
	list, err := n.Direct()
	if err != nil {
		n.cfg.Log.Debug("direct connections not counted", "err", err)
		return
	}
	for _, d := range list {
		ch <- prometheus.MustNewConstMetric(descDirect, prometheus.GaugeValue, float64(d.Connections), d.Address.String(), fmt.Sprint(d.Steered))
	}
}

// steeredTargets are the addresses steering holds now (the configured
// ones before it is installed).
func (n *Node) steeredTargets() []netip.AddrPort {
	n.mu.Lock()
	st := n.st
	n.mu.Unlock()
	if st != nil {
		return st.Targets()
	}
	return n.target.All
}

// notDirect tells the connections on the apiserver's addresses that it did
// not take from a client itself: skewgate's own sockets (a steered
// connection has the target as its local address too), its predecessor's
// (the skewgate it took the listening sockets from, which serves what it
// accepted until drained) and peer apiservers' (their skewgates' forwarded
// requests).
func (n *Node) notDirect() (func(remote netip.AddrPort, inode uint32) bool, error) {
	own, err := ownSocketInodes()
	if err != nil {
		return nil, err
	}
	switch p := n.cfg.Predecessor; {
	case p < 0:
		// Its sockets cannot be told from direct ones (another PID
		// namespace: the pod without hostPID).
		return nil, errors.New("the skewgate this one took over from is not visible here (hostPID): its connections cannot be told from direct ones")
	case p > 0:
		if err := predecessorSocketInodes(own, p); err != nil {
			return nil, err
		}
	}
	peers := map[netip.Addr]bool{}
	if n.cfg.PeerAddrs != nil {
		for _, a := range n.cfg.PeerAddrs() {
			peers[a.Unmap()] = true
		}
	}
	return func(remote netip.AddrPort, inode uint32) bool { return peers[remote.Addr()] || own[uint64(inode)] }, nil
}
