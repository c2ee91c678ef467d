package membership

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/skewgate/skewgate/proxy/discovery"
)

// A local server that restarts once is back in routing as soon as it is
// healthy and its discovery confirmed; one that flaps (two downs within a
// minute) only after it stayed healthy for settleTime.
func TestLocalInRoutingIsDamped(t *testing.T) {
	s := &server{local: true}
	t0 := time.Now()
	down := errors.New("readyz: 500")
	probe := func(at time.Time, err error) { s.observe(time.Millisecond, err, at) }
	probe(t0, nil)
	probe(t0.Add(time.Millisecond), nil)
	if !s.inRouting(t0) {
		t.Fatal("healthy from the start: not in routing")
	}
	probe(t0.Add(time.Second), down)
	probe(t0.Add(1500*time.Millisecond), down)
	if s.inRouting(t0.Add(1500 * time.Millisecond)) {
		t.Fatal("failing /readyz: still in routing")
	}
	probe(t0.Add(2*time.Second), nil)
	probe(t0.Add(2500*time.Millisecond), nil)
	if s.inRouting(t0.Add(2500 * time.Millisecond)) {
		t.Fatal("back but its discovery not read again: in routing")
	}
	s.confirm(s.confirmable())
	if !s.inRouting(t0.Add(2500 * time.Millisecond)) {
		t.Fatal("one restart, back and confirmed: not in routing")
	}
	// It flaps: down again within the minute.
	probe(t0.Add(3*time.Second), down)
	probe(t0.Add(3500*time.Millisecond), down)
	probe(t0.Add(4*time.Second), nil)
	probe(t0.Add(4500*time.Millisecond), nil)
	s.confirm(s.confirmable())
	if s.inRouting(t0.Add(5 * time.Second)) {
		t.Error("flapping: back in routing at once")
	}
	if !s.settling(t0.Add(5 * time.Second)) {
		t.Error("flapping: not reported as settling")
	}
	if !s.inRouting(t0.Add(4500*time.Millisecond + settleTime)) {
		t.Error("flapping, then healthy for the settle time: still out")
	}
}

// A type-not-found 404 from a server whose discovery lists the type is
// kept from callers and asks for a re-read, at most once a second; once a
// read after the denial still lists the type, its 404s are the type's own
// until the server's discovery or health changes.
func TestDeniedListed(t *testing.T) {
	gvr := schema.GroupVersionResource{Group: "metrics.k8s.io", Version: "v1beta1", Resource: "pods"}
	s := &server{}
	doc := &discovery.Doc{}
	t0 := time.Now()
	fetched := t0.Add(-5 * time.Second)
	if !s.denied(gvr, doc, fetched, true, t0) || !s.deniedStale(gvr, doc) {
		t.Fatal("first denial: want a re-read and the 404 kept from the caller")
	}
	if s.denied(gvr, doc, fetched, true, t0.Add(100*time.Millisecond)) || !s.deniedStale(gvr, doc) {
		t.Fatal("a second denial while the read is under way: want no new read, the 404 kept")
	}
	// The read after the denial still lists it: the 404 is genuine.
	fetched = t0.Add(50 * time.Millisecond)
	if s.denied(gvr, doc, fetched, true, t0.Add(200*time.Millisecond)) || s.deniedStale(gvr, doc) {
		t.Fatal("discovery re-read still lists the type: want the 404 passed on")
	}
	if s.denied(gvr, doc, fetched, true, t0.Add(time.Hour)) || s.deniedStale(gvr, doc) {
		t.Fatal("the confirmed type, later, same discovery: want the 404 passed on")
	}
	// The server went down: it may come back on another version.
	s.mu.Lock()
	s.healthy = true
	s.mu.Unlock()
	s.connFailed(errors.New("refused"), time.Now())
	if !s.denied(gvr, doc, fetched, true, t0.Add(2*time.Hour)) || !s.deniedStale(gvr, doc) {
		t.Fatal("after the server went down: want a re-read and the 404 kept")
	}
	// Another document (it restarted): confirmations do not carry over.
	s2 := &server{genuine: map[schema.GroupVersionResource]*discovery.Doc{gvr: doc}}
	if !s2.deniedStale(gvr, &discovery.Doc{}) {
		t.Error("a confirmation carried over to a new discovery document")
	}
}
