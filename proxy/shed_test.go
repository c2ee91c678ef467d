package proxy

import (
	"net"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// Past MaxConns open connections skewgate sheds, and goes on shedding
// until fewer than 80 % of them remain.
func TestLoadShedsAtTheConnectionBound(t *testing.T) {
	l := &Load{MaxConns: 10}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ConnState = l.ConnState
	srv.Start()
	defer srv.Close()
	var conns []net.Conn
	dial := func(n int) {
		for range n {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
	}
	closeTo := func(n int) {
		for len(conns) > n {
			conns[len(conns)-1].Close()
			conns = conns[:len(conns)-1]
		}
	}
	defer closeTo(0)
	waitConns := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for l.Conns() != n {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections counted, want %d", l.Conns(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	dial(9)
	waitConns(9)
	if why := l.Shedding(); why != "" {
		t.Fatalf("9 of 10 connections: shedding (%s)", why)
	}
	dial(1)
	waitConns(10)
	if why := l.Shedding(); !strings.Contains(why, "10 client connections") {
		t.Fatalf("10 of 10 connections: %q, want shedding", why)
	}
	closeTo(8)
	waitConns(8)
	if why := l.Shedding(); why == "" {
		t.Fatal("8 of 10, after shedding began: stopped shedding, want it to go on until under 80 %")
	}
	closeTo(7)
	waitConns(7)
	if why := l.Shedding(); why != "" {
		t.Fatalf("7 of 10: still shedding (%s)", why)
	}
}

// Past 90 % of the soft memory limit skewgate sheds too.
func TestLoadShedsNearTheMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prev)
	l := &Load{}
	debug.SetMemoryLimit(1 << 40)
	if why := l.Shedding(); why != "" {
		t.Fatalf("far under the limit: %q", why)
	}
	ballast := make([]byte, 64<<20)
	ballast[len(ballast)-1] = 1
	debug.SetMemoryLimit(int64(heapInUse()) / 2)
	why := l.Shedding()
	debug.SetMemoryLimit(prev)
	if !strings.Contains(why, "soft memory limit") {
		t.Fatalf("heap over the limit: %q, want shedding", why)
	}
	_ = ballast[len(ballast)-1]
}
