package status_test

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	streamhttp "k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/status"
	"github.com/skewgate/skewgate/proxy/status/statustest"
)

// forwarder stands in for an apiserver and a kubelet at once: it answers
// a pod's portforward over SPDY (a websocket request is refused, as by an
// apiserver without websocket port-forwarding: the client falls back) by
// dialling 127.0.0.1:<port>, as the container runtime does in a
// host-network pod's namespace, and says on the error stream why it could
// not. A unit seam; lab/e2e/daemonset runs the real ones.
func forwarder(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var forwards atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+statustest.Token {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		if !strings.HasSuffix(r.URL.Path, "/portforward") || r.Method != http.MethodPost {
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		if _, err := streamhttp.Handshake(r, w, []string{portforward.PortForwardProtocolV1Name}); err != nil {
			return
		}
		forwards.Add(1)
		streams := make(chan streamhttp.Stream, 2)
		conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s streamhttp.Stream, _ <-chan struct{}) error {
			streams <- s
			return nil
		})
		if conn == nil {
			return
		}
		defer conn.Close()
		var errStream, data streamhttp.Stream
		for errStream == nil || data == nil {
			select {
			case s := <-streams:
				if s.Headers().Get(corev1.StreamType) == corev1.StreamTypeError {
					errStream = s
				} else {
					data = s
				}
			case <-conn.CloseChan():
				return
			}
		}
		port := data.Headers().Get(corev1.PortHeader)
		c, err := net.Dial("tcp4", "127.0.0.1:"+port)
		if err != nil {
			fmt.Fprintf(errStream, "failed to connect to localhost:%s inside namespace \"host\": %v", port, err)
			errStream.Close()
			data.Close()
			return
		}
		defer c.Close()
		go func() {
			io.Copy(c, data)
			c.(*net.TCPConn).CloseWrite()
		}()
		io.Copy(data, c)
		data.Close()
		errStream.Close()
		<-conn.CloseChan()
	}))
	t.Cleanup(srv.Close)
	return srv, &forwards
}

// TestThroughAPIServer: with ThroughAPIServer every request reaches the
// node's listener by a port-forward through the apiserver, and the TLS
// inside it proves the listener as the direct path does: an apiserver's
// certificate answers; a kubelet's gets no request, so no token; a port
// where nothing listens is the kubelet's word in the row.
func TestThroughAPIServer(t *testing.T) {
	apiserver, forwards := forwarder(t)
	well := statustest.Serve(t, statustest.Node{Local: "198.18.0.1:6443", Version: "v0.1.0",
		Steering: &admin.SteeringView{Layout: admin.SteeringLayout, State: "steering standby: no skew window", Mode: "auto"}, State: "standby", Healthy: true})
	kubeletCert := statustest.SelfSigned(t, "system:node:node-b", []string{"system:nodes"}, "kubernetes.default.svc")
	var hits atomic.Int32
	kubelet := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "collected", http.StatusUnauthorized)
	}))
	kubelet.TLS = &tls.Config{Certificates: []tls.Certificate{kubeletCert}}
	kubelet.StartTLS()
	t.Cleanup(kubelet.Close)
	closed := closedURL(t)

	// The kubeconfig's CA signs the apiserver's certificate and, as a
	// cluster CA does, the nodes' (here each is its own).
	var ca []byte
	for _, der := range [][]byte{apiserver.Certificate().Raw, well.Certificate().Raw, kubeletCert.Certificate[0]} {
		ca = append(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	o := status.Options{Config: &rest.Config{Host: apiserver.URL, BearerToken: statustest.Token, TLSClientConfig: rest.TLSClientConfig{CAData: ca}},
		Timeout: 5 * time.Second, ThroughAPIServer: true}
	target := func(node, u string) status.Target {
		p, _ := url.Parse(u)
		port, _ := strconv.Atoi(p.Port())
		return status.Target{Node: node, Namespace: "kube-system", Pod: "skewgate-" + node, URL: u, Port: port}
	}
	c := status.Gather(context.Background(), []status.Target{target("node-a", well.URL), target("node-b", kubelet.URL), target("node-c", closed)}, o)
	if n := c.Nodes[0]; n.Error != "" || n.Version != "v0.1.0" {
		t.Errorf("node-a through the apiserver: %+v, want its status", n)
	}
	if n := c.Nodes[1]; !strings.Contains(n.Error, "a node's certificate") || hits.Load() != 0 {
		t.Errorf("node-b, a kubelet's certificate: error %q and %d requests reached it; want it refused and none", n.Error, hits.Load())
	}
	if n := c.Nodes[2]; !strings.Contains(n.Error, "failed to connect to localhost:") {
		t.Errorf("node-c, nothing listening: error %q, want the kubelet's word", n.Error)
	}
	if forwards.Load() < 3 {
		t.Errorf("%d port-forwards through the apiserver, want one per node at least", forwards.Load())
	}
}
