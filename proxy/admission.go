package proxy

import (
	"container/list"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// Admission tells the client connections whose caller proved who it is
// from those that have not, yet. Only the former count toward Load's
// bounds: shedding withdraws steering, and a bound that anyone able to
// open TCP connections to a node address could reach (400 connections
// that never started TLS tripped a bound of 400) would let anyone switch
// the protection off.
//
// A connection is pending until a request on it comes from a caller
// skewgate verified (a client certificate, a peer, its own probe) or
// carries a token an apiserver answered with anything but 401. Pending
// connections are bounded per source address and in total; past either
// bound the oldest pending connection is closed to make room, not the new
// one: refusing newcomers would let one client behind a shared source
// address (an SNAT, a load balancer) lock out everyone else behind it.
// Their TLS handshake has ReadHeaderTimeout (see Serve).
type Admission struct {
	load *Load
	// PerSource bounds the pending connections of one source address
	// (0: no bound).
	PerSource int
	// MaxPending bounds the pending connections in total; 0: a quarter of
	// the soft memory limit at pendingConnBytes each (none without a
	// limit).
	MaxPending int

	mu       sync.Mutex
	conns    map[net.Conn]*admittee
	pending  list.List // *admittee, oldest first
	bySource map[netip.Addr]*list.List

	pendingN atomic.Int64
	dropped  [dropBounds]atomic.Int64
}

// DefaultPerSource is the pending connections one source address may hold:
// far more than one client opens at once, far fewer than it takes to
// hold a node's memory.
const DefaultPerSource = 256

// pendingConnBytes is what a pending connection is counted at against the
// soft memory limit: a TLS handshake's buffers and a goroutine or two
// (an idle established one measured about 55 KiB, docs/deploy.md).
const pendingConnBytes = 64 << 10

// Bounds a pending connection is dropped at (the dropped metric's label).
const (
	boundSource = iota
	boundTotal
	dropBounds
)

var boundNames = [dropBounds]string{boundSource: "source", boundTotal: "total"}

// admittee is one client connection.
type admittee struct {
	a    *Admission
	conn net.Conn
	src  netip.Addr
	// pending is written under Admission.mu, read without it on each
	// request's way.
	pending atomic.Bool
	dropped bool // closed to make room: never counted
	// elem and srcElem are its places in pending and bySource[src].
	elem, srcElem *list.Element
}

// NewAdmission returns an admission that counts authenticated connections
// in load.
func NewAdmission(load *Load) *Admission {
	return &Admission{load: load, PerSource: DefaultPerSource, conns: map[net.Conn]*admittee{}, bySource: map[netip.Addr]*list.List{}}
}

type admitteeKey struct{}

// ConnContext is http.Server.ConnContext: it takes c in as pending, and
// makes room for it past a bound. It runs as c is accepted, before its
// TLS handshake.
func (a *Admission) ConnContext(ctx context.Context, c net.Conn) context.Context {
	e := &admittee{a: a, conn: c, src: sourceOf(c)}
	e.pending.Store(true)
	a.mu.Lock()
	a.conns[c] = e
	e.elem = a.pending.PushBack(e)
	q := a.bySource[e.src]
	if q == nil {
		q = list.New()
		a.bySource[e.src] = q
	}
	e.srcElem = q.PushBack(e)
	a.pendingN.Add(1)
	var drop []*admittee
	for a.PerSource > 0 && q.Len() > a.PerSource {
		drop = append(drop, a.unpend(q.Front().Value.(*admittee), boundSource))
	}
	for limit := a.maxPending(); limit > 0 && a.pending.Len() > limit; {
		drop = append(drop, a.unpend(a.pending.Front().Value.(*admittee), boundTotal))
	}
	a.mu.Unlock()
	for _, d := range drop {
		closeNow(d.conn)
	}
	return context.WithValue(ctx, admitteeKey{}, e)
}

// ConnState is http.Server.ConnState: it forgets a closed (or hijacked)
// connection, and uncounts it if it was authenticated.
func (a *Admission) ConnState(c net.Conn, st http.ConnState) {
	if st != http.StateClosed && st != http.StateHijacked {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.conns[c]
	if e == nil {
		return
	}
	delete(a.conns, c)
	switch {
	case e.pending.Load():
		a.unpend(e, -1)
	case !e.dropped:
		a.load.conns.Add(-1)
	}
}

// authenticated counts the connection of a request whose caller proved
// who it is (see Admission); later calls do nothing.
func authenticated(ctx context.Context) {
	e, _ := ctx.Value(admitteeKey{}).(*admittee)
	if e == nil || !e.pending.Load() {
		return // pending is only ever cleared
	}
	a := e.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if !e.pending.Load() {
		return // dropped, closed or counted meanwhile
	}
	a.unpend(e, -1)
	a.load.conns.Add(1)
}

// unpend takes e out of the pending connections, counting it as dropped
// at bound (-1: not dropped); a.mu is held.
func (a *Admission) unpend(e *admittee, bound int) *admittee {
	a.pending.Remove(e.elem)
	q := a.bySource[e.src]
	q.Remove(e.srcElem)
	if q.Len() == 0 {
		delete(a.bySource, e.src)
	}
	e.pending.Store(false)
	a.pendingN.Add(-1)
	if bound >= 0 {
		e.dropped = true
		a.dropped[bound].Add(1)
	}
	return e
}

func (a *Admission) maxPending() int {
	if a.MaxPending > 0 {
		return a.MaxPending
	}
	if limit := debug.SetMemoryLimit(-1); limit > 0 && limit < 1<<62 {
		return int(limit / 4 / pendingConnBytes)
	}
	return 0
}

// Pending is the client connections whose caller has not proved who it
// is.
func (a *Admission) Pending() int64 { return a.pendingN.Load() }

// sourceOf is the address c comes from (the zero Addr if it has none).
func sourceOf(c net.Conn) netip.Addr {
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// closeNow closes c without waiting: a TLS connection's Close would
// first try to send close_notify, which can wait on a write its peer
// never reads.
func closeNow(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		tc.NetConn().Close()
		return
	}
	c.Close()
}
