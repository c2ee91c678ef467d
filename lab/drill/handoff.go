package drill

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/skewgate/skewgate/lab"
)

// What a node's steering changes cost its clients. In mode auto steering
// engages when a skew window opens (the hand-over: connections from before
// ended once their client is quiet, or moved by the apiserver's GOAWAY, their
// clients back through skewgate) and is released when it closes (the
// hand-back: steered connections are asked to leave, watches end cleanly).
// Neither may fail a request; the drill follows every node's steering on
// its pins and counts the failed requests each change could have caused.

// handOverSpan bounds a hand-over: a request to a node that fails within
// it after the node's steering engaged is the hand-over's.
const handOverSpan = 30 * time.Second

// handBackSpan bounds a hand-back: skewgate's HandBack.Spread (5 minutes,
// within which every steered watch is ended) and 30 s for the last
// connections asked to leave.
const handBackSpan = 5*time.Minute + 30*time.Second

// inFlightSpan bounds the failures a change can cause to requests sent
// before it: it acts at an instant (a reset breaks what is in flight at
// once), so one in flight that failed later was waiting on something else
// (a client's timeout on a request etcd's restart hung, say).
const inFlightSpan = time.Second

// steerPoll is how often the drill reads every node's pins: a fifth of
// the steering lease's renewal period.
const steerPoll = 100 * time.Millisecond

// nodeEvent is something that happened to a node.
type nodeEvent struct {
	node string
	at   time.Time
}

// steerChange is a node's steering engaging (on) or being released.
type steerChange struct {
	nodeEvent
	on bool
}

// steeringLog follows every node's steering.
type steeringLog struct {
	mu      sync.Mutex
	initial map[string]bool // the state first read, per node
	last    map[string]bool
	changes []steerChange
}

func newSteeringLog() *steeringLog {
	return &steeringLog{initial: map[string]bool{}, last: map[string]bool{}}
}

// follow reads every node's steering every steerPoll until ctx ends, with
// read (lab.KubeletSteering's verdict); a node whose pins cannot be read
// keeps its last state.
func (l *steeringLog) follow(ctx context.Context, nodes []lab.Node, read func(lab.Node) (bool, error)) {
	for ctx.Err() == nil {
		for _, n := range nodes {
			if on, err := read(n); err == nil {
				l.saw(n.Name, on, time.Now())
			}
		}
		sleep(ctx, steerPoll)
	}
}

func (l *steeringLog) saw(node string, on bool, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last, known := l.last[node]
	switch {
	case !known:
		l.initial[node] = on
	case on != last:
		l.changes = append(l.changes, steerChange{nodeEvent{node, at}, on})
	}
	l.last[node] = on
}

// handedBack reports whether every node known is released and has been
// for span (or never steered).
func (l *steeringLog) handedBack(span time.Duration, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for node, on := range l.last {
		if on {
			return false
		}
		for _, c := range l.changes {
			if c.node == node && now.Sub(c.at) < span {
				return false
			}
		}
	}
	return len(l.last) > 0
}

func (l *steeringLog) snapshot() (map[string]bool, []steerChange) {
	l.mu.Lock()
	defer l.mu.Unlock()
	initial := make(map[string]bool, len(l.initial))
	for k, v := range l.initial {
		initial[k] = v
	}
	return initial, slices.Clone(l.changes)
}

// HandOff is what one node's steering changes cost in a run.
type HandOff struct {
	Node string
	// Steering: the node steered when the drill began following it
	// (before its workload started).
	Steering bool
	// Engaged is when its steering first engaged, Released when it was
	// last released (zero: never); Engages and Releases count them.
	Engaged, Released time.Time
	Engages, Releases int
	// FirstStop is when the run's first apiserver went away (its /readyz
	// failed, e.g. while kubeadm restarts etcd), FirstSilent when the
	// first stopped answering (zero: none).
	FirstStop, FirstSilent time.Time
	// HandOver counts the requests to the node that failed within
	// handOverSpan of an engagement, before the next change and before
	// its own apiserver next stopped; Kept those on a connection the drill
	// saw before the engagement. HandBack counts likewise within
	// handBackSpan of a release. OverBy and BackBy count them by outcome.
	HandOver, Kept, HandBack int
	OverBy, BackBy           map[string]int
	// Failures are the first few of them.
	Failures []event
}

// EngagedBeforeStop reports whether the node steered before the run's
// first apiserver stopped answering (or none did).
func (h HandOff) EngagedBeforeStop() bool {
	return h.FirstSilent.IsZero() || h.Steering || !h.Engaged.IsZero() && h.Engaged.Before(h.FirstSilent)
}

// firstOf is the earliest of events, zero if none.
func firstOf(events []nodeEvent) time.Time {
	var t time.Time
	for _, e := range events {
		if t.IsZero() || e.at.Before(t) {
			t = e.at
		}
	}
	return t
}

// failed reports whether e is a failed request: anything but a success
// or a genuine 4xx, except a 503 for a type no live server served at that
// moment (nothing could have answered it).
func failed(e event) bool {
	return e.outcome != OK && (e.outcome != Unavailable || e.live)
}

// handOffs attributes the failed requests of events to the steering
// changes of each node: a request fails when its answer (or error)
// arrives, and is a change's when it reached the node within the change's
// span (handOverSpan after an engagement, handBackSpan after a release),
// cut short by the node's next change and by its apiserver's next stop (a
// failure after that is the restart's).
func handOffs(events []event, nodes []string, hist nodeHistory) []HandOff {
	firstStop, firstSilent := firstOf(hist.stops), firstOf(hist.silent)
	out := make([]HandOff, 0, len(nodes))
	for _, node := range nodes {
		h := HandOff{Node: node, Steering: hist.initial[node], FirstStop: firstStop, FirstSilent: firstSilent,
			OverBy: map[string]int{}, BackBy: map[string]int{}}
		var mine []steerChange
		for _, c := range hist.changes {
			if c.node == node {
				mine = append(mine, c)
			}
		}
		for i, c := range mine {
			span := handBackSpan
			if c.on {
				span = handOverSpan
				h.Engages++
				if h.Engaged.IsZero() {
					h.Engaged = c.at
				}
			} else {
				h.Releases++
				h.Released = c.at
			}
			end := c.at.Add(span)
			if i+1 < len(mine) && mine[i+1].at.Before(end) {
				end = mine[i+1].at
			}
			for _, s := range hist.stops {
				if s.node == node && !s.at.Before(c.at) && s.at.Before(end) {
					end = s.at
				}
			}
			h.attribute(events, c, end, hist)
		}
		out = append(out, h)
	}
	return out
}

// attribute counts the failed requests to h's node answered in [c.at,
// end), but those sent before c and answered more than inFlightSpan after
// it, and those sent on a connection from before c while the node's
// apiserver was away: a direct connection to an apiserver that is
// restarting fails for the restart, whatever steering does.
func (h *HandOff) attribute(events []event, c steerChange, end time.Time, hist nodeHistory) {
	for _, e := range events {
		done := e.at.Add(e.latency)
		if e.node != h.Node || !failed(e) || done.Before(c.at) || !done.Before(end) ||
			e.at.Before(c.at) && done.Sub(c.at) > inFlightSpan || e.connAt.Before(c.at) && hist.away(h.Node, e.at) {
			continue
		}
		if c.on {
			h.HandOver++
			h.OverBy[e.outcome]++
			if e.connAt.Before(c.at) {
				h.Kept++
			}
		} else {
			h.HandBack++
			h.BackBy[e.outcome]++
		}
		if len(h.Failures) < 5 {
			h.Failures = append(h.Failures, e)
		}
	}
}

// nodeHistory is what the drill saw of its nodes: each one's steering
// (the state first read, then every change) and when its apiserver went
// away (failed /readyz), stopped answering and was up.
type nodeHistory struct {
	initial            map[string]bool
	changes            []steerChange
	stops, silent, ups []nodeEvent
}

// away reports whether node's apiserver was away at t: it last went away
// after it was last up.
func (h nodeHistory) away(node string, t time.Time) bool {
	last := func(events []nodeEvent) time.Time {
		var l time.Time
		for _, e := range events {
			if e.node == node && !e.at.After(t) && e.at.After(l) {
				l = e.at
			}
		}
		return l
	}
	stop := last(h.stops)
	return !stop.IsZero() && stop.After(last(h.ups))
}

// HandOffs is what each node's steering changes cost in the run (nil:
// its steering was not followed).
func (r *Result) HandOffs() []HandOff {
	if r.nodes.initial == nil {
		return nil
	}
	nodes := make([]string, 0, len(r.nodes.initial))
	for n := range r.nodes.initial {
		nodes = append(nodes, n)
	}
	slices.Sort(nodes)
	return handOffs(r.events, nodes, r.nodes)
}
