package proxy

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
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
