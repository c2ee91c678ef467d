package agent

import (
	"fmt"
	"time"
)

// Mode is when steering is wanted (--steering-mode, or the cluster's
// kube-system/skewgate ConfigMap, which wins).
type Mode string

const (
	// ModeAlways steers for as long as skewgate runs.
	ModeAlways Mode = "always"
	// ModeAuto steers only during a skew window — from the moment an
	// upgrade or rollback shows (the apiservers' versions or what their
	// binaries serve differ, or an apiserver upgrade has begun) until they
	// have agreed for the hold time — and while the local apiserver is
	// away and a peer is ready (rule 3a). Otherwise new connections reach
	// the apiserver directly: the hop costs nothing.
	ModeAuto Mode = "auto"
	// ModeOff never steers.
	ModeOff Mode = "off"
)

// Modes lists the valid modes.
var Modes = []Mode{ModeAlways, ModeAuto, ModeOff}

// ParseMode reads a mode by name.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("steering mode %q: want always, auto or off", s)
}

// Window is the skew window as the proxy sees it: open, and why (which
// members differ), or closed and since when.
type Window struct {
	Open   bool
	Reason string
	// Until is when an open window closes if the members keep agreeing
	// (zero while they differ).
	Until time.Time
	// LocalAway says why the node's own apiserver is out of routing, or
	// "": mode auto steers while it lasts, so that its clients' new
	// connections reach peers (rule 3a) instead of a refused port. It is
	// no window: no hold, and the connections go back once it returns.
	LocalAway string
}

// wanted decides whether steering is wanted under mode in window, and why.
func wanted(mode Mode, w Window) (bool, string) {
	switch mode {
	case ModeAlways:
		return true, "mode always"
	case ModeOff:
		return false, "mode off"
	}
	if w.Open {
		return true, "skew window: " + w.Reason
	}
	if w.LocalAway != "" {
		return true, w.LocalAway + ": its clients go to peers (rule 3a)"
	}
	return false, "mode auto, no skew window: no upgrade under way"
}
