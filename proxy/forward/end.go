package forward

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"mime"
	"net/http"
	"sync"
	"time"
)

// endAt makes a watch's answer end cleanly when end closes: at the next
// boundary between events the stream ends as a watch the server timed out
// ends (the last chunk of HTTP/1.1, END_STREAM of HTTP/2), and the
// client's reflector watches again from the last resourceVersion it saw —
// no error, no event lost. Cancelling the request instead would abort the
// stream (RST_STREAM, or a connection closed mid-chunk), which clients
// report as an error.
//
// Only the watch encodings whose framing is known are wrapped: JSON (one
// object per line) and protobuf (length-prefixed), and only as plain
// bytes (see plainEvents). Others end when their server ends them.
func endAt(end <-chan struct{}) func(*http.Response) error {
	return func(resp *http.Response) error {
		if resp.StatusCode != http.StatusOK || !identityEncoded(resp.Header) {
			return nil
		}
		fr := framerFor(resp.Header.Get("Content-Type"))
		if fr == nil {
			return nil
		}
		resp.Body = newFramedBody(resp.Body, end, fr)
		return nil
	}
}

// plainEvents asks the server for a watch whose events endAt can find:
// without the client's Accept-Encoding, Go's transport asks for gzip
// itself and hands the answer on decompressed. kube-apiserver 1.37
// compresses a watch's answer for a client that accepts gzip, as every
// client-go client does; split as it came, the compressed stream has no
// event boundaries, and events were held back for good (a kubelet's
// informers never synced through skewgate, so it never replaced its
// static pods).
func plainEvents(out *http.Request) { out.Header.Del("Accept-Encoding") }

// identityEncoded reports whether an answer's body is its events as the
// server encoded them, not compressed.
func identityEncoded(h http.Header) bool {
	ce := h.Get("Content-Encoding")
	return ce == "" || ce == "identity"
}

// framerFor returns what finds the boundaries between events in a watch
// stream of content type ct, or nil for an encoding whose framing is not
// known.
func framerFor(ct string) framer {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return nil
	}
	switch {
	case mt == "application/json":
		return &lines{}
	case mt == "application/vnd.kubernetes.protobuf" && params["stream"] == "watch":
		return &frames{}
	}
	return nil
}

// A framer follows a watch stream's bytes as they pass, with a few bytes
// of state, to tell where its events end: a watch's memory must not grow
// with the size of its objects (keeping whole events to pass on held a
// copy of the largest one — 1.75 MiB per watch of a 1 MiB ConfigMap, and
// a few hundred such watches took skewgate to its memory limit).
type framer interface {
	// pass follows b, the stream's next bytes, and returns how many of
	// them it took: all of them, or with stop only up to the first
	// boundary between events in b.
	pass(b []byte, stop bool) int
	// between reports whether the bytes passed so far end at a boundary
	// between events (or none passed).
	between() bool
}

// lines frames JSON watch events: kube-apiserver writes one compact
// object per line, and JSON escapes every newline inside a string.
type lines struct{ mid bool }

func (l *lines) pass(b []byte, stop bool) int {
	if len(b) == 0 {
		return 0
	}
	if stop {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			l.mid = false
			return i + 1
		}
	}
	l.mid = b[len(b)-1] != '\n'
	return len(b)
}

func (l *lines) between() bool { return !l.mid }

// frames frames protobuf watch events: each is a 4-byte big-endian length
// and that many bytes (k8s.io/apimachinery's LengthDelimitedFramer).
type frames struct {
	prefix [4]byte
	got    int    // bytes of prefix read
	left   uint32 // bytes of the event's body still to come
}

func (f *frames) pass(b []byte, stop bool) int {
	i := 0
	for i < len(b) {
		if f.left > 0 {
			n := min(uint32(len(b)-i), f.left)
			i += int(n)
			f.left -= n
		} else {
			f.prefix[f.got] = b[i]
			f.got++
			i++
			if f.got < len(f.prefix) {
				continue
			}
			f.got, f.left = 0, binary.BigEndian.Uint32(f.prefix[:])
		}
		if stop && f.between() {
			break
		}
	}
	return i
}

func (f *frames) between() bool { return f.got == 0 && f.left == 0 }

// framedBody passes a watch's bytes on as they come, straight into the
// caller's buffer (the reverse proxy's 8 KiB): nothing is kept, whatever
// the size of an event. Once end closed it ends with io.EOF at the next
// boundary between events; a stream stalled midway for stalledEventCut
// after that is cut (an error: the caller's proxy aborts the answer).
type framedBody struct {
	body io.ReadCloser
	stop func() bool // stops watching end

	mu sync.Mutex
	fr framer // follows the bytes passed on
	// ended: end closed. At a boundary no byte more is passed on.
	ended bool
	cut   bool  // stalled midway an event past stalledEventCut
	err   error // the server's error or end, after what it sent
}

// stalledEventCut is how long a watch asked to end may take to finish
// the event it is passing on.
var stalledEventCut = 5 * time.Second

// errStalledEvent cuts a watch that did not finish its event in time.
var errStalledEvent = errors.New("watch asked to end: its event stalled midway")

func newFramedBody(body io.ReadCloser, end <-chan struct{}, fr framer) *framedBody {
	f := &framedBody{body: body, fr: fr}
	done := make(chan struct{})
	go func() {
		select {
		case <-end:
		case <-done:
			return
		}
		f.mu.Lock()
		f.ended = true
		between := f.fr.between()
		f.mu.Unlock()
		if !between {
			t := time.NewTimer(stalledEventCut)
			defer t.Stop()
			select {
			case <-t.C:
			case <-done:
				return
			}
			f.mu.Lock()
			f.cut = !f.fr.between()
			f.mu.Unlock()
		}
		body.Close() // a Read blocked on the server returns
	}()
	f.stop = sync.OnceValue(func() bool { close(done); return true })
	return f
}

func (f *framedBody) Read(p []byte) (int, error) {
	if err := f.check(); err != nil {
		return 0, err
	}
	// Only Read touches the framer's position past this: the goroutine
	// watching end reads it, and closes body.
	n, err := f.body.Read(p)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended && f.fr.between() {
		return 0, io.EOF // what came after the boundary is not passed on
	}
	n = f.fr.pass(p[:n], f.ended)
	switch {
	case err == nil:
	case f.cut:
		f.err = errStalledEvent
	case f.ended && f.fr.between():
		// Ours: closed at a boundary.
	default:
		// The server's end (io.EOF) or error, after what it sent.
		f.err = err
	}
	if n == 0 && f.ended && f.fr.between() {
		return 0, io.EOF
	}
	if n == 0 {
		return 0, f.err
	}
	return n, nil
}

// check returns why no more bytes are passed on, if so.
func (f *framedBody) check() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.cut:
		return errStalledEvent
	case f.ended && f.fr.between():
		return io.EOF
	}
	return f.err
}

func (f *framedBody) Close() error {
	f.stop()
	return f.body.Close()
}
