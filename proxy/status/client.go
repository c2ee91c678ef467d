package status

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/proxy/forward"
)

// Options say how every node's admin listener is reached.
type Options struct {
	// Config is the operator's (a kubeconfig's): its credentials (token,
	// client certificate, exec plugin) are presented to every node and its
	// CA verifies each node's certificate. Its Host is not used.
	Config *rest.Config
	// ServerName verifies each node's certificate by this name; empty: by
	// the node's IP, which kubeadm's apiserver certificate, the one skewgate
	// serves, carries.
	ServerName string
	// Insecure skips the verification of nodes' certificates. Only this
	// field turns it on: a kubeconfig's insecure-skip-tls-verify is for its
	// apiserver, not for the nodes.
	Insecure bool
	// Timeout bounds each node's answer (zero: 10 s).
	Timeout time.Duration
	// ThroughAPIServer reaches each node's listener by a port-forward to
	// its pod through the apiserver at Config's Host (a bastion that
	// reaches the apiserver and not the nodes), with the same TLS and
	// proof inside it (portForward).
	ThroughAPIServer bool
}

// maxParallel is how many nodes are asked at once.
const maxParallel = 8

// client reaches t's admin listener (https://ip:port) as the operator:
// directly, or through the apiserver.
func (o Options) client(t Target) (*http.Client, error) {
	if o.Config == nil {
		return nil, fmt.Errorf("no credentials to reach %s", t.URL)
	}
	c := rest.CopyConfig(o.Config)
	c.Host, c.APIPath = t.URL, ""
	if o.ThroughAPIServer {
		pf, err := newPortForward(o.Config, t.Namespace, t.Pod, t.Port)
		if err != nil {
			return nil, err
		}
		// The stream goes to the pod whatever the URL says, and to no
		// proxy: the URL's host is what the certificate is verified by.
		c.Dial, c.Proxy = pf.DialContext, noProxy
	}
	c.ServerName = o.ServerName
	c.Insecure = o.Insecure
	if o.Insecure {
		// client-go refuses a CA beside insecure.
		c.CAFile, c.CAData = "", nil
	}
	// The admin listener authenticates the caller and does not impersonate:
	// --as would be dropped, the caller's own rights applied.
	c.Impersonate = rest.ImpersonationConfig{}
	c.Timeout = o.timeout()
	if o.Insecure {
		return rest.HTTPClientFor(c)
	}
	tlsCfg, err := rest.TLSConfigFor(c)
	if err != nil {
		return nil, err
	}
	tlsCfg.VerifyConnection = proveAPIServer(tlsCfg.RootCAs)
	tr := utilnet.SetTransportDefaults(&http.Transport{TLSClientConfig: tlsCfg, DialContext: c.Dial})
	if o.ThroughAPIServer {
		tr.Proxy = noProxy
	}
	rt, err := rest.HTTPWrappersForConfig(c, tr)
	if err != nil {
		return nil, err
	}
	if !o.ThroughAPIServer {
		rt = unreachableHint{rt}
	}
	return &http.Client{Transport: rt, Timeout: c.Timeout}, nil
}

func noProxy(*http.Request) (*url.URL, error) { return nil, nil }

// unreachableHint names --through-apiserver on a node that cannot be
// dialled directly: from a bastion, only the apiserver is reachable.
type unreachableHint struct{ rt http.RoundTripper }

func (h unreachableHint) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := h.rt.RoundTrip(r)
	var op *net.OpError
	if err != nil && errors.As(err, &op) && op.Op == "dial" {
		return nil, fmt.Errorf("%w (where only the apiserver is reachable: --through-apiserver)", err)
	}
	return resp, err
}

// proveAPIServer is a handshake's last check, before any credential is
// sent: beyond the node's IP (or ServerName), the certificate must be an
// apiserver's — valid for kubernetes.default.svc and not a node's
// (forward.ProveAPIServer) — which only a control-plane node holds. A
// kubelet's serving certificate, which the cluster CA signs for its node's
// IP too, does not pass.
func proveAPIServer(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no certificate presented")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		if err := forward.ProveAPIServer(cs.PeerCertificates[0], opts); err != nil {
			return fmt.Errorf("%w: no credential sent", err)
		}
		return nil
	}
}

func (o Options) timeout() time.Duration {
	if o.Timeout <= 0 {
		return 10 * time.Second
	}
	return o.Timeout
}

// each calls f for every target that has an address, at most maxParallel
// at once, with a client for it; results are in the targets' order. A
// target without an address, or whose client cannot be built, gets fail.
func each[T any](ctx context.Context, targets []Target, o Options, f func(context.Context, *http.Client, Target) T, fail func(Target, error) T) []T {
	out := make([]T, len(targets))
	sem := make(chan struct{}, maxParallel)
	var wg sync.WaitGroup
	for i, t := range targets {
		if t.Err != nil {
			out[i] = fail(t, t.Err)
			continue
		}
		c, err := o.client(t)
		if err != nil {
			out[i] = fail(t, err)
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(ctx, o.timeout())
			defer cancel()
			out[i] = f(ctx, c, t)
		})
	}
	wg.Wait()
	return out
}

// Get reads the JSON at u into v. A non-200 answer is an error with its
// status and body, so the operator sees what the node said (a 403 names
// the user and path RBAC refused).
func Get(ctx context.Context, c *http.Client, u string, v any) error {
	body, err := get(ctx, c, u, "application/json")
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s: %w", u, err)
	}
	return nil
}

func get(ctx context.Context, c *http.Client, u, accept string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}
