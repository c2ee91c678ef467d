package forward

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"
)

// relay forwards TCP between a client and addr until frozen, when it stops
// moving bytes either way without closing anything: a black hole.
type relay struct {
	ln     net.Listener
	frozen atomic.Bool
}

func newRelay(t *testing.T, addr string) *relay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); u.Close() })
			go r.pipe(c, u)
			go r.pipe(u, c)
		}
	}()
	return r
}

func (r *relay) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		for r.frozen.Load() {
			time.Sleep(10 * time.Millisecond) // hold the bytes: nothing arrives
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// streamingUpstream answers with one byte and then holds the stream open,
// like a quiet watch.
func streamingUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("x"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	return up
}

// openStream starts a streaming GET through b and reads its first byte.
func openStream(t *testing.T, b *Backend) io.ReadCloser {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.URL.String()+"/watch", nil)
	resp, err := b.Transport().RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ProtoMajor != 2 {
		t.Fatalf("stream over %s, want HTTP/2", resp.Proto)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	return resp.Body
}

// ended reports how long reading body took to fail, or fails t after max.
func ended(t *testing.T, body io.ReadCloser, max time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := body.Read(make([]byte, 1)); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("the stream went on")
		}
		return time.Since(start)
	case <-time.After(max):
		body.Close()
		t.Fatalf("the stream still hangs after %s", max)
		return 0
	}
}

// A stream through a black-holed apiserver ends after the HTTP/2 ping goes
// unanswered, not when TCP gives up.
func TestStreamThroughBlackHoleEnds(t *testing.T) {
	oldAfter, oldTimeout := pingAfter, pingTimeout
	pingAfter, pingTimeout = 300*time.Millisecond, 300*time.Millisecond
	defer func() { pingAfter, pingTimeout = oldAfter, oldTimeout }()
	up := streamingUpstream(t)
	r := newRelay(t, up.Listener.Addr().String())
	b := NewBackend("b", &url.URL{Scheme: "https", Host: r.ln.Addr().String()}, trustFor(t, up))
	body := openStream(t, b)
	r.frozen.Store(true)
	t.Logf("the stream ended %s after the black hole", ended(t, body, 10*time.Second))
}

// CloseAll ends busy streams too: a server that leaves routing takes its
// watches with it.
func TestCloseAllEndsStreams(t *testing.T) {
	up := streamingUpstream(t)
	b := NewBackend("b", &url.URL{Scheme: "https", Host: up.Listener.Addr().String()}, trustFor(t, up))
	body := openStream(t, b)
	b.CloseAll()
	ended(t, body, 5*time.Second)
}

// A watch through a server that leaves routing ends as a timed-out watch
// does: the stream ends, no error, and the client watches again elsewhere.
func TestWatchEndsCleanlyWhenItsServerLeaves(t *testing.T) {
	up := streamingUpstream(t)
	b := NewBackend("b", &url.URL{Scheme: "https", Host: up.Listener.Addr().String()}, trustFor(t, up))
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Forward(w, r, Request{Candidates: []*Backend{b}, LongRunning: true})
	}))
	front.EnableHTTP2 = true
	front.StartTLS()
	defer front.Close()
	resp, err := front.Client().Get(front.URL + "/api/v1/pods?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("watch over %s, want HTTP/2", resp.Proto)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	b.CloseAll() // the server leaves routing
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(resp.Body); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the watch ended with %v, want a clean end of stream", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch did not end")
	}
}
