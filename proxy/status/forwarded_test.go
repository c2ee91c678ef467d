package status

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
)

// failedForward is a port-forward whose kubelet failed at once: the error
// stream says why, the data stream is over before anything is written.
type failedForward struct{ why string }

func (f failedForward) CreateStream(h http.Header) (httpstream.Stream, error) {
	if h.Get(corev1.StreamType) == corev1.StreamTypeError {
		return &stream{Reader: strings.NewReader(f.why), h: h}, nil
	}
	return &stream{Reader: strings.NewReader(""), h: h}, nil
}
func (failedForward) Close() error                       { return nil }
func (failedForward) CloseChan() <-chan bool             { return make(chan bool) }
func (failedForward) SetIdleTimeout(time.Duration)       {}
func (failedForward) RemoveStreams(...httpstream.Stream) {}

type stream struct {
	io.Reader
	h http.Header
}

func (s *stream) Write(b []byte) (int, error) { return 0, io.ErrClosedPipe }
func (s *stream) Close() error                { return nil }
func (s *stream) Reset() error                { return nil }
func (s *stream) Headers() http.Header        { return s.h }
func (s *stream) Identifier() uint32          { return 0 }

// TestForwardedSaysWhy: once a failed forward's far end is closed, a read
// and a write alike return the kubelet's reason, not the pipe's end (the
// lab saw a TLS client's first write meet the closed pipe: "io: read/write
// on closed pipe" in the row).
func TestForwardedSaysWhy(t *testing.T) {
	const why = "failed to connect to localhost:17446 inside namespace \"host\": connection refused"
	p := &portForward{port: 17446, what: "kube-system/skewgate-x:17446"}
	c, err := p.open(failedForward{why})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Read(make([]byte, 1)); err == nil || !strings.Contains(err.Error(), why) {
		t.Errorf("read: %v, want the kubelet's %q", err, why)
	}
	if _, err := c.Write([]byte("client hello")); err == nil || !strings.Contains(err.Error(), why) {
		t.Errorf("write after the end: %v, want the kubelet's %q", err, why)
	}
}
