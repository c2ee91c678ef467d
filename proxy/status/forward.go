package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"
)

// portForward reaches one pod's port through the apiserver
// (pods/portforward), for an operator who reaches the apiserver and not
// the nodes: the apiserver hands the stream to the pod's kubelet, whose
// container runtime dials localhost:<port> in the pod's network
// namespace — the node's for skewgate's hostNetwork pods, where the admin
// listener also serves on 127.0.0.1 (--secure-admin-loopback). The
// operator's credentials go to the apiserver, as every kubectl request's
// do; the TLS to skewgate runs inside the stream, so the apiserver and the
// kubelet carry only ciphertext and the operator's token leaves only
// after skewgate's certificate was proven, as on the direct path.
type portForward struct {
	dialer httpstream.Dialer
	port   int
	what   string // namespace/pod:port, for errors
}

// newPortForward reaches namespace/pod's port with rc, the operator's
// config for the apiserver: websocket first, SPDY where the apiserver
// refuses the upgrade, as kubectl port-forward does.
func newPortForward(rc *rest.Config, namespace, pod string, port int) (*portForward, error) {
	c := rest.CopyConfig(rc)
	c.APIPath, c.GroupVersion = "/api", &corev1.SchemeGroupVersion
	base, versioned, err := rest.DefaultServerUrlFor(c)
	if err != nil {
		return nil, fmt.Errorf("the apiserver's URL: %w", err)
	}
	u := *base
	u.Path = path.Join(base.Path, versioned, "namespaces", namespace, "pods", pod, "portforward")
	tr, upgrader, err := spdy.RoundTripperFor(rc)
	if err != nil {
		return nil, err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: tr}, http.MethodPost, &u)
	ws, err := portforward.NewSPDYOverWebsocketDialer(&u, rc)
	if err != nil {
		return nil, err
	}
	// client-go's websocket transport fails with k8s.io/streaming's
	// UpgradeFailureError, apimachinery's twin for SPDY: either is an
	// apiserver that does not take the websocket.
	dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || streamhttp.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	return &portForward{dialer: dialer, port: port, what: fmt.Sprintf("%s/%s:%d", namespace, pod, port)}, nil
}

// DialContext opens a new port-forward to the pod's port, whatever the
// address asked (the URL's host, which TLS verifies the certificate by).
// The dialer does not take a context: one that ends first abandons the
// dial and closes its connection when it comes.
func (p *portForward) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	type dialed struct {
		conn httpstream.Connection
		err  error
	}
	ch := make(chan dialed, 1)
	go func() {
		c, _, err := p.dialer.Dial(portforward.PortForwardProtocolV1Name)
		ch <- dialed{c, err}
	}()
	select {
	case d := <-ch:
		if d.err != nil {
			return nil, fmt.Errorf("port-forward to %s through the apiserver: %w", p.what, d.err)
		}
		return p.open(d.conn)
	case <-ctx.Done():
		go func() {
			if d := <-ch; d.conn != nil {
				d.conn.Close()
			}
		}()
		return nil, fmt.Errorf("port-forward to %s through the apiserver: %w", p.what, ctx.Err())
	}
}

// open makes the port-forward's two streams, as client-go's
// PortForwarder does for each connection: the error stream, on which the
// kubelet says why the forward failed, and the data stream.
func (p *portForward) open(conn httpstream.Connection) (net.Conn, error) {
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(p.port))
	h.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := conn.CreateStream(h)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("port-forward to %s: error stream: %w", p.what, err)
	}
	errStream.Close() // nothing to say on it
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(h)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("port-forward to %s: data stream: %w", p.what, err)
	}
	near, far := net.Pipe()
	f := &forwarded{Conn: near, streams: conn}
	said := make(chan struct{})
	go func() {
		defer close(said)
		msg, _ := io.ReadAll(io.LimitReader(errStream, 4<<10))
		if m := strings.TrimSpace(string(msg)); m != "" {
			f.setRemote(fmt.Errorf("port-forward to %s: %s", p.what, m))
		}
	}()
	go func() {
		io.Copy(data, far)
		data.Close()
	}()
	go func() {
		io.Copy(far, data)
		// The kubelet ends both streams after the forward: what it said
		// is known before the reader sees the end.
		<-said
		far.Close()
	}()
	return f, nil
}

// forwarded is a port-forward's data stream as a net.Conn: the near end
// of a pipe the streams feed, for the deadlines a TLS client sets. A read
// that meets the end, or a write that finds it closed, returns the
// kubelet's error when it sent one (nothing listens at the port, the pod
// is gone): it is known before the far end closes.
type forwarded struct {
	net.Conn
	streams httpstream.Connection

	mu     sync.Mutex
	remote error
}

func (f *forwarded) setRemote(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.remote = err
}

// ended is the kubelet's error for err, the pipe's end, if it sent one.
func (f *forwarded) ended(err error) error {
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.remote != nil {
		return f.remote
	}
	return err
}

func (f *forwarded) Read(b []byte) (int, error) {
	n, err := f.Conn.Read(b)
	if err != nil {
		err = f.ended(err)
	}
	return n, err
}

// Write: a TLS client's first write can find the far end closed already,
// when the kubelet failed at once.
func (f *forwarded) Write(b []byte) (int, error) {
	n, err := f.Conn.Write(b)
	if err != nil {
		err = f.ended(err)
	}
	return n, err
}

// Close ends the pipe and the port-forward's connection to the apiserver.
func (f *forwarded) Close() error {
	err := f.Conn.Close()
	f.streams.Close()
	return err
}
