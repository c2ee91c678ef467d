package agent

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestQuiet: what the kernel proves about a direct connection, from the
// apiserver's side (ms since its last data received and sent). Only the
// client's silence counts: who spoke last proves nothing under TLS and
// HTTP/2 (the rule before this one took a 64 KiB write whose body the
// server had read for idle, after its WINDOW_UPDATE).
func TestQuiet(t *testing.T) {
	const quiet = 90 * time.Second
	for _, tc := range []struct {
		name                        string
		recv, sent, unacked, rq, wq uint32
		want                        bool
	}{
		{"client silent 90 s, the server too", 90000, 90000, 0, 0, 0, true},
		{"a watch: its last event sent 3 s ago, its request 10 min ago", 600000, 3000, 0, 0, 0, true},
		{"client silent 95 s, the server answered 20 ms ago", 95000, 20, 0, 0, 0, true},
		{"a write read 150 ms ago, the server's WINDOW_UPDATE after it (the old rule: idle)", 150, 140, 0, 0, 0, false},
		{"the first request on a fresh connection, the server's SETTINGS after it", 150, 150, 0, 0, 0, false},
		{"between two requests, answered 50 ms ago", 60, 50, 0, 0, 0, false},
		{"a request hung 6 s (etcd restarting)", 6000, 8000, 0, 0, 0, false},
		{"client silent 89.9 s: within the quiet time", 89900, 89900, 0, 0, 0, false},
		{"client silent long, the answer not yet acknowledged", 120000, 10, 1, 0, 0, false},
		{"client silent long, its bytes unread", 120000, 120000, 0, 120, 0, false},
		{"client silent long, the answer queued", 120000, 10, 0, 0, 4096, false},
	} {
		r := &netlink.InetDiagTCPInfoResp{
			InetDiagMsg: &netlink.Socket{RQueue: tc.rq, WQueue: tc.wq},
			TCPInfo:     &netlink.TCPInfo{Last_data_recv: tc.recv, Last_data_sent: tc.sent, Unacked: tc.unacked},
		}
		if got := isQuiet(r, quiet); got != tc.want {
			t.Errorf("%s: isQuiet = %t, want %t", tc.name, got, tc.want)
		}
	}
	if isQuiet(&netlink.InetDiagTCPInfoResp{InetDiagMsg: &netlink.Socket{}}, quiet) {
		t.Error("no tcp_info: quiet")
	}
}

// TestResetQuiet: the quiet time defaults to the apiserver's request
// timeout × 1.5, at least 90 s, and a flag at or below the request
// timeout is refused, naming where the timeout came from.
func TestResetQuiet(t *testing.T) {
	kubeadm := &Serving{Manifest: "/etc/kubernetes/manifests/kube-apiserver.yaml", RequestTimeout: time.Minute}
	long := &Serving{Manifest: "/etc/kubernetes/manifests/kube-apiserver.yaml", RequestTimeout: 3 * time.Minute}
	for _, tc := range []struct {
		name string
		flag time.Duration
		srv  *Serving
		want time.Duration
		err  string
	}{
		{"no manifest: the default timeout", 0, nil, 90 * time.Second, ""},
		{"kubeadm's 1m: the floor", 0, kubeadm, 90 * time.Second, ""},
		{"a 3m timeout: × 1.5", 0, long, 270 * time.Second, ""},
		{"given, past the timeout", 61 * time.Second, kubeadm, 61 * time.Second, ""},
		{"given, equal to the timeout", time.Minute, kubeadm, 0, "--steering-reset-quiet=1m0s: want more than the apiserver's request timeout, 1m0s (--request-timeout in /etc/kubernetes/manifests/kube-apiserver.yaml)"},
		{"given, below a long timeout", 2 * time.Minute, long, 0, "request timeout, 3m0s"},
		{"given, below the default", 30 * time.Second, nil, 0, "kube-apiserver's default --request-timeout"},
	} {
		got, err := ResetQuiet(tc.flag, tc.srv)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v, %v; want an error saying %q", tc.name, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
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
