package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/proxy/membership"
)

// DefaultDecisionTTL is how long an apiserver's positive decision (a
// token authenticated, an access allowed) answers for it while no
// apiserver answers at all: long enough to scrape through a local
// apiserver's restart, short enough that a revoked token or binding
// stops working soon after the apiservers are back.
const DefaultDecisionTTL = 5 * time.Minute

// reviewAttemptTimeout bounds one apiserver's answer to one review, so a
// hung server leaves time to ask the next one within the webhook's own
// timeout (10 s).
const reviewAttemptTimeout = 3 * time.Second

// maxReviewBody bounds a review's answer read into memory.
const maxReviewBody = 1 << 20

// errNoReviewer means no apiserver answered a review and no recent
// positive decision stands in.
var errNoReviewer = errors.New("no apiserver answered the review")

// reviewTransport carries the TokenReviews and SubjectAccessReviews of the
// secure admin listener. It asks the primary apiserver (the node's own),
// then each of peers() in order until one answers; a server that cannot be
// reached, or answers 5xx or 429 (shutting down, overloaded), is skipped,
// and so is one that refuses skewgate the review itself (401, 403) while
// another server may still take it.
// It remembers the positive answers (keyed by a hash of the review, which
// holds the token or the user and the attributes asked about) and, when
// none answers, replays one younger than ttl. A negative answer is never
// remembered and erases the positive one for the same review, so a denial
// is never replayed as an allowance.
type reviewTransport struct {
	primary *rest.Config
	peers   func() []*rest.Config
	ttl     time.Duration
	now     func() time.Time

	mu         sync.Mutex
	transports map[string]http.RoundTripper // by rest.Config.Host
	decisions  map[[sha256.Size]byte]decision
}

type decision struct {
	body []byte
	at   time.Time
}

func newReviewTransport(primary *rest.Config, peers func() []*rest.Config, ttl time.Duration, now func() time.Time) *reviewTransport {
	if ttl <= 0 {
		ttl = DefaultDecisionTTL
	}
	if now == nil {
		now = time.Now
	}
	return &reviewTransport{primary: primary, peers: peers, ttl: ttl, now: now,
		transports: map[string]http.RoundTripper{}, decisions: map[[sha256.Size]byte]decision{}}
}

// clientConfig is the rest.Config the review clients use: every request
// goes through rt, which picks the apiserver.
func (rt *reviewTransport) clientConfig() *rest.Config {
	p := rt.primary
	return &rest.Config{Host: p.Host, APIPath: p.APIPath, UserAgent: p.UserAgent, QPS: p.QPS, Burst: p.Burst, Transport: rt}
}

// RoundTrip implements http.RoundTripper. It returns an error wrapping
// errNoReviewer when no apiserver answered and nothing recent stands in.
func (rt *reviewTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read review: %w", err)
		}
	}
	key := sha256.Sum256(append([]byte(req.Method+" "+req.URL.Path+"\n"), body...))
	var errs []error
	var refusal *answer
	for _, c := range rt.candidates() {
		resp, err := rt.ask(req, body, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if refused(resp) {
			// skewgate's own credentials refused: its RBAC missing, or
			// an apiserver that started a moment ago and has not read
			// it yet (seen in kubeadm's upgrade). The next server is
			// asked; if every one refuses, that is the answer.
			if refusal == nil {
				refusal = &resp
			}
			continue
		}
		rt.note(key, resp)
		return resp.response(req), nil
	}
	if refusal != nil {
		rt.note(key, *refusal)
		return refusal.response(req), nil
	}
	if d, ok := rt.recent(key); ok {
		return answer{code: http.StatusCreated, body: d.body}.response(req), nil
	}
	return nil, fmt.Errorf("%w: %w", errNoReviewer, errors.Join(errs...))
}

// refused is an answer that refuses the review's own creation: skewgate
// not authenticated, or not allowed to create reviews.
func refused(a answer) bool {
	return a.code == http.StatusUnauthorized || a.code == http.StatusForbidden
}

// candidates is the primary, then the peers, each host once.
func (rt *reviewTransport) candidates() []*rest.Config {
	out := []*rest.Config{rt.primary}
	seen := map[string]bool{rt.primary.Host: true}
	if rt.peers == nil {
		return out
	}
	for _, c := range rt.peers() {
		if c != nil && !seen[c.Host] {
			seen[c.Host] = true
			out = append(out, c)
		}
	}
	return out
}

// answer is an apiserver's review answer, read whole.
type answer struct {
	code   int
	header http.Header
	body   []byte
}

func (a answer) response(req *http.Request) *http.Response {
	h := a.header.Clone()
	if h == nil {
		h = http.Header{"Content-Type": {"application/json"}}
	}
	return &http.Response{StatusCode: a.code, Status: fmt.Sprintf("%d %s", a.code, http.StatusText(a.code)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, ContentLength: int64(len(a.body)),
		Body: io.NopCloser(bytes.NewReader(a.body)), Request: req}
}

// ask sends the review to the apiserver c names. An unreachable server,
// or one answering 5xx or 429, is an error: the next one is asked.
func (rt *reviewTransport) ask(req *http.Request, body []byte, c *rest.Config) (answer, error) {
	tr, err := rt.transport(c)
	if err != nil {
		return answer{}, err
	}
	host, err := url.Parse(c.Host)
	if err != nil {
		return answer{}, fmt.Errorf("apiserver %q: %w", c.Host, err)
	}
	ctx, cancel := context.WithTimeout(req.Context(), reviewAttemptTimeout)
	defer cancel()
	out := req.Clone(ctx)
	out.URL.Scheme, out.URL.Host, out.Host = host.Scheme, host.Host, ""
	out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	resp, err := tr.RoundTrip(out)
	if err != nil {
		return answer{}, fmt.Errorf("apiserver %s: %w", host.Host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxReviewBody))
	if err != nil {
		return answer{}, fmt.Errorf("apiserver %s: read answer: %w", host.Host, err)
	}
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		return answer{}, fmt.Errorf("apiserver %s: %s", host.Host, resp.Status)
	}
	return answer{code: resp.StatusCode, header: resp.Header, body: b}, nil
}

// transport is the round tripper (TLS, credentials) toward c, built once
// per host.
func (rt *reviewTransport) transport(c *rest.Config) (http.RoundTripper, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if tr, ok := rt.transports[c.Host]; ok {
		return tr, nil
	}
	tr, err := rest.TransportFor(c)
	if err != nil {
		return nil, fmt.Errorf("apiserver %s: %w", c.Host, err)
	}
	rt.transports[c.Host] = tr
	return tr, nil
}

// note remembers a positive answer, without the review's spec (a token
// is not kept), and forgets the review's earlier one on any other answer.
func (rt *reviewTransport) note(key [sha256.Size]byte, a answer) {
	keep, ok := positive(a)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	now := rt.now()
	for k, d := range rt.decisions {
		if now.Sub(d.at) >= rt.ttl {
			delete(rt.decisions, k)
		}
	}
	if !ok {
		delete(rt.decisions, key)
		return
	}
	rt.decisions[key] = decision{body: keep, at: now}
}

// recent is the positive decision for key younger than the TTL.
func (rt *reviewTransport) recent(key [sha256.Size]byte) (decision, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	d, ok := rt.decisions[key]
	if !ok || rt.now().Sub(d.at) >= rt.ttl {
		return decision{}, false
	}
	return d, true
}

// positive returns a's body without its spec when a is a 2xx review that
// authenticated a token or allowed (and did not deny) an access.
func positive(a answer) ([]byte, bool) {
	if a.code < 200 || a.code > 299 {
		return nil, false
	}
	var review struct {
		Status struct {
			Authenticated bool `json:"authenticated"`
			Allowed       bool `json:"allowed"`
			Denied        bool `json:"denied"`
		} `json:"status"`
	}
	if json.Unmarshal(a.body, &review) != nil {
		return nil, false
	}
	if st := review.Status; !st.Authenticated && (!st.Allowed || st.Denied) {
		return nil, false
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(a.body, &fields) != nil {
		return nil, false
	}
	delete(fields, "spec")
	b, err := json.Marshal(fields)
	return b, err == nil
}

// PeerDelegates returns, each time it is called, rc toward every healthy
// peer apiserver m knows that proves itself one (membership.PeerConfigs),
// for the secure admin listener to ask when its own apiserver does not
// answer.
func PeerDelegates(rc *rest.Config, m *membership.Members) func() []*rest.Config {
	return func() []*rest.Config { return membership.PeerConfigs(rc, m.Statuses()) }
}
