package forward

import (
	"encoding/binary"
	"io"
	"mime"
	"net/http"
	"sync"
)

// endAt makes a watch's answer end cleanly when end closes: the caller
// is only ever given whole events, so at any moment the stream can end as
// a watch the server timed out ends (the last chunk of HTTP/1.1, END_STREAM
// of HTTP/2), and the client's reflector watches again from the last
// resourceVersion it saw — no error, no event lost (a partial event held
// back is sent again by the server it watches next). Cancelling the
// request instead would abort the stream (RST_STREAM, or a connection
// closed mid-chunk), which clients report as an error.
//
// Only the watch encodings whose framing is known are wrapped: JSON (one
// object per line) and protobuf (length-prefixed), and only as plain
// bytes (see plainEvents). Others end when their server ends them.
func endAt(end <-chan struct{}) func(*http.Response) error {
	return func(resp *http.Response) error {
		if resp.StatusCode != http.StatusOK || !identityEncoded(resp.Header) {
			return nil
		}
		split := splitterFor(resp.Header.Get("Content-Type"))
		if split == nil {
			return nil
		}
		resp.Body = newFramedBody(resp.Body, end, split)
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

// splitterFor returns how to find whole events in a watch stream of
// content type ct, or nil for an encoding whose framing is not known.
func splitterFor(ct string) func([]byte) int {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return nil
	}
	switch {
	case mt == "application/json":
		return wholeLines
	case mt == "application/vnd.kubernetes.protobuf" && params["stream"] == "watch":
		return wholeFrames
	}
	return nil
}

// wholeLines is the length of the whole JSON events at the start of b:
// kube-apiserver writes one compact object per line, and JSON escapes
// every newline inside a string.
func wholeLines(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			return i + 1
		}
	}
	return 0
}

// wholeFrames is the length of the whole protobuf events at the start of
// b: each is a 4-byte big-endian length and that many bytes
// (k8s.io/apimachinery's LengthDelimitedFramer).
func wholeFrames(b []byte) int {
	n := 0
	for len(b)-n >= 4 {
		size := int(binary.BigEndian.Uint32(b[n:]))
		if len(b)-n-4 < size {
			break
		}
		n += 4 + size
	}
	return n
}

// framedBody passes on only whole events of body and ends with io.EOF
// once end closed.
//
// It reads into one buffer and hands the caller whole events straight out
// of it: a watch's events are copied once on their way through, and
// reading allocates nothing unless an event outgrows the buffer.
type framedBody struct {
	body  io.ReadCloser
	split func([]byte) int
	stop  func() bool // stops watching end

	mu    sync.Mutex
	ended bool // end closed: no more reads of body
	// buf[off:] was read and not yet returned; its first whole bytes are
	// whole events (or, once the server ended the stream, all of it).
	buf   []byte
	off   int
	whole int
	err   error // the server's error reading body, after the whole events
}

// framedBufSize is a watch's read buffer: an event rarely exceeds 8 KiB;
// a larger one grows the buffer.
const framedBufSize = 8 << 10

func newFramedBody(body io.ReadCloser, end <-chan struct{}, split func([]byte) int) *framedBody {
	f := &framedBody{body: body, split: split, buf: make([]byte, 0, framedBufSize)}
	done := make(chan struct{})
	go func() {
		select {
		case <-end:
			f.mu.Lock()
			f.ended = true
			f.mu.Unlock()
			body.Close() // a Read blocked on the server returns
		case <-done:
		}
	}()
	f.stop = sync.OnceValue(func() bool { close(done); return true })
	return f
}

func (f *framedBody) Read(p []byte) (int, error) {
	for {
		f.mu.Lock()
		if f.whole > 0 {
			n := copy(p, f.buf[f.off:f.off+f.whole])
			f.off += n
			f.whole -= n
			f.mu.Unlock()
			return n, nil
		}
		if f.ended {
			f.mu.Unlock()
			return 0, io.EOF
		}
		if f.err != nil {
			f.mu.Unlock()
			return 0, f.err
		}
		// What is left is part of an event: keep it at the start, and
		// make room for the rest.
		held := copy(f.buf[:cap(f.buf)], f.buf[f.off:])
		f.buf, f.off = f.buf[:held], 0
		if held == cap(f.buf) {
			f.buf = append(f.buf, make([]byte, held)...)[:held]
		}
		room := f.buf[held:cap(f.buf)]
		f.mu.Unlock()
		// Only Read touches buf: the goroutine watching end only
		// closes body.
		n, err := f.body.Read(room)
		f.mu.Lock()
		f.buf = f.buf[:held+n]
		f.whole = f.split(f.buf)
		switch {
		case err == nil:
		case f.ended:
			// Ours: what is held back is not a whole event.
		case err == io.EOF:
			// The server ended it: pass on what it sent, as it sent it.
			f.whole, f.ended = len(f.buf), true
		default:
			f.err = err
		}
		f.mu.Unlock()
	}
}

func (f *framedBody) Close() error {
	f.stop()
	return f.body.Close()
}
