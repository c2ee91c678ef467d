package agent

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestIdle: what counts as nothing in flight on a direct connection, from
// the apiserver's side (ms since its last data received and sent).
func TestIdle(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		recv, sent, unacked, rq uint32
		want                    bool
	}{
		{"quiet for 2 s, its last answer and request in one jiffy", 2000, 2000, 0, 0, true},
		{"a watch: its last event sent 3 s ago, its request 60 s ago", 60000, 3000, 0, 0, true},
		{"answered 50 ms ago, after the request (a client between two requests)", 60, 50, 0, 0, true},
		{"answered 40 ms ago, within the jiffy its request came in", 40, 40, 0, 0, true},
		{"answered 5 ms ago: the client may be asking again", 15, 5, 0, 0, false},
		{"request received after the last answer (being computed)", 50, 300, 0, 0, false},
		{"request received, nothing answered for 2 s but data received 500 ms ago", 500, 2000, 0, 0, false},
		{"a request hung 6 s (etcd restarting), the last answer 8 s old", 6000, 8000, 0, 0, false},
		{"answer not yet acknowledged", 60, 50, 1, 0, false},
		{"request bytes unread", 60, 50, 0, 120, false},
	} {
		r := &netlink.InetDiagTCPInfoResp{
			InetDiagMsg: &netlink.Socket{RQueue: tc.rq},
			TCPInfo:     &netlink.TCPInfo{Last_data_recv: tc.recv, Last_data_sent: tc.sent, Unacked: tc.unacked},
		}
		if got := idle(r, resetSettle); got != tc.want {
			t.Errorf("%s: idle = %t, want %t", tc.name, got, tc.want)
		}
	}
	if idle(&netlink.InetDiagTCPInfoResp{InetDiagMsg: &netlink.Socket{}}, resetSettle) {
		t.Error("no tcp_info: idle")
	}
}

// TestResetsFor: the sweep moves clients for an upgrade or an arming, not
// when steering engaged for rule 3a alone (the kubeadm drill: 34 idle
// connections ended on node-a when kubeadm restarted its etcd).
func TestResetsFor(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode Mode
		w    Window
		want bool
	}{
		{"mode always (armed)", ModeAlways, Window{}, true},
		{"a skew window", ModeAuto, Window{Open: true, Reason: "versions differ"}, true},
		{"the local apiserver away, no window", ModeAuto, Window{LocalAway: "the local apiserver 127.0.0.1:6443 is away"}, false},
		{"mode off", ModeOff, Window{Open: true}, false},
	} {
		if got := resetsFor(tc.mode, tc.w); got != tc.want {
			t.Errorf("%s: resetsFor = %t, want %t", tc.name, got, tc.want)
		}
	}
}

// TestSweepOncePerEngagement: the sweep runs when an engagement's reason
// first warrants one — at once (a window, an arming), or later in the
// same engagement (rule 3a engaged it, then a window opened) — once per
// engagement, and again after a standby.
func TestSweepOncePerEngagement(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		fresh, swept, warranted bool
		run, sweptAfter         bool
	}{
		{"engaged for a window", true, false, true, true, true},
		{"engaged for a window, after an engagement that swept", true, true, true, true, true},
		{"engaged for rule 3a", true, true, false, false, false},
		{"rule 3a, then a window opened", false, false, true, true, true},
		{"the window's reason changed", false, true, true, false, true},
		{"the window closed, rule 3a holds", false, true, false, false, true},
	} {
		run, after := sweepNow(tc.fresh, tc.swept, tc.warranted)
		if run != tc.run || after != tc.sweptAfter {
			t.Errorf("%s: sweepNow = %t, %t; want %t, %t", tc.name, run, after, tc.run, tc.sweptAfter)
		}
	}
}

// TestOnEngageWhenWhyChanges: OnEngage runs fresh when steering engages
// after a standby, not fresh when why it steers changes while it steers,
// and not at all for a renewal with the same reason or a standby.
func TestOnEngageWhenWhyChanges(t *testing.T) {
	calls := make(chan bool, 8)
	s := &Steering{cfg: SteeringConfig{OnEngage: func(fresh bool) { calls <- fresh }, Log: slog.New(slog.DiscardHandler)}}
	away := "the local apiserver node-a is away: its clients go to peers (rule 3a)"
	var got []bool
	for _, st := range []Status{
		{State: StateStandby, Why: "mode auto, no skew window: no upgrade under way"},
		{State: StateSteering, Why: away},
		{State: StateSteering, Why: away},
		{State: StateSteering, Why: "skew window: upgrade under way"},
		{State: StateStandby, Why: "mode auto, no skew window: no upgrade under way"},
		{State: StateSteering, Why: "mode always"},
	} {
		s.change(st)
	}
	for range 3 {
		select {
		case f := <-calls:
			got = append(got, f)
		case <-time.After(5 * time.Second):
			t.Fatalf("OnEngage called %d times, want 3: %v", len(got), got)
		}
	}
	select {
	case f := <-calls:
		t.Fatalf("OnEngage called a fourth time (fresh %t)", f)
	case <-time.After(100 * time.Millisecond):
	}
	// Each runs in its own goroutine: counted, not ordered.
	if fresh := len(slices.DeleteFunc(slices.Clone(got), func(f bool) bool { return !f })); fresh != 2 {
		t.Errorf("OnEngage fresh = %v, want twice fresh and once not", got)
	}
}
