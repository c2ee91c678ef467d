package main

import (
	"log/slog"
	"net/netip"
	"net/url"
	"slices"
	"testing"

	"github.com/skewgate/skewgate/route"
)

func TestExemptFor(t *testing.T) {
	static := []netip.Prefix{netip.MustParsePrefix("198.18.0.3/32")}
	table := &route.Table{
		Local: route.Server{ID: "127.0.0.1:6443"},
		Peers: []route.Server{
			{ID: "198.18.0.2:6443"},
			{ID: "198.18.0.3:6443"},                // also static: once
			{ID: "[fd00::2]:6443", Departed: true}, // departed peers still forward for a while
			{ID: "apiserver.example:6443"},         // not an address: cannot be exempted by source
		},
	}
	got := exemptFor(static, table, netip.MustParseAddr("198.18.0.1"))
	want := []netip.Prefix{
		netip.MustParsePrefix("198.18.0.2/32"),
		netip.MustParsePrefix("198.18.0.3/32"),
		netip.MustParsePrefix("fd00::2/128"),
	}
	if !slices.Equal(got, want) {
		t.Errorf("exemptFor = %v, want %v", got, want)
	}
	if got := exemptFor(static, nil, netip.MustParseAddr("198.18.0.1")); !slices.Equal(got, static) {
		t.Errorf("exemptFor without a table = %v, want the static set", got)
	}
	wide := []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")}
	if got := exemptFor(wide, nil, netip.MustParseAddr("198.18.0.1")); len(got) != 0 {
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
		o := steerOptions{address: tc.address}
		_, _, err := o.targets(tc.local, nil)
		if (err == nil) != tc.ok {
			t.Errorf("steer %q, local %s: err %v, want ok=%v", tc.address, tc.local, err, tc.ok)
		}
	}
}

func TestWithoutSelf(t *testing.T) {
	var peers []*url.URL
	for _, s := range []string{"https://127.0.0.1:6443", "https://198.51.100.7:6443", "https://apiserver.example:6443"} {
		u, _ := url.Parse(s)
		peers = append(peers, u)
	}
	got, err := withoutSelf(peers, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, u := range got {
		hosts = append(hosts, u.Host)
	}
	if want := []string{"198.51.100.7:6443", "apiserver.example:6443"}; !slices.Equal(hosts, want) {
		t.Errorf("withoutSelf = %v, want %v (this node's loopback left out)", hosts, want)
	}
}

func TestTargetsExempt(t *testing.T) {
	for _, tc := range []struct {
		exempt []string
		peers  []string
		want   []string
		ok     bool
	}{
		{nil, nil, nil, true},
		{[]string{"198.18.9.0/24", "198.18.8.8"}, nil, []string{"198.18.8.8/32", "198.18.9.0/24"}, true},
		{nil, []string{"198.18.0.2", "peer.example"}, []string{"198.18.0.2/32"}, true}, // --steer-exempt-peers
		{[]string{"198.18.0.0/16"}, nil, nil, false},                                   // covers the node itself
		{[]string{"nonsense"}, nil, nil, false},
	} {
		o := steerOptions{address: "198.18.0.1:6443", exempt: tc.exempt}
		_, got, err := o.targets("127.0.0.1:6443", tc.peers)
		if (err == nil) != tc.ok {
			t.Errorf("exempt %v peers %v: err %v, want ok=%v", tc.exempt, tc.peers, err, tc.ok)
			continue
		}
		var strs []string
		for _, p := range got {
			strs = append(strs, p.String())
		}
		if tc.ok && !slices.Equal(strs, tc.want) {
			t.Errorf("exempt %v peers %v: %v, want %v", tc.exempt, tc.peers, strs, tc.want)
		}
	}
}
