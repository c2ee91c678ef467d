package agent

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestSteeringHoldAcrossSIGKILL: inside a rollback grace a killed agent's
// connections are refused, not handed to the apiserver (which would
// answer 404 for a type its clients still map): a client that retries
// reaches the restarted agent; with no restart, connections reach the
// apiserver once the hold ends; the kill switch passes at once whatever
// the hold. Compare TestSteeringSIGKILL: without a grace, they fall back
// at once.
func TestSteeringHoldAcrossSIGKILL(t *testing.T) {
	n := newNode(t)
	const hold = 4 * time.Second
	env := "SGT_HOLD=" + hold.String()
	str := startStream(t, n.ns, targetAddr, 1000000)

	// Killed, then restarted.
	first := startChild(t, n, env)
	str.waitGreet(t, "child", time.Now(), 5*time.Second)
	first.kill()
	killed := time.Now()
	time.Sleep(500 * time.Millisecond)
	if st := controlState(t, n.pins); st.HoldRemaining <= 0 || st.Steering() || !strings.HasPrefix(st.String(), "on, held") {
		t.Fatalf("after the kill: %s; want held", st)
	}
	if !pinnedHold(n.pins) {
		t.Error("a restarted agent would not see its predecessor's hold: mode off would not wait")
	}
	restarting := time.Now()
	second := startChild(t, n, env)
	str.waitGreet(t, "child", restarting, 5*time.Second)
	back := firstGreet(str.snapshot(), "child", killed)
	c := tally(str.snapshot(), killed, back)
	if c.origin > 0 || c.refused == 0 || c.other > 0 {
		t.Errorf("between the kill and the restarted agent's first connection: %+v; want every connection refused, none reaching the apiserver", c)
	}
	t.Logf("killed, restarted %s later: %d connections refused, %d reached the apiserver; the retrying client reached the restarted agent %s after the kill",
		restarting.Sub(killed).Round(time.Millisecond), c.refused, c.origin, back.Sub(killed).Round(time.Millisecond))

	// Killed, not restarted: refused until the hold ends, then the
	// apiserver.
	second.kill()
	killed = time.Now()
	str.waitGreet(t, "origin", killed, hold+3*time.Second)
	fell := firstGreet(str.snapshot(), "origin", killed)
	c = tally(str.snapshot(), killed, fell)
	if c.origin > 0 || c.refused == 0 || c.other > 0 {
		t.Errorf("between the kill and the hold's end: %+v; want every connection refused", c)
	}
	// The last renewal set the hold 4 s ahead, at most one renewal
	// (100 ms) before the kill.
	if d := fell.Sub(killed); d < hold-300*time.Millisecond || d > hold+time.Second {
		t.Errorf("connections reached the apiserver %s after the kill, want after the %s hold", d, hold)
	}
	if pinnedHold(n.pins) {
		t.Error("the pins still hold after the hold's end")
	}
	t.Logf("killed, not restarted: %d connections refused, then the apiserver took them %s after the kill (hold %s)",
		c.refused, fell.Sub(killed).Round(time.Millisecond), hold)

	// `skewgate steer off` refuses under the hold without --force; the
	// kill switch passes at once, whatever the hold.
	third := startChild(t, n, env)
	str.waitGreet(t, "child", time.Now(), 5*time.Second)
	ctl, err := OpenControl(n.pins)
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	if err := ctl.TurnOff(false); !errors.Is(err, ErrHeld) || !controlState(t, n.pins).Enabled {
		t.Errorf("steer off without --force under the hold: %v; want ErrHeld and the switch still on", err)
	}
	third.kill()
	if err := ctl.TurnOff(true); err != nil {
		t.Fatal(err)
	}
	if got := n.dial.who(t, targetAddr); got != "origin" {
		t.Errorf("kill switch off under the hold: %s answered, want the apiserver", got)
	}
	if st, err := ctl.State(); err != nil || st.HoldRemaining <= 0 || st.Lookups["off"] == 0 {
		t.Errorf("kill switch off: %+v, %v; want the hold still live and the lookup passed as off", st, err)
	}
	str.halt()
}

// outcomes counts a stream's connections by how they ended.
type outcomes struct{ refused, origin, child, other int }

// tally counts the connections started in (from, to).
func tally(rs []streamResult, from, to time.Time) outcomes {
	var c outcomes
	for _, r := range rs {
		switch {
		case !r.start.After(from) || !r.start.Before(to):
		case errors.Is(r.err, syscall.ECONNREFUSED):
			c.refused++
		case r.err != nil:
			c.other++
		case r.greet == "origin":
			c.origin++
		case r.greet == "child":
			c.child++
		default:
			c.other++
		}
	}
	return c
}

// firstGreet is when the first connection started after since that who
// greeted began.
func firstGreet(rs []streamResult, who string, since time.Time) time.Time {
	for _, r := range rs {
		if r.start.After(since) && r.greet == who {
			return r.start
		}
	}
	return time.Time{}
}

// TestDeliberateWithdrawalsClearTheHold: the hold follows the renewals
// while a grace holds, and every deliberate step aside — standby (not
// wanted: mode off, shedding), a failed probe, a withdrawal at shutdown —
// clears it at once: only an agent that cannot decide leaves it behind.
func TestDeliberateWithdrawalsClearTheHold(t *testing.T) {
	n := newNode(t)
	var want, probeOK, holds atomic.Bool
	want.Store(true)
	probeOK.Store(true)
	holds.Store(true)
	cfg := n.steeringConfig()
	cfg.Want = func() (bool, string) { return want.Load(), "test" }
	cfg.Hold = func() string {
		if holds.Load() {
			return "a test's grace"
		}
		return ""
	}
	cfg.Probe = func(context.Context, bool) error {
		if probeOK.Load() {
			return nil
		}
		return errors.New("probe failed")
	}
	cfg.HoldFor = 10 * time.Second
	s := n.steerToProxy(t, cfg)
	held := func(what string, want bool) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for st := controlState(t, n.pins); (st.HoldRemaining > 0) != want; st = controlState(t, n.pins) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: hold %s left, want held %t", what, st.HoldRemaining, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	held("steering inside a grace", true)
	holds.Store(false)
	held("the grace over", false)
	holds.Store(true)
	held("a grace again", true)

	want.Store(false)
	waitState(t, s, StateStandby)
	held("standby", false)
	if got := n.dial.who(t, targetAddr); got != "origin" {
		t.Errorf("standby under a grace: %s answered, want the apiserver", got)
	}
	want.Store(true)
	waitState(t, s, StateSteering)
	held("wanted again", true)

	probeOK.Store(false)
	waitState(t, s, StateLapsed)
	held("a failed probe", false)
	probeOK.Store(true)
	deadline := time.Now().Add(15 * time.Second) // the retry's hold-off
	for s.Status().State != StateSteering && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	held("steering again", true)

	s.withdraw()
	held("withdrawn", false)
	if got := n.dial.who(t, targetAddr); got != "origin" {
		t.Errorf("withdrawn under a grace: %s answered, want the apiserver", got)
	}
}

// TestModeOffWaitsForTheGrace: the switch's off waits while a grace holds
// a type and steering is engaged, and says why; off that found steering
// in standby, shedding, or a grace that ended apply at once, and once
// applied off stays off when a grace comes later.
func TestModeOffWaitsForTheGrace(t *testing.T) {
	mode, held, shed := ModeAuto, "a rollback grace holds apps/v1, Resource=widgets", ""
	n := &Node{cfg: NodeConfig{
		Mode:   func() Mode { return mode },
		Window: func() Window { return Window{Open: true, Reason: "versions differ"} },
		Held:   func() string { return held },
		Shed:   func() string { return shed },
	}}
	check := func(what string, wantOn bool, wantWhy string) {
		t.Helper()
		on, why := n.wanted()
		if on != wantOn || !strings.HasPrefix(why, wantWhy) {
			t.Errorf("%s: wanted %t, %q; want %t, %q…", what, on, why, wantOn, wantWhy)
		}
	}
	check("mode auto, window open", true, "skew window")
	mode = ModeOff
	check("off while a grace holds", true, "steering off waits: a rollback grace holds apps/v1")
	shed = "memory"
	check("shedding", false, "shedding load")
	shed = ""
	check("off after shedding withdrew", false, "mode off")
	mode = ModeAuto
	check("auto again", true, "skew window")
	mode = ModeOff
	check("off again", true, "steering off waits")
	held = ""
	check("the grace over", false, "mode off")
	held = "a rollback grace holds apps/v1, Resource=gadgets"
	check("a grace after off applied", false, "mode off")
}
