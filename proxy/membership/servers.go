package membership

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

// ParseServers reads --local-apiserver and --peers. Every error names the
// flag and the value at fault.
func ParseServers(local string, peers []string) (*url.URL, []*url.URL, error) {
	lu, err := parseServer("--local-apiserver", local)
	if err != nil {
		return nil, nil, err
	}
	var pus []*url.URL
	for _, p := range peers {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		pu, err := parseServer("--peers", p)
		if err != nil {
			return nil, nil, err
		}
		pus = append(pus, pu)
	}
	return lu, pus, nil
}

func parseServer(flag, s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("%s %q: want https://host:port", flag, s)
	}
	u.Path = ""
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "443")
	}
	return u, nil
}

// WithoutSelf drops the peers that are addresses of this node (self): the
// same --peers list on every node is common, and this node's apiserver is
// the local one, not a peer (nor a source to exempt from steering).
func WithoutSelf(peers []*url.URL, self func(netip.Addr) bool, log *slog.Logger) []*url.URL {
	out := peers[:0:0]
	for _, p := range peers {
		if ip, err := netip.ParseAddr(p.Hostname()); err == nil && self(ip) {
			log.Info("--peers names this node: left out", "peer", p.String())
			continue
		}
		out = append(out, p)
	}
	return out
}

// PeerAddrs lists the address of every peer in the routing table whose ID
// is an address (not a name), departed ones included: they may still
// forward for a while.
func (m *Members) PeerAddrs() []netip.Addr {
	t := m.Table()
	if t == nil {
		return nil
	}
	var out []netip.Addr
	for _, p := range t.Peers {
		if ap, err := netip.ParseAddrPort(p.ID); err == nil {
			out = append(out, ap.Addr().Unmap())
		}
	}
	return out
}
