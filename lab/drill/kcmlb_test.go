package drill

import (
	"slices"
	"testing"
	"time"
)

func TestKCMBalancerReport(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	k := &KCMBalancer{
		Conns: []KCMConn{
			{From: "node-b", To: "node-c", Start: t0.Add(-40 * time.Second)},
			{From: "node-a", To: "node-b", Start: t0.Add(-41 * time.Second), End: t0.Add(95 * time.Second)},
			{From: "node-a", To: "node-c", Start: t0.Add(96 * time.Second)},
		},
		Leaders: []KCMLeader{{At: t0.Add(-30 * time.Second), Node: "node-a"}, {At: t0.Add(100 * time.Second), Node: "node-b"}},
	}
	if got, want := connsText(k.PerNode()), "node-b 1, node-c 2"; got != want {
		t.Errorf("per node: %q, want %q", got, want)
	}
	want := []string{
		"leader: node-a −30s, node-b +1m40s",
		"node-a's: →node-b −41s…+1m35s, →node-c +1m36s…",
		"node-b's: →node-c −40s…",
	}
	if got := k.timeline(t0); !slices.Equal(got, want) {
		t.Errorf("timeline:\n%q\nwant\n%q", got, want)
	}
}
