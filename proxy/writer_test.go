package proxy

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestUpgradeConnAddsHeaders writes a raw upgrade response in pieces, as
// the upgrade handler may, and reads it back as HTTP.
func TestUpgradeConnAddsHeaders(t *testing.T) {
	raw := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nstream bytes"
	for _, cut := range []int{0, 5, 33, 34, 35, len(raw)} {
		client, server := net.Pipe()
		code := 0
		extra := "X-Skewgate-Route: local\r\nX-Skewgate-Server: 127.0.0.1:6443\r\n"
		c := &upgradeConn{Conn: server, extra: []byte(extra), code: &code}
		go func() {
			c.Write([]byte(raw[:cut]))
			c.Write([]byte(raw[cut:]))
			server.Close()
		}()
		br := bufio.NewReader(client)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		rest, _ := br.ReadString(0)
		if resp.StatusCode != 101 || code != 101 || resp.Header.Get("X-Skewgate-Route") != "local" ||
			resp.Header.Get("X-Skewgate-Server") != "127.0.0.1:6443" || resp.Header.Get("Upgrade") != "websocket" || rest != "stream bytes" {
			t.Errorf("cut %d: code %d (recorded %d) headers %v rest %q", cut, resp.StatusCode, code, resp.Header, rest)
		}
	}
}

func TestUpgradeConnPassesGarbageThrough(t *testing.T) {
	client, server := net.Pipe()
	code := 0
	c := &upgradeConn{Conn: server, extra: []byte("X-Skewgate-Route: local\r\n"), code: &code}
	long := strings.Repeat("x", maxStatusLine+10)
	go func() {
		c.Write([]byte(long))
		c.Write([]byte("\nmore\n"))
		server.Close()
	}()
	var got bytes.Buffer
	got.ReadFrom(client)
	if got.String() != long+"\nmore\n" || code != 0 {
		t.Errorf("got %d bytes, code %d; want the bytes untouched and no code", got.Len(), code)
	}
}

func TestStatusCode(t *testing.T) {
	for line, want := range map[string]int{
		"HTTP/1.1 101 Switching Protocols\r\n": 101,
		"HTTP/1.1 403 Forbidden\r\n":           403,
		"HTTP/1.0 200\n":                       200,
		"SSH-2.0-OpenSSH\r\n":                  0,
		"HTTP/1.1 abc\r\n":                     0,
		"HTTP/1.1 99999 x\r\n":                 0,
		"\r\n":                                 0,
	} {
		if got := statusCode([]byte(line)); got != want {
			t.Errorf("statusCode(%q) = %d, want %d", line, got, want)
		}
	}
}

// snapWriter keeps the status codes written and the header map as each
// went out.
type snapWriter struct {
	h     http.Header
	codes []int
	sent  []http.Header
}

func (w *snapWriter) Header() http.Header { return w.h }
func (w *snapWriter) WriteHeader(code int) {
	w.codes = append(w.codes, code)
	w.sent = append(w.sent, w.h.Clone())
}
func (w *snapWriter) Write(b []byte) (int, error) {
	if len(w.codes) == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return len(b), nil
}

// The route headers go out only on answers whose caller may see them, on a
// 1xx answer too, and the final answer decides for itself; the server is
// recorded either way (for the metrics).
func TestRecorderHidesRouteHeaders(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(w http.ResponseWriter)
		codes []int
		shown []bool
	}{
		{"401 hidden", func(w http.ResponseWriter) { w.WriteHeader(401) }, []int{401}, []bool{false}},
		{"200 shown", func(w http.ResponseWriter) { w.WriteHeader(200) }, []int{200}, []bool{true}},
		{"implicit 200 shown", func(w http.ResponseWriter) { w.Write([]byte("x")) }, []int{200}, []bool{true}},
		{"103 hidden, then 200 shown", func(w http.ResponseWriter) { w.WriteHeader(103); w.WriteHeader(200) }, []int{103, 200}, []bool{false, true}},
		{"103 hidden, then 401 hidden", func(w http.ResponseWriter) { w.WriteHeader(103); w.WriteHeader(401) }, []int{103, 401}, []bool{false, false}},
	} {
		sw := &snapWriter{h: http.Header{}}
		w, rec := record(sw)
		rec.show = func(code int, server string) bool { return server == "10.0.0.2:6443" && code >= 200 && code != 401 }
		w.Header().Set("X-Skewgate-Route", "peer")
		w.Header().Set("X-Skewgate-Server", "10.0.0.2:6443")
		tc.write(w)
		if !slices.Equal(sw.codes, tc.codes) {
			t.Fatalf("%s: codes %v, want %v", tc.name, sw.codes, tc.codes)
		}
		for i, h := range sw.sent {
			if shown := h.Get("X-Skewgate-Route") != "" && h.Get("X-Skewgate-Server") != ""; shown != tc.shown[i] {
				t.Errorf("%s: answer %d: route headers shown %v, want %v (%v)", tc.name, sw.codes[i], shown, tc.shown[i], h)
			}
		}
		if last := tc.codes[len(tc.codes)-1]; rec.status() != last || rec.server != "10.0.0.2:6443" {
			t.Errorf("%s: recorded %d from %q", tc.name, rec.status(), rec.server)
		}
	}
}

// An upgrade's answer gets the route headers only if its status lets the
// caller see them.
func TestUpgradeConnHidesRouteHeaders(t *testing.T) {
	for _, tc := range []struct {
		raw   string
		shown bool
	}{
		{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", true},
		{"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n", false},
	} {
		client, server := net.Pipe()
		code := 0
		c := &upgradeConn{Conn: server, extra: []byte("X-Skewgate-Route: local\r\n"), code: &code,
			show: func(code int) bool { return code != http.StatusUnauthorized }}
		go func() {
			c.Write([]byte(tc.raw))
			server.Close()
		}()
		resp, err := http.ReadResponse(bufio.NewReader(client), nil)
		if err != nil {
			t.Fatal(err)
		}
		if shown := resp.Header.Get("X-Skewgate-Route") != ""; shown != tc.shown || code != resp.StatusCode {
			t.Errorf("%d: route header shown %v, want %v; recorded %d", resp.StatusCode, shown, tc.shown, code)
		}
	}
}
