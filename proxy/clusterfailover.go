package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"

	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/proxy/forward"
	"github.com/skewgate/skewgate/proxy/membership"
)

// skewgate reads the cluster (its switch, the apiservers' EndpointSlices
// and Leases, the identity header names) and writes the upgrade signal
// through its own apiserver — and through a peer while that one is away.
// Otherwise the event skewgate exists for, the local apiserver's restart,
// would leave its informers blind: a kubectl patch of the switch or of
// the rollback grace would not reach the node until the local apiserver
// is back and the reflectors' back-off (up to 30 s) has passed, and a
// crash-looping local apiserver would keep the node from hearing
// `steering: off` at all.

// failoverTransport sends each request to the local apiserver while
// membership finds it healthy, else first to healthy peers that prove
// themselves apiservers (membership.PeerConfigs); a server that cannot be
// reached, or refuses the request as a shutting-down apiserver does
// (forward.NotTaken), hands it to the next. A request already sent whose
// answer was lost is retried only if it is a read.
type failoverTransport struct {
	local   *rest.Config
	members *membership.Members

	mu         sync.Mutex
	transports map[string]http.RoundTripper // by rest.Config.Host
}

// failoverConfig is rc (toward the local apiserver) through a
// failoverTransport.
func failoverConfig(rc *rest.Config, m *membership.Members) *rest.Config {
	rt := &failoverTransport{local: rc, members: m, transports: map[string]http.RoundTripper{}}
	return &rest.Config{Host: rc.Host, APIPath: rc.APIPath, UserAgent: rc.UserAgent, QPS: rc.QPS, Burst: rc.Burst,
		Timeout: rc.Timeout, ContentConfig: rc.ContentConfig, Transport: rt}
}

func (t *failoverTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	candidates := t.candidates()
	var errs []error
	for i, c := range candidates {
		last := i == len(candidates)-1
		r, err := t.retarget(req, c, i > 0)
		if err != nil {
			errs = append(errs, err)
			break
		}
		rt, err := t.transport(c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		resp, err := rt.RoundTrip(r)
		switch {
		case err != nil && !last && (dialFailed(err) || req.Method == http.MethodGet):
			errs = append(errs, fmt.Errorf("%s: %w", c.Host, err))
			continue
		case err != nil:
			return nil, errors.Join(append(errs, fmt.Errorf("%s: %w", c.Host, err))...)
		case !last && forward.NotTaken(resp):
			resp.Body.Close()
			errs = append(errs, fmt.Errorf("%s: shutting down", c.Host))
			continue
		}
		return resp, nil
	}
	return nil, errors.Join(errs...)
}

// candidates is the local server then the proven peers while the local
// one is healthy (or not probed yet), else the peers first.
func (t *failoverTransport) candidates() []*rest.Config {
	statuses := t.members.Statuses()
	peers := membership.PeerConfigs(t.local, statuses)
	for _, st := range statuses {
		if st.Local && !st.Healthy && !st.LastProbe.IsZero() {
			return append(peers, t.local)
		}
	}
	return append([]*rest.Config{t.local}, peers...)
}

// retarget is req toward c's host; again says a body must be read anew.
func (t *failoverTransport) retarget(req *http.Request, c *rest.Config, again bool) (*http.Request, error) {
	u, err := url.Parse(c.Host)
	if err != nil {
		return nil, err
	}
	r := req.Clone(req.Context())
	r.URL.Scheme, r.URL.Host, r.Host = u.Scheme, u.Host, ""
	if again && req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return nil, errors.New("the request's body cannot be sent again")
		}
		if r.Body, err = req.GetBody(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// transport is c's round tripper (its TLS, server name and token), one
// per host, kept.
func (t *failoverTransport) transport(c *rest.Config) (http.RoundTripper, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if rt, ok := t.transports[c.Host]; ok {
		return rt, nil
	}
	rt, err := rest.TransportFor(c)
	if err != nil {
		return nil, err
	}
	t.transports[c.Host] = rt
	return rt, nil
}

// dialFailed reports whether err is a failure to connect: nothing was
// sent.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && !errors.Is(err, io.EOF)
}
