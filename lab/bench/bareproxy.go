package bench

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"sync"
	"time"

	"k8s.io/client-go/transport"
)

// BareProxy is the floor of any Go L7 hop in front of kube-apiserver, the
// table's go-proxy path: the standard library's reverse proxy over the same
// TLS and HTTP/2 as skewgate, doing only what such a hop cannot skip — it
// verifies the caller's client certificate and passes the identity on as
// front-proxy headers with the front-proxy client certificate, as skewgate
// does. No routing, no metrics, no failover: skewgate's CPU per request
// above it is skewgate's own work; the floor itself is what Go's net/http,
// crypto/tls and HTTP/2 cost.
type BareProxy struct {
	Listen string
	// Cert and Key serve the listener; ClientCA verifies callers.
	Cert, Key, ClientCA string
	// Upstream is the apiserver's URL, verified against UpstreamCA, and
	// reached from Source with the front-proxy client certificate.
	Upstream, UpstreamCA          string
	FrontProxyCert, FrontProxyKey string
	Source                        string
}

// BareProxyCommand is the first argument that makes the benchmark's test
// binary a BareProxy (the benchmark starts it as its own process, so its
// CPU is measured as HAProxy's and skewgate's are).
const BareProxyCommand = "bare-proxy"

// Args are the arguments that run p (after BareProxyCommand).
func (p BareProxy) Args() []string {
	return []string{BareProxyCommand, "-listen", p.Listen, "-cert", p.Cert, "-key", p.Key, "-client-ca", p.ClientCA,
		"-upstream", p.Upstream, "-upstream-ca", p.UpstreamCA, "-front-proxy-cert", p.FrontProxyCert,
		"-front-proxy-key", p.FrontProxyKey, "-source", p.Source}
}

// ParseBareProxy reads the arguments Args wrote (without BareProxyCommand).
func ParseBareProxy(args []string) (BareProxy, error) {
	var p BareProxy
	fs := flag.NewFlagSet(BareProxyCommand, flag.ContinueOnError)
	for name, v := range map[string]*string{"listen": &p.Listen, "cert": &p.Cert, "key": &p.Key, "client-ca": &p.ClientCA,
		"upstream": &p.Upstream, "upstream-ca": &p.UpstreamCA, "front-proxy-cert": &p.FrontProxyCert,
		"front-proxy-key": &p.FrontProxyKey, "source": &p.Source} {
		fs.StringVar(v, name, "", name)
	}
	if err := fs.Parse(args); err != nil {
		return p, err
	}
	if p.Listen == "" || p.Upstream == "" {
		return p, errors.New("bare-proxy: -listen and -upstream are required")
	}
	return p, nil
}

// Serve runs the proxy on p.Listen until its listener fails.
func (p BareProxy) Serve() error {
	l, err := net.Listen("tcp", p.Listen)
	if err != nil {
		return err
	}
	return p.serve(l)
}

func (p BareProxy) serve(l net.Listener) error {
	target, err := url.Parse(p.Upstream)
	if err != nil {
		return err
	}
	clientCAs, err := certPool(p.ClientCA)
	if err != nil {
		return err
	}
	upstreamCAs, err := certPool(p.UpstreamCA)
	if err != nil {
		return err
	}
	frontProxy, err := tls.LoadX509KeyPair(p.FrontProxyCert, p.FrontProxyKey)
	if err != nil {
		return err
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	if p.Source != "" {
		src, err := netip.ParseAddr(p.Source)
		if err != nil {
			return err
		}
		dialer.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = ""
			// Only the verified certificate names the caller: the
			// caller's own X-Remote-* headers are replaced.
			cert := pr.In.TLS.PeerCertificates[0]
			transport.SetAuthProxyHeaders(pr.Out, cert.Subject.CommonName, "", cert.Subject.Organization, nil)
		},
		Transport: &http.Transport{
			DialContext:         dialer.DialContext,
			TLSClientConfig:     &tls.Config{RootCAs: upstreamCAs, Certificates: []tls.Certificate{frontProxy}},
			ForceAttemptHTTP2:   true,
			MaxIdleConnsPerHost: 64,
		},
		BufferPool: barePool{},
	}
	srv := &http.Server{
		Handler:   rp,
		TLSConfig: &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs},
		// kube-apiserver's and skewgate's stream limit.
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 1000},
	}
	return srv.ServeTLS(l, p.Cert, p.Key)
}

func certPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", file)
	}
	return pool, nil
}

// barePool pools the copy buffers, as skewgate does: the floor is the
// machinery, not the standard proxy's 32 KiB allocation per request.
type barePool struct{}

var bareBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (barePool) Get() []byte  { return *bareBuffers.Get().(*[]byte) }
func (barePool) Put(b []byte) { bareBuffers.Put(&b) }
