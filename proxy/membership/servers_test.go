package membership

import (
	"log/slog"
	"net/netip"
	"net/url"
	"slices"
	"testing"

	"github.com/skewgate/skewgate/proxy/route"
)

func TestWithoutSelf(t *testing.T) {
	var peers []*url.URL
	for _, s := range []string{"https://127.0.0.1:6443", "https://198.51.100.7:6443", "https://apiserver.example:6443"} {
		u, _ := url.Parse(s)
		peers = append(peers, u)
	}
	self, err := LocalAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, u := range WithoutSelf(peers, self, slog.New(slog.DiscardHandler)) {
		hosts = append(hosts, u.Host)
	}
	if want := []string{"198.51.100.7:6443", "apiserver.example:6443"}; !slices.Equal(hosts, want) {
		t.Errorf("WithoutSelf = %v, want %v (this node's loopback left out)", hosts, want)
	}
}

func TestParseServers(t *testing.T) {
	local, peers, err := ParseServers("https://127.0.0.1:6443", []string{" https://10.0.0.2", "", "https://10.0.0.3:6443/"})
	if err != nil {
		t.Fatal(err)
	}
	if local.Host != "127.0.0.1:6443" || len(peers) != 2 || peers[0].Host != "10.0.0.2:443" || peers[1].Host != "10.0.0.3:6443" {
		t.Errorf("ParseServers = %v %v", local, peers)
	}
	for _, bad := range []string{"http://10.0.0.1:6443", "10.0.0.1:6443", "https://10.0.0.1:6443/api"} {
		if _, _, err := ParseServers(bad, nil); err == nil {
			t.Errorf("--local-apiserver %q accepted", bad)
		}
	}
}

func TestPeerAddrs(t *testing.T) {
	m := &Members{}
	m.table.Store(&route.Table{
		Local: route.Server{ID: "127.0.0.1:6443"},
		Peers: []route.Server{
			{ID: "198.18.0.2:6443"},
			{ID: "[fd00::2]:6443", Departed: true}, // departed peers still forward for a while
			{ID: "apiserver.example:6443"},         // not an address: cannot be exempted by source
		},
	})
	want := []netip.Addr{netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("fd00::2")}
	if got := m.PeerAddrs(); !slices.Equal(got, want) {
		t.Errorf("PeerAddrs = %v, want %v", got, want)
	}
}
