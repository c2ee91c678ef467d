package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/lab/testenv"
)

// The in-flight tests run the real sweep (resetDirect: sock_diag and
// SOCK_DESTROY) every 50 ms against a real Go TLS server in a throwaway
// namespace, on the connections of a real Go client, HTTP/2 and HTTP/1.1.
// The server stands for an apiserver whose --request-timeout is
// testRequestTimeout: no handler works longer. testQuiet is the quiet time
// ResetQuiet would give it (× 1.5).
const (
	testRequestTimeout = 2500 * time.Millisecond
	testQuiet          = testRequestTimeout * 3 / 2
	testWork           = time.Second // a write's handler, after reading its body
)

// inflightServer is a TLS server on nodeAddr:port inside ns with the
// handlers an apiserver's requests look like:
//   - POST /write: reads the body, works testWork, answers how much it read;
//   - GET /list: works testRequestTimeout, then answers 1 MiB;
//   - GET /watch: sends a 100-byte event every 500 ms, for 20 s;
//   - GET /get: answers at once.
func inflightServer(t *testing.T, ns *testNetNS, port int, idle time.Duration) (*httptest.Server, netip.AddrPort) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /write", func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		time.Sleep(testWork)
		fmt.Fprintf(w, "read %d", n)
	})
	mux.HandleFunc("GET /list", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(testRequestTimeout)
		w.Write(bytes.Repeat([]byte("l"), 1<<20))
	})
	mux.HandleFunc("GET /watch", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for range 40 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			fmt.Fprintf(w, "%099d\n", 0)
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("GET /get", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = listenIn(t, ns, netip.AddrPortFrom(nodeAddr, uint16(port)).String())
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{NextProtos: []string{"h2", "http/1.1"}}
	srv.Config.IdleTimeout = idle
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, netip.AddrPortFrom(nodeAddr, uint16(port))
}

// inflightClient is a client of srv dialing from inside ns: HTTP/2, or
// HTTP/1.1 with h1. ping > 0 has it PING an HTTP/2 connection that
// received no frame for that long, as client-go does after 30 s.
func inflightClient(srv *httptest.Server, ns *testNetNS, h1 bool, ping time.Duration) *http.Client {
	tlsConf := srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tlsConf.ServerName = "example.com" // httptest's certificate
	tr := &http.Transport{
		TLSClientConfig:   tlsConf,
		ForceAttemptHTTP2: !h1,
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = inNetNS(ns.path, func() error {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}
	if h1 {
		tlsConf.NextProtos = []string{"http/1.1"}
	}
	if ping > 0 {
		tr.HTTP2 = &http.HTTP2Config{SendPingTimeout: ping, PingTimeout: ping}
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// sweeper runs the sweep over one target every 50 ms until the test ends.
type sweeper struct {
	ended atomic.Int64
	first atomic.Int64 // when it first ended one (Unix ns)
	stop  chan struct{}
	done  chan struct{}
	err   error
}

func startSweeper(t *testing.T, ns *testNetNS, target netip.AddrPort, quiet time.Duration) *sweeper {
	s := &sweeper{stop: make(chan struct{}), done: make(chan struct{})}
	nobody := func() (func(netip.AddrPort, uint32) bool, error) {
		return func(netip.AddrPort, uint32) bool { return false }, nil
	}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			var got sweep
			if err := inNetNS(ns.path, func() (err error) {
				got, err = resetDirect(context.Background(), []netip.AddrPort{target}, quiet, nobody)
				return err
			}); err != nil {
				s.err = err
				return
			}
			if got.ended > 0 {
				s.first.CompareAndSwap(0, time.Now().UnixNano())
				s.ended.Add(int64(got.ended))
			}
		}
	}()
	t.Cleanup(func() { s.halt() })
	return s
}

// halt stops the sweeps and returns how many connections they ended.
func (s *sweeper) halt() int {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	return int(s.ended.Load())
}

// send sends req and reads the whole answer; reused says whether it went on
// a connection opened before.
func send(c *http.Client, req *http.Request) (body string, reused bool, err error) {
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
	}))
	resp, err := c.Do(req)
	if err != nil {
		return "", reused, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, b)
	}
	return string(b), reused, err
}

func getReq(t *testing.T, url string) *http.Request {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestSweepNeverCutsARequestInFlight: requests in flight on direct
// connections — writes whose body the server read and is working on, the
// first request of a fresh HTTP/2 connection, a LIST taking as long as
// the request timeout — are neither ended by the sweep nor fail, however
// often it runs. The rule before (the apiserver spoke last, 20 ms ago)
// ended most of them: Go's HTTP/2 server sends SETTINGS and WINDOW_UPDATE
// frames on its own while a handler works.
func TestSweepNeverCutsARequestInFlight(t *testing.T) {
	testenv.RequireRoot(t)
	ns := newTestNetNS(t, netip.PrefixFrom(nodeAddr, 32))
	for i, tc := range []struct {
		name  string
		h1    bool
		fresh bool // the first request on its connection
		path  string
		body  int
		want  string
	}{
		{"HTTP/2, a 0 B write, the first on a fresh connection", false, true, "/write", 0, "read 0"},
		{"HTTP/2, a 200 B write", false, false, "/write", 200, "read 200"},
		{"HTTP/2, a 64 KiB write", false, false, "/write", 64 << 10, "read 65536"},
		{"HTTP/2, a 1 MiB write", false, false, "/write", 1 << 20, "read 1048576"},
		{"HTTP/2, a LIST taking the request timeout", false, false, "/list", -1, ""},
		{"HTTP/1.1, a 64 KiB write", true, false, "/write", 64 << 10, "read 65536"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, target := inflightServer(t, ns, 6443+i, time.Minute)
			c := inflightClient(srv, ns, tc.h1, 0)
			base := "https://" + target.String()
			if !tc.fresh {
				if _, _, err := send(c, getReq(t, base+"/get")); err != nil {
					t.Fatal(err)
				}
				time.Sleep(100 * time.Millisecond) // between two requests
			}
			sw := startSweeper(t, ns, target, testQuiet)
			req := getReq(t, base+tc.path)
			if tc.body >= 0 {
				var err error
				if req, err = http.NewRequest(http.MethodPost, base+tc.path, bytes.NewReader(make([]byte, tc.body))); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			body, reused, err := send(c, req)
			took := time.Since(start)
			ended := sw.halt()
			if sw.err != nil {
				t.Fatalf("sweep: %v", sw.err)
			}
			switch {
			case err != nil:
				t.Errorf("in flight for %s: %v (the sweep ended %d connections)", took.Round(time.Millisecond), err, ended)
			case tc.path == "/list" && len(body) != 1<<20, tc.path != "/list" && body != tc.want:
				t.Errorf("answered %.40q (%d bytes), want %q", body, len(body), tc.want)
			case reused == tc.fresh:
				t.Errorf("reused a connection: %t, want %t", reused, !tc.fresh)
			case ended != 0:
				t.Errorf("answered, but the sweep ended %d connections", ended)
			default:
				t.Logf("answered in %s, %d sweeps, none ended", took.Round(time.Millisecond), took/(50*time.Millisecond))
			}
		})
	}
}

// TestSweepEndsAQuietWatch: a watch whose client sends nothing (its
// events too small for a WINDOW_UPDATE, no PING) is ended once its client
// was quiet for the quiet time; a reflector resumes it from its
// resourceVersion, through skewgate.
func TestSweepEndsAQuietWatch(t *testing.T) {
	testenv.RequireRoot(t)
	ns := newTestNetNS(t, netip.PrefixFrom(nodeAddr, 32))
	srv, target := inflightServer(t, ns, 6443, time.Minute)
	c := inflightClient(srv, ns, false, 0)
	sw := startSweeper(t, ns, target, testQuiet)
	start := time.Now()
	resp, err := c.Do(getReq(t, "https://"+target.String()+"/watch"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := 0
	r := bufio.NewReader(resp.Body)
	for {
		if _, err = r.ReadString('\n'); err != nil {
			break
		}
		events++
	}
	took := time.Since(start)
	if ended := sw.halt(); ended != 1 {
		t.Fatalf("the watch ended after %s (%d events: %v); the sweep ended %d connections, want 1", took.Round(time.Millisecond), events, err, ended)
	}
	if took < testQuiet || took > testQuiet+time.Second {
		t.Errorf("the watch was ended %s after its request, want within a second past the quiet time %s", took.Round(time.Millisecond), testQuiet)
	}
	t.Logf("a quiet watch: ended %s after its request (quiet time %s), after %d events (%v)", took.Round(time.Millisecond), testQuiet, events, err)
}

// TestSweepLeavesAPingingConnection: an idle HTTP/2 connection whose
// client PINGs it (client-go does after 30 s without a frame) is never
// quiet, so the sweep never ends it. What moves it is the server: Go's
// HTTP/2 server, as kube-apiserver runs it (IdleTimeout 90 s,
// k8s.io/apiserver pkg/server/secure_serving.go), closes a connection
// without a stream for its idle timeout with a GOAWAY, PINGs or not, and
// the client's next request goes on a new connection — through skewgate.
func TestSweepLeavesAPingingConnection(t *testing.T) {
	testenv.RequireRoot(t)
	ns := newTestNetNS(t, netip.PrefixFrom(nodeAddr, 32))
	idle := 2 * testQuiet
	srv, target := inflightServer(t, ns, 6443, idle)
	var closed atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			closed.Store(time.Now().UnixNano())
		}
	}
	c := inflightClient(srv, ns, false, 500*time.Millisecond)
	base := "https://" + target.String()
	if _, _, err := send(c, getReq(t, base+"/get")); err != nil {
		t.Fatal(err)
	}
	last := time.Now()
	sw := startSweeper(t, ns, target, testQuiet)
	deadline := last.Add(idle + 3*time.Second)
	for closed.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	ended := sw.halt()
	if ended != 0 {
		t.Fatalf("the sweep ended %d connections, want none: the client PINGs", ended)
	}
	if closed.Load() == 0 {
		t.Fatalf("the server did not close the idle connection within %s", idle+3*time.Second)
	}
	after := time.Unix(0, closed.Load()).Sub(last)
	if after < idle {
		t.Errorf("the connection closed %s after its last request, before the server's idle timeout %s", after.Round(time.Millisecond), idle)
	}
	body, reused, err := send(c, getReq(t, base+"/get"))
	if err != nil || body != "ok" || reused {
		t.Errorf("the next request: %q, reused %t, %v; want ok on a new connection", body, reused, err)
	}
	t.Logf("a PINGing idle connection: never ended by the sweeps (quiet time %s); the server closed it %s after its last request (idle timeout %s, then its GOAWAY), the next request went on a new connection",
		testQuiet, after.Round(time.Millisecond), idle)
}

// TestSweepEndsAQuietKeepAlive: an idle HTTP/1.1 keep-alive connection is
// ended once its client was quiet for the quiet time, and the client's
// next request goes on a new connection without an error.
func TestSweepEndsAQuietKeepAlive(t *testing.T) {
	testenv.RequireRoot(t)
	ns := newTestNetNS(t, netip.PrefixFrom(nodeAddr, 32))
	srv, target := inflightServer(t, ns, 6443, time.Minute)
	c := inflightClient(srv, ns, true, 0)
	base := "https://" + target.String()
	if _, _, err := send(c, getReq(t, base+"/get")); err != nil {
		t.Fatal(err)
	}
	last := time.Now()
	sw := startSweeper(t, ns, target, testQuiet)
	deadline := last.Add(testQuiet + 2*time.Second)
	for sw.ended.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	first := sw.first.Load()
	if ended := sw.halt(); ended != 1 {
		t.Fatalf("the sweep ended %d connections within %s, want 1", ended, testQuiet+2*time.Second)
	}
	after := time.Unix(0, first).Sub(last)
	if after < testQuiet {
		t.Errorf("ended %s after its last request, before the quiet time %s", after.Round(time.Millisecond), testQuiet)
	}
	time.Sleep(100 * time.Millisecond)
	body, reused, err := send(c, getReq(t, base+"/get"))
	if err != nil || body != "ok" || reused {
		t.Errorf("the next request: %q, reused %t, %v; want ok on a new connection", body, reused, err)
	}
	t.Logf("an idle keep-alive: ended %s after its last request (quiet time %s); the next request succeeded on a new connection", after.Round(time.Millisecond), testQuiet)
}
