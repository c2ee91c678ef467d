package forward

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// MaxReplay is the most of a caller's body kept to send it again: as much
// as kube-apiserver takes in one request (3 MiB, its MaxRequestBodyBytes).
// A longer body is streamed and never sent twice.
const MaxReplay = 3 << 20

// DefaultReplayBudget bounds the bytes kept for replay across all requests
// in flight when SetReplayBudget was not called.
const DefaultReplayBudget = 64 << 20

// replayBudget bounds the copies of callers' bodies kept at once: each is
// at most MaxReplay, but a thousand slow uploads from any ServiceAccount
// would otherwise hold 3 GiB, and an OOM kill resets every connection
// through skewgate.
type replayBudget struct{ limit, used atomic.Int64 }

var replay = func() *replayBudget {
	r := &replayBudget{}
	r.limit.Store(DefaultReplayBudget)
	return r
}()

// SetReplayBudget bounds the bytes of callers' bodies kept to be sent
// again, across all requests in flight (n <= 0: DefaultReplayBudget). A
// body that finds no room is streamed without a copy, as one longer than
// MaxReplay is: it moves on from a server that did not take it only if
// none of it was read yet.
func SetReplayBudget(n int64) {
	if n <= 0 {
		n = DefaultReplayBudget
	}
	replay.limit.Store(n)
}

// ReplayBytes is how many bytes of callers' bodies are kept now.
func ReplayBytes() int64 { return replay.used.Load() }

func (r *replayBudget) take(n int) bool {
	for {
		used := r.used.Load()
		if used+int64(n) > r.limit.Load() {
			return false
		}
		if r.used.CompareAndSwap(used, used+int64(n)) {
			return true
		}
	}
}

func (r *replayBudget) give(n int) { r.used.Add(-int64(n)) }

// minKeep is the first capacity of a kept body: small bodies (most writes)
// take one allocation, and a caller that declares a large body and sends
// nothing costs nothing.
const minKeep = 16 << 10

// bodyReader is the caller's body for every attempt. It records an error
// reading it (a malformed chunk, a caller that left mid-upload) as the
// caller's, and keeps what was read (up to MaxReplay bytes, within the
// replay budget) so that a request the server provably did not take —
// refused at dial, on a connection its graceful GOAWAY had already closed
// to new streams, or answered "shutting down" before any handler ran — is
// sent again whole, by the transport (GetBody) or to the next candidate.
type bodyReader struct {
	mu       sync.Mutex
	src      io.ReadCloser
	declared int64  // the caller's Content-Length; -1 unknown
	kept     []byte // grows as bytes arrive; its capacity is taken from the budget
	read     int    // bytes read from src
	// over: what was read is not kept (too long, no room in the budget,
	// or no longer needed): only a body none of which was read yet can
	// be sent again.
	over bool
	err  error
}

// errTooLongToReplay is a request whose body was not kept, asked for
// again.
var errTooLongToReplay = fmt.Errorf("the request body was not kept (longer than %d bytes, or too many bodies kept at once) and cannot be sent again", MaxReplay)

// readAt reads the body from off: what was kept, then the rest of the
// caller's body.
func (b *bodyReader) readAt(p []byte, off int) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if off < b.read {
		if b.over {
			return 0, errTooLongToReplay
		}
		return copy(p, b.kept[off:]), nil
	}
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.src.Read(p)
	b.read += n
	b.keep(p[:n])
	if err != nil {
		b.err = err // io.EOF too: the caller's body is read once
	}
	return n, err
}

// keep appends p to the copy, growing it (doubling, within what the caller
// declared) only as bytes arrive; b.mu is held.
func (b *bodyReader) keep(p []byte) {
	if b.over || len(p) == 0 {
		return
	}
	need := len(b.kept) + len(p)
	if need > MaxReplay {
		b.drop()
		return
	}
	if need > cap(b.kept) {
		size := max(2*cap(b.kept), need, minKeep)
		if b.declared >= int64(need) {
			size = min(size, int(b.declared))
		}
		size = min(size, MaxReplay)
		if !replay.take(size - cap(b.kept)) {
			b.drop()
			return
		}
		kept := make([]byte, len(b.kept), size)
		copy(kept, b.kept)
		b.kept = kept
	}
	b.kept = append(b.kept, p...)
}

// drop gives up the copy and its share of the budget; b.mu is held.
func (b *bodyReader) drop() {
	replay.give(cap(b.kept))
	b.over, b.kept = true, nil
}

// release drops the copy once no attempt will need it again; reading on
// (a body still streaming to the server that answered) goes on uncopied.
func (b *bodyReader) release() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.over {
		b.drop()
	}
}

// open returns a reader of the body from its start.
func (b *bodyReader) open() (io.ReadCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.over && b.read > 0 {
		return nil, errTooLongToReplay
	}
	return &bodyCursor{b: b}, nil
}

// failed is the error reading the caller's body, if any.
func (b *bodyReader) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if errors.Is(b.err, io.EOF) {
		return nil
	}
	return b.err
}

// bodyCursor is one attempt's reader of the body.
type bodyCursor struct {
	b   *bodyReader
	off int
}

func (c *bodyCursor) Read(p []byte) (int, error) {
	n, err := c.b.readAt(p, c.off)
	c.off += n
	return n, err
}

// Close leaves the caller's body open: a transport closes the body of a
// request it could not send, which is still to be sent again. The server
// closes the caller's body when the handler returns.
func (c *bodyCursor) Close() error { return nil }

// callerBody makes req's body (if any) one that can be read again from its
// start, through req.GetBody. Call release when no attempt is left.
func callerBody(req *http.Request) *bodyReader {
	if req.Body == nil || req.Body == http.NoBody {
		return nil
	}
	b := &bodyReader{src: req.Body, declared: req.ContentLength}
	req.Body, _ = b.open()
	req.GetBody = b.open
	return b
}

// watchBody makes req's body (if any) one whose read errors are recorded,
// for a request sent once: nothing of it is kept.
func watchBody(req *http.Request) *bodyReader {
	b := callerBody(req)
	if b != nil {
		b.over = true
	}
	return b
}

// rewind gives req its body from the start for the next candidate.
func rewind(req *http.Request, body *bodyReader) error {
	if body == nil {
		return nil
	}
	rc, err := body.open()
	if err != nil {
		return err
	}
	req.Body = rc
	return nil
}
