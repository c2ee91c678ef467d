package forward

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// watchUpstream streams two whole JSON events and half of a third, then
// waits: the shape of a watch caught mid-event. Once released closes it
// finishes the third event and sends a fourth, in one write.
func watchUpstream(t *testing.T, released <-chan struct{}) *httptest.Server {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"type":"ADDED","object":{"metadata":{"resourceVersion":"1"}}}`+"\n")
		io.WriteString(w, `{"type":"ADDED","object":{"metadata":{"resourceVersion":"2"}}}`+"\n")
		io.WriteString(w, `{"type":"ADDED","object":{"meta`)
		w.(http.Flusher).Flush()
		select {
		case <-released:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, `data":{"resourceVersion":"3"}}}`+"\n")
		io.WriteString(w, `{"type":"ADDED","object":{"metadata":{"resourceVersion":"4"}}}`+"\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(up.Close)
	return up
}

// A watch whose End closes mid-event ends cleanly for the client at the
// end of that event, over HTTP/2 and HTTP/1.1: the stream's normal end
// (END_STREAM, the last chunk), not a reset, and no byte of the next
// event.
func TestEndEndsAWatchBetweenEvents(t *testing.T) {
	for _, h2 := range []bool{true, false} {
		end, released := make(chan struct{}), make(chan struct{})
		up := watchUpstream(t, released)
		b := backendFor(t, "b", up, trustFor(t, up))
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
		time.Sleep(50 * time.Millisecond) // the half event is on its way
		close(end)
		// The rest comes once the end was asked: were both one instant,
		// bytes read before skewgate noticed the end would rightly pass.
		time.Sleep(300 * time.Millisecond)
		close(released)
		rest, err := io.ReadAll(rd)
		if err != nil {
			t.Errorf("%s: the watch ended with %v, want a clean end", resp.Proto, err)
		}
		if want := `{"type":"ADDED","object":{"metadata":{"resourceVersion":"3"}}}` + "\n"; string(rest) != want {
			t.Errorf("%s: after the end the client read %q, want the rest of the third event, %q", resp.Proto, rest, want)
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

// frame is a protobuf watch event of n bytes, as the server frames it.
func frame(n int) []byte {
	b := make([]byte, 4+n)
	binary.BigEndian.PutUint32(b, uint32(n))
	for i := range n {
		b[4+i] = byte(i%250) + 1
	}
	return b
}

// The framers find every boundary between events however the stream is
// split across reads, events of 1 MiB included, with a few bytes of state.
func TestFramersFindBoundariesAcrossReads(t *testing.T) {
	big := 1 << 20
	jsonEvent := func(n int) []byte { return []byte(`{"x":"` + strings.Repeat("x", n) + `"}` + "\n") }
	for _, tc := range []struct {
		name   string
		fr     func() framer
		events [][]byte
	}{
		{"json", func() framer { return &lines{} }, [][]byte{jsonEvent(3), jsonEvent(big), jsonEvent(0), jsonEvent(9000)}},
		{"protobuf", func() framer { return &frames{} }, [][]byte{frame(3), frame(big), frame(0), frame(9000)}},
	} {
		var stream []byte
		var ends []int // where each event ends in stream
		for _, e := range tc.events {
			stream = append(stream, e...)
			ends = append(ends, len(stream))
		}
		for _, chunk := range []int{1, 3, 4, 5, 4096, 8 << 10, len(stream)} {
			fr := tc.fr()
			var got []int
			for off := 0; off < len(stream); {
				b := stream[off:min(off+chunk, len(stream))]
				n := fr.pass(b, true) // stop at each boundary: record it
				if n == 0 {
					t.Fatalf("%s, reads of %d: pass took nothing at %d", tc.name, chunk, off)
				}
				off += n
				if fr.between() {
					got = append(got, off)
				}
			}
			if !slices.Equal(got, ends) {
				t.Errorf("%s, reads of %d: boundaries at %v, want %v", tc.name, chunk, got, ends)
			}
			// Without stop it takes everything it is given.
			fr = tc.fr()
			if n := fr.pass(stream[:ends[1]+2], false); n != ends[1]+2 || fr.between() {
				t.Errorf("%s: pass without stop took %d of %d, between %t", tc.name, n, ends[1]+2, fr.between())
			}
		}
	}
	if framerFor("application/vnd.kubernetes.protobuf;stream=watch") == nil || framerFor("application/json") == nil {
		t.Error("the watch encodings have no framer")
	}
	if framerFor("application/cbor-seq") != nil || framerFor("text/plain") != nil {
		t.Error("an encoding of unknown framing got a framer")
	}
}

// A watch asked to end mid-event passes the rest of that event, then ends
// cleanly: the caller reads whole events only, the 1 MiB one included,
// and nothing of the event after it.
func TestFramedBodyEndsAtTheNextBoundary(t *testing.T) {
	big := 1 << 20
	for _, tc := range []struct {
		name   string
		fr     framer
		events [][]byte
	}{
		{"json", &lines{}, [][]byte{[]byte(`{"a":1}` + "\n"), []byte(`{"big":"` + strings.Repeat("x", big) + `"}` + "\n"), []byte(`{"b":2}` + "\n")}},
		{"protobuf", &frames{}, [][]byte{frame(7), frame(big), frame(9)}},
	} {
		pr, pw := io.Pipe()
		end := make(chan struct{})
		f := newFramedBody(pr, end, tc.fr)
		go func() {
			pw.Write(tc.events[0])
			pw.Write(tc.events[1][:1000]) // the big event begins
			<-end
			pw.Write(tc.events[1][1000:]) // and finishes after the end was asked
			pw.Write(tc.events[2])        // never passed on
			pw.Close()
		}()
		p := make([]byte, 8<<10)
		var got []byte
		for len(got) < len(tc.events[0])+1000 {
			n, err := f.Read(p)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			got = append(got, p[:n]...)
		}
		close(end)
		for {
			n, err := f.Read(p)
			got = append(got, p[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: ended with %v, want io.EOF", tc.name, err)
			}
		}
		f.Close()
		if want := append(slices.Clone(tc.events[0]), tc.events[1]...); !bytes.Equal(got, want) {
			t.Errorf("%s: read %d bytes, want the %d of the first two events", tc.name, len(got), len(want))
		}
	}
}

// A watch asked to end whose event stalls midway is cut after
// stalledEventCut (an error, which aborts the answer); one asked to end
// between events ends at once.
func TestFramedBodyCutsAStalledEvent(t *testing.T) {
	defer func(d time.Duration) { stalledEventCut = d }(stalledEventCut)
	stalledEventCut = 200 * time.Millisecond
	for _, mid := range []bool{true, false} {
		pr, pw := io.Pipe()
		defer pw.Close()
		end := make(chan struct{})
		f := newFramedBody(pr, end, &lines{})
		ev := `{"a":1}` + "\n"
		if mid {
			ev += `{"half`
		}
		go pw.Write([]byte(ev))
		p := make([]byte, 64)
		if n, err := f.Read(p); err != nil || n != len(ev) {
			t.Fatalf("read %d, %v", n, err)
		}
		start := time.Now()
		close(end)
		_, err := f.Read(p)
		took := time.Since(start)
		switch {
		case mid && !errors.Is(err, errStalledEvent):
			t.Errorf("stalled midway: %v, want errStalledEvent", err)
		case mid && took < stalledEventCut:
			t.Errorf("stalled midway: cut after %s, want %s", took, stalledEventCut)
		case !mid && (err != io.EOF || took > stalledEventCut):
			t.Errorf("between events: %v after %s, want io.EOF at once", err, took)
		}
		f.Close()
	}
}

// However large an event, passing it on allocates nothing: a watch holds
// no copy of what it carried.
func TestFramedBodyHoldsNoEvent(t *testing.T) {
	for _, tc := range []struct {
		name string
		fr   framer
		ev   []byte
	}{
		{"json", &lines{}, []byte(`{"big":"` + strings.Repeat("x", 1<<20) + `"}` + "\n")},
		{"protobuf", &frames{}, frame(1 << 20)},
	} {
		src := &repeater{ev: tc.ev}
		f := newFramedBody(io.NopCloser(src), make(chan struct{}), tc.fr)
		p := make([]byte, 8<<10)
		allocs := testing.AllocsPerRun(5, func() {
			for range len(tc.ev)/len(p) + 1 {
				f.Read(p)
			}
		})
		f.Close()
		if allocs > 0 {
			t.Errorf("%s: %.0f allocations passing on a 1 MiB event", tc.name, allocs)
		}
	}
}

// repeater streams ev over and over.
type repeater struct {
	ev  []byte
	off int
}

func (r *repeater) Read(p []byte) (int, error) {
	n := copy(p, r.ev[r.off:])
	r.off = (r.off + n) % len(r.ev)
	return n, nil
}

// A server's own error is passed on after what it sent.
func TestFramedBodyPassesServerErrors(t *testing.T) {
	boom := errors.New("boom")
	body := io.NopCloser(io.MultiReader(strings.NewReader("{\"a\":1}\n{\"b\""), errReader{boom}))
	f := newFramedBody(body, make(chan struct{}), &lines{})
	defer f.Close()
	got, err := io.ReadAll(f)
	if !errors.Is(err, boom) || string(got) != "{\"a\":1}\n{\"b\"" {
		t.Errorf("read %q, %v; want what the server sent, then its error", got, err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// skewgate offers each apiserver a stream window of streamWindow, not Go's
// 4 MiB: that is what an apiserver may send ahead of a slow client, and it
// waits in skewgate's memory, per watch.
func TestUpstreamStreamWindow(t *testing.T) {
	window := make(chan uint32, 1)
	up := httptest.NewUnstartedServer(http.NotFoundHandler())
	up.EnableHTTP2 = true
	up.Config.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){"h2": func(_ *http.Server, c *tls.Conn, _ http.Handler) {
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(c, preface); err != nil {
			return
		}
		f, err := http2.NewFramer(io.Discard, c).ReadFrame()
		if s, ok := f.(*http2.SettingsFrame); ok && err == nil {
			v, _ := s.Value(http2.SettingInitialWindowSize)
			window <- v
		}
	}}
	up.StartTLS()
	defer up.Close()
	b := backendFor(t, "b", up, trustFor(t, up))
	req, _ := http.NewRequest(http.MethodGet, up.URL+"/api", nil)
	go func() {
		if resp, err := b.Transport().RoundTrip(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case v := <-window:
		if v != streamWindow {
			t.Errorf("stream window offered to the apiserver: %d, want %d", v, streamWindow)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no SETTINGS frame from skewgate's transport")
	}
}
