package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// Connections whose caller never proved who it is cannot make skewgate
// shed (which withdraws steering): 400 TCP connections that never start
// TLS, at a bound of 400 connections, are pending, never counted. Past
// 256 pending from one source the oldest of that source is dropped, so a
// client from the same (shared, SNAT) address still gets in, and another
// source keeps its own.
func TestPendingConnectionsNeverShed(t *testing.T) {
	load := &Load{MaxConns: 400}
	a := NewAdmission(load)
	rig := newIdentityRig(t, TLS{Admission: a})
	rig.startMembers(t)

	other := dialFrom(t, rig.addr, "127.0.0.2") // the oldest of all
	idle := make([]net.Conn, 400)
	for i := range idle {
		idle[i] = dialFrom(t, rig.addr, "127.0.0.1")
	}
	waitFor(t, "all 401 connections accepted", func() bool {
		return a.Pending()+a.dropped[boundSource].Load()+load.Conns() == 401
	})
	if why := load.Shedding(); why != "" || load.Episodes() != 0 || load.Conns() != 0 {
		t.Fatalf("shedding %q, %d episodes, %d connections counted: want none", why, load.Episodes(), load.Conns())
	}
	if p, n := a.Pending(), a.dropped[boundSource].Load(); p != 257 || n != 144 {
		t.Fatalf("%d pending, %d dropped at the source bound; want 257 (256 from 127.0.0.1, 1 from 127.0.0.2) and 144 (400 - 256)", p, n)
	}
	if !closedByServer(idle[0]) || !closedByServer(idle[143]) {
		t.Errorf("the oldest connections of the full source are still open")
	}
	if closedByServer(idle[144]) || closedByServer(idle[399]) {
		t.Errorf("a connection within the source's bound was closed")
	}
	if closedByServer(other) {
		t.Errorf("another source's connection was dropped for 127.0.0.1's")
	}

	// A client from the full source gets in (the oldest pending one
	// makes room), and counts once it proved who it is.
	cert := tlsDialFrom(t, rig, "127.0.0.1", []tls.Certificate{rig.client})
	if code := get(t, cert, "/version", ""); code != http.StatusOK {
		t.Fatalf("a certificate client from the full source: %d, want 200", code)
	}
	if n := a.dropped[boundSource].Load(); n != 145 {
		t.Errorf("%d dropped at the source bound, want 145", n)
	}
	// A token counts once the apiserver accepted it.
	token := tlsDialFrom(t, rig, "127.0.0.2", nil)
	if code := get(t, token, "/version", "Bearer good"); code != http.StatusOK {
		t.Fatalf("a token client: %d, want 200", code)
	}
	waitFor(t, "2 connections counted", func() bool { return load.Conns() == 2 })
	// One the apiserver rejected does not.
	rejected := tlsDialFrom(t, rig, "127.0.0.2", nil)
	if code := get(t, rejected, "/version", "Bearer forged"); code != http.StatusUnauthorized {
		t.Fatalf("a forged token: %d, want 401", code)
	}
	if n := load.Conns(); n != 2 {
		t.Errorf("%d connections counted after a rejected token's request, want 2", n)
	}
	// Over HTTP/2 as well: the connection's context reaches its streams.
	h2 := &http.Client{Transport: &http2.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{rig.client}, RootCAs: rig.roots, ServerName: "127.0.0.1"},
		DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
			d := tls.Dialer{NetDialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}, Config: cfg}
			return d.DialContext(ctx, network, addr)
		}}}
	defer h2.CloseIdleConnections()
	resp, err := h2.Get("https://" + rig.addr + "/version")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitFor(t, "3 connections counted, one of HTTP/2", func() bool { return load.Conns() == 3 })
	h2.CloseIdleConnections()
	cert.Close()
	waitFor(t, "1 connection counted once the certificate clients left", func() bool { return load.Conns() == 1 })
	if load.Episodes() != 0 {
		t.Errorf("%d shedding episodes, want 0", load.Episodes())
	}
}

// Past the total bound the oldest pending connection of any source makes
// room.
func TestPendingConnectionsBoundedInTotal(t *testing.T) {
	load := &Load{}
	a := NewAdmission(load)
	a.MaxPending = 3
	rig := newIdentityRig(t, TLS{Admission: a})
	var conns []net.Conn
	for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		conns = append(conns, dialFrom(t, rig.addr, src))
	}
	waitFor(t, "3 pending", func() bool { return a.Pending() == 3 && a.dropped[boundTotal].Load() == 1 })
	if !closedByServer(conns[0]) {
		t.Errorf("the oldest pending connection is still open")
	}
	if closedByServer(conns[3]) {
		t.Errorf("the newest pending connection was closed")
	}
}

// A client that never finishes its TLS handshake is cut after
// handshakeTimeout (ReadHeaderTimeout), as one that never sends a
// request's header is: neither holds a pending place for long.
func TestServeEndsHandshakesThatNeverFinish(t *testing.T) {
	serving, clientCA, _ := servingPKI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := NewAdmission(&Load{})
	go Serve(ctx, ln, http.NotFoundHandler(), TLS{Serving: serving, ClientCAs: clientCA, Admission: a})

	silent := dialFrom(t, ln.Addr().String(), "127.0.0.1")
	partial := dialFrom(t, ln.Addr().String(), "127.0.0.1")
	partial.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}) // a ClientHello record that never arrives whole
	start := time.Now()
	for _, c := range []net.Conn{silent, partial} {
		c.SetReadDeadline(start.Add(handshakeTimeout + 5*time.Second))
		_, err := io.Copy(io.Discard, c)
		took := time.Since(start)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("still open after %s", took)
		}
		if took < handshakeTimeout-time.Second {
			t.Errorf("closed after %s, want about %s", took.Round(100*time.Millisecond), handshakeTimeout)
		}
		t.Logf("closed after %s", took.Round(100*time.Millisecond))
	}
	waitFor(t, "nothing pending", func() bool { return a.Pending() == 0 })
}

// dialFrom opens a TCP connection to addr from the local address src.
func dialFrom(t *testing.T, addr, src string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func tlsDialFrom(t *testing.T, rig *identityRig, src string, certs []tls.Certificate) *tls.Conn {
	t.Helper()
	c := tls.Client(dialFrom(t, rig.addr, src), &tls.Config{Certificates: certs, RootCAs: rig.roots, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	return c
}

// get sends an HTTP/1.1 GET of path on c, keeping c open, and returns the
// status code.
func get(t *testing.T, c net.Conn, path, auth string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1"+path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// closedByServer reports whether the server closed c (it sends nothing on
// a connection that never started TLS).
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
