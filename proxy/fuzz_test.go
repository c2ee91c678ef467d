package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// How a fuzzed request reaches skewgate.
const (
	viaHandler = iota // the handler itself: any method, authority and a body that fails mid-way
	viaHTTP1          // raw bytes over TLS to the listener
	viaHTTP2          // raw HEADERS/CONTINUATION/DATA frames over TLS to the listener
	vias
)

// fuzzedHeaderBytes bounds one request's header bytes: beyond every limit
// on the way (skewgate's, the apiserver's), within the fuzzer's memory.
const fuzzedHeaderBytes = 3 << 20

// FuzzRequest sends what a client controls (the method, authority, path, a
// header of any size repeated any number of times, the body and whether
// reading it fails mid-way, as a malformed chunk does; merged discovery's
// documents or any path) through skewgate — its handler, or its listener
// over HTTP/1.1 or HTTP/2 — to an apiserver stand-in that is healthy, with
// its discovery in the merged view. Whatever it is, no server may be
// blamed for it: its health and its breaker stay as they were (the bugs:
// one request with an invalid method, or one oversized header, took a
// healthy server out of routing); and skewgate's own answer is never a 5xx
// of its making for a healthy server.
func FuzzRequest(f *testing.F) {
	type seed struct {
		via                                  uint8
		method, authority, path, name, value string
		size                                 uint32 // the value repeated to this many bytes
		count                                uint16 // the header sent this many more times
		merged                               bool
		body                                 []byte
		broken                               bool
	}
	for _, s := range []seed{
		{viaHandler, "GET", "127.0.0.1", "/api/v1/namespaces/default/configmaps", "Accept", "application/json", 0, 0, false, nil, false},
		{viaHandler, "GET X", "127.0.0.1", "/api/v1/namespaces/default/configmaps", "", "", 0, 0, false, nil, false},
		{viaHandler, "POST", "127.0.0.1", "/api/v1/namespaces/default/configmaps", "Content-Type", "application/json", 0, 0, false, []byte(`{"metadata":{"name":"x"}}`), true},
		{viaHandler, "PATCH", "h:1", "/apis/apps/v1/namespaces/x/deployments/d/scale", "Connection", "x-upgrade", 0, 0, false, []byte("{}"), false},
		{viaHandler, "GET", "127.0.0.1", "/api/v1/pods/foo", "Upgrade", "websocket", 0, 0, false, nil, false},
		{viaHandler, "DELETE", "", "/apis/scheduling.k8s.io/v1alpha2/namespaces/n/workloads/w", "X-Remote-User", "root", 0, 0, false, nil, false},
		{viaHandler, "GET", "127.0.0.1", "/apis", "X-Big", "a", 1048500, 0, true, nil, false},
		{viaHandler, "GET", "127.0.0.1", "/version", "A", "b", 0, 33000, false, nil, false},
		// issue 22: one header of about 1,048,500 bytes, anonymous, HTTP/1.1
		{viaHTTP1, "GET", "127.0.0.1", "/version", "X-Big", "a", 1048500, 0, false, nil, false},
		{viaHTTP1, "GET", "127.0.0.1", "/apis", "X-Big", "a", 1048500, 0, true, nil, false},
		{viaHTTP1, "GET", "127.0.0.1", "/api", "A", "b", 0, 33000, true, nil, false},
		{viaHTTP1, "POST", "127.0.0.1", "/api/v1/namespaces/default/configmaps", "A", "b", 0, 30000, false, []byte("{}"), false},
		{viaHTTP2, "GET", "127.0.0.1", "/version", "x-f", "v", 1100, 999, false, nil, false},
		{viaHTTP2, "GET", "127.0.0.1", "/apis", "x-big", "a", 1030000, 0, true, nil, false},
		{viaHTTP2, "GET X", "127.0.0.1", "/api/v1/namespaces/default/configmaps", "connection", "close", 0, 0, false, nil, false},
		{viaHTTP2, "POST", "127.0.0.1", "/api/v1/namespaces/default/configmaps", "content-length", "100", 0, 0, false, []byte("{}"), false},
	} {
		f.Add(s.via, s.method, s.authority, s.path, s.name, s.value, s.size, s.count, s.merged, s.body, s.broken)
	}
	rig := newIdentityRig(f)
	local := rig.runMembers(f)
	f.Fuzz(func(t *testing.T, via uint8, method, authority, path, name, value string, size uint32, count uint16, merged bool, body []byte, broken bool) {
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		hdr := fuzzedHeader(name, value, size, count)
		if merged {
			path = []string{"/api", "/apis"}[size%2]
			hdr = append(hdr, [2]string{"Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"})
		}
		code, server := 0, ""
		switch via % vias {
		case viaHandler:
			code, server = rig.fuzzHandler(method, authority, path, hdr, body, broken)
		case viaHTTP1:
			code, server = rig.fuzzHTTP1(method, authority, path, hdr, body)
		case viaHTTP2:
			code, server = rig.fuzzHTTP2(method, authority, path, hdr, body)
		}
		for _, st := range rig.members.Statuses() {
			if st.LastError != "" || !st.Healthy {
				t.Fatalf("via %d %q %q: server %s judged by the request: healthy %t, %s", via%vias, method, path, st.ID, st.Healthy, st.LastError)
			}
		}
		if counts, closed := local.BreakerCounts(); counts.TotalFailures != 0 || !closed {
			t.Fatalf("via %d %q %q: the request counted against the server's breaker: %+v", via%vias, method, path, counts)
		}
		if code >= 500 && server == "skewgate" && code != http.StatusServiceUnavailable {
			t.Fatalf("via %d %q %q: skewgate answered %d", via%vias, method, path, code)
		}
	})
}

// fuzzedHeader is name: value, the value repeated to size bytes, sent
// count+1 times, within fuzzedHeaderBytes.
func fuzzedHeader(name, value string, size uint32, count uint16) [][2]string {
	if name == "" {
		return nil
	}
	if value != "" && int(size) > len(value) {
		value = strings.Repeat(value, min(int(size), fuzzedHeaderBytes)/len(value))
	}
	n := int(count) + 1
	if len(value) > 0 {
		n = min(n, max(1, fuzzedHeaderBytes/len(value)))
	}
	out := make([][2]string, n)
	for i := range out {
		out[i] = [2]string{name, value}
	}
	return out
}

// fuzzHandler serves the request with the handler itself.
func (rig *identityRig) fuzzHandler(method, authority, path string, hdr [][2]string, body []byte, broken bool) (int, string) {
	r, err := http.NewRequest(http.MethodGet, "https://127.0.0.1"+path, nil)
	if err != nil {
		return 0, "" // not a request line a server would parse
	}
	r.Method, r.Host, r.RequestURI, r.RemoteAddr = method, authority, path, "127.0.0.1:40000"
	for _, f := range hdr {
		r.Header[f[0]] = append(r.Header[f[0]], f[1])
	}
	var rd io.Reader = bytes.NewReader(body)
	if broken {
		rd = io.MultiReader(rd, iotest.ErrReader(errors.New("invalid byte in chunk length")))
	}
	r.Body, r.ContentLength = io.NopCloser(rd), -1
	w := httptest.NewRecorder()
	rig.handler.ServeHTTP(w, r)
	return w.Code, w.Header().Get("X-Skewgate-Server")
}

// fuzzDial opens a TLS connection to the listener, anonymous, as the
// issue's caller was.
func (rig *identityRig) fuzzDial(proto string) (*tls.Conn, error) {
	conn, err := tls.Dial("tcp", rig.addr, &tls.Config{RootCAs: rig.roots, ServerName: "127.0.0.1", NextProtos: []string{proto}})
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	return conn, nil
}

// fuzzHTTP1 writes the request as HTTP/1.1 bytes, whatever they make.
func (rig *identityRig) fuzzHTTP1(method, authority, path string, hdr [][2]string, body []byte) (int, string) {
	conn, err := rig.fuzzDial("http/1.1")
	if err != nil {
		return 0, ""
	}
	defer conn.Close()
	w := bufio.NewWriter(conn)
	fmt.Fprintf(w, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", method, path, authority, len(body))
	for _, f := range hdr {
		fmt.Fprintf(w, "%s: %s\r\n", f[0], f[1])
	}
	w.WriteString("\r\n")
	w.Write(body)
	go w.Flush() // the server may answer (431) before reading it all
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, ""
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Skewgate-Server")
}

// fuzzHTTP2 writes the request as HTTP/2 frames, any fields, any size.
func (rig *identityRig) fuzzHTTP2(method, authority, path string, hdr [][2]string, body []byte) (int, string) {
	conn, err := rig.fuzzDial("h2")
	if err != nil {
		return 0, ""
	}
	defer conn.Close()
	bw := bufio.NewWriter(conn)
	bw.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(bw, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.WriteSettings()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range append([][2]string{{":method", method}, {":scheme", "https"}, {":authority", authority}, {":path", path}}, hdr...) {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	const frameSize = 16 << 10 // the default maximum
	frag := block.Bytes()
	first := frag[:min(len(frag), frameSize)]
	frag = frag[len(first):]
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndStream: len(body) == 0, EndHeaders: len(frag) == 0})
	for len(frag) > 0 {
		next := frag[:min(len(frag), frameSize)]
		frag = frag[len(next):]
		fr.WriteContinuation(1, len(frag) == 0, next)
	}
	for len(body) > 0 {
		next := body[:min(len(body), frameSize)]
		body = body[len(next):]
		fr.WriteData(1, len(body) == 0, next)
	}
	go bw.Flush() // the server may answer before reading it all
	var status, server string
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return 0, ""
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 {
				status = f.PseudoValue("status")
				for _, hf := range f.RegularFields() {
					if hf.Name == "x-skewgate-server" {
						server = hf.Value
					}
				}
				var code int
				fmt.Sscan(status, &code)
				return code, server
			}
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			return 0, ""
		}
	}
}
