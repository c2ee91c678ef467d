package agent

import "testing"

// Mode auto steers in a window and while the node's own apiserver is away
// (its clients' new connections then reach peers); nothing else.
func TestWanted(t *testing.T) {
	for _, tc := range []struct {
		mode Mode
		w    Window
		want bool
	}{
		{ModeAlways, Window{}, true},
		{ModeOff, Window{Open: true, LocalAway: "away"}, false},
		{ModeAuto, Window{}, false},
		{ModeAuto, Window{Open: true, Reason: "versions differ"}, true},
		{ModeAuto, Window{LocalAway: "the local apiserver 127.0.0.1:6443 is away"}, true},
	} {
		if got, why := wanted(tc.mode, tc.w); got != tc.want || why == "" {
			t.Errorf("wanted(%s, %+v) = %t %q, want %t and a reason", tc.mode, tc.w, got, why, tc.want)
		}
	}
}

// Shedding wins over every mode: steering is withdrawn (fail open).
func TestSheddingWithdrawsSteering(t *testing.T) {
	shed := ""
	n := &Node{cfg: NodeConfig{Shed: func() string { return shed }, Mode: func() Mode { return ModeAlways }}}
	if on, _ := n.wanted(); !on {
		t.Fatal("mode always, not shedding: steering not wanted")
	}
	shed = "20000 client connections open"
	if on, why := n.wanted(); on || why == "" {
		t.Errorf("shedding: wanted %t %q, want steering withdrawn with a reason", on, why)
	}
}
