package proxy

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// HandBack releases, once steering is no longer wanted (a skew window
// closed, the operator turned it off), the client connections steering
// brought to skewgate, so that within Spread nothing is steered and the hop
// costs nothing again. Nothing is reset: a connection is asked to leave
// with its next answer (Connection: close — after the answer on HTTP/1.1,
// a graceful GOAWAY on HTTP/2, whose streams in flight finish), at most
// Rate connections a second so their clients do not all reconnect to the
// apiserver at once, and each watch ends cleanly between two events at a
// random moment within Spread (its reflector watches again from its
// resourceVersion, on a new connection, which the kernel no longer steers).
type HandBack struct {
	// Releasing reports whether steered connections are to leave now.
	Releasing func() bool
	// Steered reports whether a connection to local came through
	// steering (a client that reached skewgate's own port stays).
	Steered func(local netip.AddrPort) bool
	// Spread is the time within which every watch is ended (default 5
	// minutes); Rate the connections asked to leave per second (default
	// 20).
	Spread time.Duration
	Rate   float64

	// counted, if set, counts the connections asked to leave, by how
	// (skewgate_handback_connections_total).
	counted *prometheus.CounterVec

	mu      sync.Mutex
	on      bool
	started chan struct{} // closed when releasing begins
	told    map[string]bool
	limiter *rate.Limiter
}

// handBackPoll is how often Releasing is asked.
const handBackPoll = 500 * time.Millisecond

// run follows Releasing until ctx ends.
func (hb *HandBack) run(ctx context.Context) {
	if hb.Spread <= 0 {
		hb.Spread = 5 * time.Minute
	}
	if hb.Rate <= 0 {
		hb.Rate = 20
	}
	hb.mu.Lock()
	hb.started, hb.limiter = make(chan struct{}), rate.NewLimiter(rate.Limit(hb.Rate), int(hb.Rate))
	hb.mu.Unlock()
	tick := time.NewTicker(handBackPoll)
	defer tick.Stop()
	for {
		hb.set(hb.Releasing())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (hb *HandBack) set(on bool) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	switch {
	case on && !hb.on:
		close(hb.started)
		hb.told = map[string]bool{}
	case !on && hb.on:
		hb.started = make(chan struct{})
		hb.told = nil
	}
	hb.on = on
}

// steered reports whether r came on a steered connection.
func (hb *HandBack) steered(r *http.Request) bool {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	tcp, ok := a.(*net.TCPAddr)
	return ok && hb.Steered(tcp.AddrPort())
}

// tell asks r's connection to leave with this answer, once per
// connection, as the rate allows.
func (hb *HandBack) tell(w http.ResponseWriter, r *http.Request) {
	if hb == nil {
		return
	}
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if !hb.on || hb.told[r.RemoteAddr] || !hb.steered(r) || !hb.limiter.Allow() {
		return
	}
	hb.told[r.RemoteAddr] = true
	w.Header().Set("Connection", "close")
	hb.count(handBackClose)
}

// count notes one connection asked to leave.
func (hb *HandBack) count(how string) {
	if hb.counted != nil {
		hb.counted.WithLabelValues(how).Inc()
	}
}

// watchEnd returns a channel that closes at a random moment within Spread
// of releasing beginning (or of now, if it began before), unless
// releasing stops first, or when ctx ends (then it is never closed).
func (hb *HandBack) watchEnd(ctx context.Context, r *http.Request) <-chan struct{} {
	if hb == nil || !hb.steered(r) {
		return nil
	}
	end := make(chan struct{})
	go func() {
		for {
			hb.mu.Lock()
			started := hb.started
			hb.mu.Unlock()
			if started == nil {
				return // not running
			}
			select {
			case <-ctx.Done():
				return
			case <-started:
			}
			wait := time.NewTimer(rand.N(hb.Spread))
			select {
			case <-ctx.Done():
				wait.Stop()
				return
			case <-wait.C:
			}
			hb.mu.Lock()
			on := hb.on
			hb.mu.Unlock()
			if on {
				hb.count(handBackWatchEnd)
				close(end)
				return
			}
		}
	}()
	return end
}
