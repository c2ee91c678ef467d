package main

import (
	"net/netip"
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
	got := exemptFor(static, table)
	want := []netip.Prefix{
		netip.MustParsePrefix("198.18.0.2/32"),
		netip.MustParsePrefix("198.18.0.3/32"),
		netip.MustParsePrefix("fd00::2/128"),
	}
	if !slices.Equal(got, want) {
		t.Errorf("exemptFor = %v, want %v", got, want)
	}
	if got := exemptFor(static, nil); !slices.Equal(got, static) {
		t.Errorf("exemptFor without a table = %v, want the static set", got)
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
