package forward

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// watchUpstream streams two whole JSON events and half of a third, then
// waits: the shape of a watch caught mid-event.
func watchUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"type":"ADDED","object":{"metadata":{"resourceVersion":"1"}}}`+"\n")
		io.WriteString(w, `{"type":"ADDED","object":{"metadata":{"resourceVersion":"2"}}}`+"\n")
		io.WriteString(w, `{"type":"ADDED","object":{"meta`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(up.Close)
	return up
}

// A watch whose End closes mid-event ends cleanly for the client, over
// HTTP/2 and HTTP/1.1: whole events only, then the stream's normal end
// (END_STREAM, the last chunk), not a reset.
func TestEndEndsAWatchBetweenEvents(t *testing.T) {
	up := watchUpstream(t)
	b := backendFor(t, "b", up, trustFor(t, up))
	for _, h2 := range []bool{true, false} {
		end := make(chan struct{})
		front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			Forward(w, r, Request{Candidates: []*Backend{b}, Idempotent: true, LongRunning: true, End: end})
		}))
		front.EnableHTTP2 = h2
		front.StartTLS()
		c := front.Client()
		c.Timeout = 10 * time.Second // a stream that does not end fails the test
		resp, err := c.Get(front.URL + "/api/v1/pods?watch=true")
		if err != nil {
			t.Fatal(err)
		}
		if resp.ProtoMajor == 2 != h2 {
			t.Fatalf("want HTTP/2 %t, got %s", h2, resp.Proto)
		}
		rd := bufio.NewReader(resp.Body)
		for i := range 2 {
			line, err := rd.ReadString('\n')
			if err != nil || !strings.Contains(line, `"resourceVersion"`) {
				t.Fatalf("%s: event %d: %q %v", resp.Proto, i, line, err)
			}
		}
		time.Sleep(50 * time.Millisecond) // the half event is held back by now
		close(end)
		rest, err := io.ReadAll(rd)
		if err != nil {
			t.Errorf("%s: the watch ended with %v, want a clean end", resp.Proto, err)
		}
		if len(rest) != 0 {
			t.Errorf("%s: after the end the client read %q, want no partial event", resp.Proto, rest)
		}
		resp.Body.Close()
		front.Close()
	}
}

// gzipWatchUpstream streams two whole JSON events and waits, compressed
// when the request accepts gzip, as kube-apiserver 1.37 answers watches;
// it records the Accept-Encoding it was asked with.
func gzipWatchUpstream(t *testing.T, asked chan<- string) *httptest.Server {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked <- r.Header.Get("Accept-Encoding")
		w.Header().Set("Content-Type", "application/json")
		var out io.Writer = w
		flush := w.(http.Flusher).Flush
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			defer zw.Close()
			out = zw
			flush = func() { zw.Flush(); w.(http.Flusher).Flush() }
		}
		w.WriteHeader(http.StatusOK)
		io.WriteString(out, `{"type":"ADDED","object":{"metadata":{"resourceVersion":"1"}}}`+"\n")
		io.WriteString(out, `{"type":"ADDED","object":{"metadata":{"resourceVersion":"2"}}}`+"\n")
		flush()
		<-r.Context().Done()
	}))
	t.Cleanup(up.Close)
	return up
}

// A client that accepts gzip (client-go, through Go's transport) gets a
// watch's events as the server sends them, not held back because the
// server compressed them: skewgate asks for the events in a form it can
// split and still ends the watch cleanly.
func TestEndWatchOfAClientThatAcceptsGzip(t *testing.T) {
	asked := make(chan string, 1)
	up := gzipWatchUpstream(t, asked)
	b := backendFor(t, "b", up, trustFor(t, up))
	end := make(chan struct{})
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Forward(w, r, Request{Candidates: []*Backend{b}, Idempotent: true, LongRunning: true, End: end})
	}))
	front.EnableHTTP2 = true
	front.StartTLS()
	defer front.Close()
	c := front.Client()
	c.Timeout = 10 * time.Second
	req, _ := http.NewRequest(http.MethodGet, front.URL+"/api/v1/nodes?watch=true&sendInitialEvents=true", nil)
	req.Header.Set("Accept-Encoding", "gzip") // on the wire, as Go's transport sends it for client-go
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := <-asked; got != "gzip" {
		t.Errorf("the server was asked with Accept-Encoding %q, want gzip from skewgate's transport", got)
	}
	var body io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		body = zr
	}
	rd := bufio.NewReader(body)
	for i := range 2 {
		line, err := rd.ReadString('\n')
		if err != nil || !strings.Contains(line, `"resourceVersion"`) {
			t.Fatalf("event %d: %q %v (held back?)", i, line, err)
		}
	}
	close(end)
	if rest, err := io.ReadAll(rd); err != nil || len(rest) != 0 {
		t.Errorf("after the end: read %q, %v; want a clean end", rest, err)
	}
}

// A compressed answer is passed on as it is: its bytes hold no event
// boundaries to wait for.
func TestEndAtLeavesCompressedAnswers(t *testing.T) {
	body := io.NopCloser(strings.NewReader("\x1f\x8b compressed"))
	resp := &http.Response{StatusCode: http.StatusOK, Body: body, Header: http.Header{
		"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}}
	if err := endAt(make(chan struct{}))(resp); err != nil {
		t.Fatal(err)
	}
	if resp.Body != body {
		t.Error("a gzip answer was split into events")
	}
}

func TestWholeFrames(t *testing.T) {
	frame := func(n int) []byte {
		b := make([]byte, 4+n)
		binary.BigEndian.PutUint32(b, uint32(n))
		return b
	}
	two := append(frame(3), frame(5)...)
	for _, tc := range []struct {
		b    []byte
		want int
	}{{nil, 0}, {frame(3)[:2], 0}, {frame(3)[:6], 0}, {frame(3), 7}, {two, 16}, {append(two, frame(9)[:5]...), 16}, {frame(0), 4}} {
		if got := wholeFrames(tc.b); got != tc.want {
			t.Errorf("wholeFrames(%d bytes) = %d, want %d", len(tc.b), got, tc.want)
		}
	}
	if splitterFor("application/vnd.kubernetes.protobuf;stream=watch") == nil || splitterFor("application/json") == nil {
		t.Error("the watch encodings have no splitter")
	}
	if splitterFor("application/cbor-seq") != nil || splitterFor("text/plain") != nil {
		t.Error("an encoding of unknown framing got a splitter")
	}
}

// A server's own error is passed on after the whole events before it.
func TestFramedBodyPassesServerErrors(t *testing.T) {
	boom := errors.New("boom")
	body := io.NopCloser(io.MultiReader(strings.NewReader("{\"a\":1}\n{\"b\""), errReader{boom}))
	f := newFramedBody(body, make(chan struct{}), wholeLines)
	defer f.Close()
	got, err := io.ReadAll(f)
	if !errors.Is(err, boom) || string(got) != "{\"a\":1}\n" {
		t.Errorf("read %q, %v; want the whole event, then the server's error", got, err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// Events reach the caller whole and intact however the server's bytes
// arrive and whatever the caller reads at once: one byte at a time, an
// event longer than the read buffer, many events in one read.
func TestFramedBodyEventsWhateverTheReads(t *testing.T) {
	events := []string{`{"a":1}`, `{"big":"` + strings.Repeat("x", 3*framedBufSize) + `"}`, `{"b":2}`}
	var all strings.Builder
	for range 100 {
		for _, e := range events {
			all.WriteString(e + "\n")
		}
	}
	for _, tc := range []struct {
		name string
		src  io.Reader
		p    int
	}{
		{"byte by byte", iotest.OneByteReader(strings.NewReader(all.String())), 7},
		{"half reads", iotest.HalfReader(strings.NewReader(all.String())), 32 << 10},
		{"whole", strings.NewReader(all.String()), 1 << 20},
	} {
		f := newFramedBody(io.NopCloser(tc.src), make(chan struct{}), wholeLines)
		var got bytes.Buffer
		p := make([]byte, tc.p)
		for {
			n, err := f.Read(p)
			got.Write(p[:n])
			if n > 0 && p[n-1] != '\n' && n < tc.p {
				t.Fatalf("%s: a read ended mid-event: %q", tc.name, p[max(0, n-10):n])
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		f.Close()
		if got.String() != all.String() {
			t.Errorf("%s: read %d bytes, want the %d sent", tc.name, got.Len(), all.Len())
		}
	}
}
