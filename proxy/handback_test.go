package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Once releasing begins, a steered HTTP/2 connection is asked to leave
// with its next answer (a graceful GOAWAY: the client's next request
// opens a new connection, and none fails); a connection to skewgate's own
// port is not; a watch's end comes within Spread; and when steering is
// wanted again, nothing more is asked.
func TestHandBack(t *testing.T) {
	var releasing, steeredPort atomic.Bool
	steeredPort.Store(true)
	hb := &HandBack{Releasing: releasing.Load, Steered: func(netip.AddrPort) bool { return steeredPort.Load() },
		Spread: 200 * time.Millisecond, Rate: 1000}
	hb.counted = NewMetrics(prometheus.NewRegistry()).handBack
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go hb.run(ctx)
	ends := make(chan (<-chan struct{}), 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hb.tell(w, r)
		if r.URL.Path == "/watch" {
			ends <- hb.watchEnd(context.Background(), r) // outlives this answer
		}
		w.Write([]byte("ok"))
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	c := srv.Client()
	conns := 0
	get := func(path string) {
		t.Helper()
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
			if !i.Reused {
				conns++
			}
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, srv.URL+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %d", path, resp.Proto, resp.StatusCode)
		}
	}
	waitOn := func(want bool) {
		t.Helper()
		releasing.Store(want)
		deadline := time.Now().Add(3 * time.Second)
		for {
			hb.mu.Lock()
			on := hb.on
			hb.mu.Unlock()
			if on == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("releasing %t not seen", want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for range 3 {
		get("/")
	}
	if conns != 1 {
		t.Fatalf("steering wanted: %d connections for 3 requests, want 1", conns)
	}
	waitOn(true)
	get("/") // answered with Connection: close: GOAWAY
	time.Sleep(50 * time.Millisecond)
	get("/")
	if conns != 2 {
		t.Errorf("releasing: %d connections, want the second request on a new one", conns)
	}
	get("/") // a steered connection is asked on its first answer
	if conns != 3 {
		t.Errorf("releasing: %d connections after 3 requests, want 3 (each steered connection leaves)", conns)
	}
	get("/watch")
	select {
	case <-<-ends:
	case <-time.After(2 * time.Second):
		t.Error("a watch did not end within Spread of releasing")
	}

	waitOn(false)
	get("/") // the watch's connection was asked to leave
	before := conns
	for range 3 {
		get("/")
	}
	if conns != before {
		t.Errorf("steering wanted again: %d new connections, want 0", conns-before)
	}
	waitOn(true)
	steeredPort.Store(false)
	before = conns
	for range 3 {
		get("/")
	}
	if conns != before {
		t.Errorf("a connection to skewgate's own port was asked to leave: %d new connections", conns-before)
	}
	// Four steered connections were asked to leave with an answer, one
	// watch was ended; nothing else counts.
	for how, want := range map[string]float64{"connection_close": 4, "watch_end": 1} {
		var m dto.Metric
		if err := hb.counted.WithLabelValues(how).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetCounter().GetValue(); got != want {
			t.Errorf("skewgate_handback_connections_total{how=%q} = %v, want %v", how, got, want)
		}
	}
}
