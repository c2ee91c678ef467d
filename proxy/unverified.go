package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/lru"

	"github.com/skewgate/skewgate/proxy/forward"
	"github.com/skewgate/skewgate/proxy/route"
)

// Answers skewgate gives itself (a 503 while the servers of a type are
// away, a 429 at a peer's in-flight limit) tell which types exist on peers
// and how the control plane fares. kube-apiserver tells an unauthenticated
// caller none of that: it answers 401 (or, to an anonymous caller, what
// its authorizer allows). So a caller skewgate did not verify itself —
// a bearer token, or nothing — hears them only once the apiserver has
// authenticated its token; an invalid token gets 401, and a caller
// without one gets the local apiserver's own answer.

// credentialTTL is how long an apiserver's verdict on a token is kept.
const credentialTTL = 10 * time.Second

// credentialCacheSize bounds the verdicts kept: a flood of distinct tokens
// evicts the least recently used ones, one at a time, never everyone's.
const credentialCacheSize = 4096

// credentialCache keeps verdicts on tokens, by their hash, briefly and
// boundedly, and makes one review at a time per token.
type credentialCache struct {
	once     sync.Once
	verdicts *lru.Cache
	// reviews: one SelfSubjectReview in flight per token, whatever number
	// of its requests arrive while it is made.
	reviews singleflight.Group
}

type credentialVerdict struct {
	status int // of the SelfSubjectReview: 201 authenticated, 401 not
	// user is who the review named (status 201), as identity headers
	// made once: what a peer gets instead of the token.
	user Caller
	at   time.Time
}

func (c *credentialCache) cache() *lru.Cache {
	c.once.Do(func() { c.verdicts = lru.New(credentialCacheSize) })
	return c.verdicts
}

func (c *credentialCache) get(key [32]byte, now time.Time) (credentialVerdict, bool) {
	got, ok := c.cache().Get(key)
	if !ok {
		return credentialVerdict{}, false
	}
	v := got.(credentialVerdict)
	if now.Sub(v.at) > credentialTTL {
		c.cache().Remove(key)
		return credentialVerdict{}, false
	}
	return v, true
}

func (c *credentialCache) put(key [32]byte, v credentialVerdict) { c.cache().Add(key, v) }

// selfReview asks nothing but who the caller is; every authenticated user
// may create one (system:basic-user, Kubernetes ≥ 1.28).
var selfReview = []byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`)

// mayTell reports whether the caller may hear skewgate's own answer. If
// not, it has answered: 401 for a token the apiserver rejects, a
// reason-free 429 or 503 when no apiserver could judge the token, else
// (no token) the local apiserver's own answer to the request.
func (h *Handler) mayTell(w http.ResponseWriter, r *http.Request, x *exchange) bool {
	if x.caller.User != nil || x.caller.Peer {
		return true
	}
	if x.token != "" {
		switch v := h.tokenVerdict(r.Context(), x.token); v.status {
		case http.StatusCreated:
			x.tokenAccepted = true
			return true
		case http.StatusUnauthorized:
			reject(w, r, apierrors.NewUnauthorized("Unauthorized"))
			return false
		default:
			h.undecided(w, r, x, v.status)
			return false
		}
	}
	x.decision = route.Decision{Route: route.Local, Servers: []string{h.members.LocalID()}, Rule: route.RuleNotResource,
		Reason: "a caller skewgate did not verify gets the apiserver's own answer, not skewgate's"}
	w.Header().Set(forward.HeaderRoute, string(route.Local))
	forward.Forward(w, r, forward.Request{Candidates: h.members.Backends(x.decision.Servers), Anonymous: true,
		SetIdentity: h.identity(x.caller, false), LongRunning: x.req.LongRunning(), Overflow: h.throttle})
	return false
}

// undecided answers a token caller no apiserver could judge (status: what
// the SelfSubjectReview got, 0 for no answer). The local apiserver is the
// one place the request must not go: what skewgate would have answered
// itself (rule 5, merged discovery without the local document, a peer at
// its limit) is exactly what the local server answers with a false 404 or
// a partial /apis — to the garbage collector's token too. The caller
// retries; it learns nothing of the servers, being unverified.
func (h *Handler) undecided(w http.ResponseWriter, r *http.Request, x *exchange, status int) {
	x.decision = route.Decision{Route: route.Unavailable, Rule: x.decision.Rule,
		Reason: fmt.Sprintf("the caller's token could not be judged (SelfSubjectReview: %d)", status)}
	w.Header().Set(forward.HeaderRoute, string(route.Unavailable))
	w.Header().Set(forward.HeaderServer, "skewgate")
	if status == http.StatusTooManyRequests {
		forward.Error(w, r, apierrors.NewTooManyRequests("the server has received too many requests and has asked us to try again later", forward.RetryAfterSeconds))
		return
	}
	err := apierrors.NewServiceUnavailable("the server is currently unable to handle the request")
	err.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: forward.RetryAfterSeconds}
	forward.Error(w, r, err)
}

// tokenVerdict asks the local apiserver (while it is away, healthy peers
// first) to authenticate a token: the status of a SelfSubjectReview made
// with it, and for 201 the user it named. A server that cannot tell (429, a
// failure, no answer, a review it did not fill in) hands the question to
// the next healthy server: they share the cluster's authenticators. It
// returns the last inconclusive status, 0 when no server answered at all.
//
// A token goes only to the local apiserver and to peers whose certificates
// proved them apiservers in the handshake (forward.ProveAPIServer), and only
// in this review: to a peer, a caller's request goes as the reviewed user.
func (h *Handler) tokenVerdict(ctx context.Context, auth string) credentialVerdict {
	key := sha256.Sum256([]byte(auth))
	if v, ok := h.tokens.get(key, time.Now()); ok {
		return v
	}
	// One review per token in flight; it runs detached from the caller
	// that started it, so a caller that leaves fails none of the others
	// waiting on the same review (it has its own 5 s bound per server).
	review := h.tokens.reviews.DoChan(string(key[:]), func() (any, error) {
		return h.review(context.WithoutCancel(ctx), auth, key), nil
	})
	select {
	case res := <-review:
		return res.Val.(credentialVerdict)
	case <-ctx.Done():
		return credentialVerdict{} // the caller left: nobody to answer
	}
}

// review asks the servers in turn (see tokenVerdict) and keeps a
// conclusive verdict.
func (h *Handler) review(ctx context.Context, auth string, key [32]byte) credentialVerdict {
	t := h.members.Table()
	ids := append([]string{h.members.LocalID()}, healthyPeers(t)...)
	if !t.Local.Healthy {
		ids = append(healthyPeers(t), h.members.LocalID())
	}
	last := credentialVerdict{}
	for _, b := range h.members.Backends(ids) {
		status, u, err := selfSubjectReview(ctx, b, auth)
		if err != nil {
			if kind, ok := forward.Blame(err); ok {
				h.forwardFailed(b.ID, kind, err)
			}
			if ctx.Err() != nil || errors.As(err, new(*forward.CallerError)) && !errors.Is(err, context.DeadlineExceeded) {
				// The caller left, or its token cannot be sent (the
				// transport refused it): no server will tell.
				return credentialVerdict{}
			}
			continue // the next server may tell
		}
		switch status {
		case http.StatusCreated, http.StatusUnauthorized:
			v := credentialVerdict{status: status, at: time.Now()}
			if u != nil {
				v.user = Caller{User: u, identity: http.Header{}}
				h.auth.rh.Names.set(v.user.identity, u)
			}
			h.tokens.put(key, v)
			return v
		}
		last.status = status
	}
	return last
}

// maxReviewBytes bounds the SelfSubjectReview read: a user's groups and
// extra fit easily.
const maxReviewBytes = 1 << 20

// selfSubjectReview makes a SelfSubjectReview with auth on b and returns
// its status code and, for 201, the user it names. A 201 that names nobody
// is an error: no server answers so, and the user is what a peer gets.
func selfSubjectReview(ctx context.Context, b *forward.Backend, auth string) (int, user.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.URL.String()+"/apis/authentication.k8s.io/v1/selfsubjectreviews", bytes.NewReader(selfReview))
	if err != nil {
		return 0, nil, fmt.Errorf("self subject review on %s: %w", b.ID, err)
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := b.Review(req)
	if err != nil {
		return 0, nil, fmt.Errorf("self subject review on %s: %w", b.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return resp.StatusCode, nil, nil
	}
	var review authenticationv1.SelfSubjectReview
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxReviewBytes)).Decode(&review); err != nil {
		return 0, nil, fmt.Errorf("self subject review on %s: %w", b.ID, err)
	}
	ui := review.Status.UserInfo
	if ui.Username == "" {
		return 0, nil, fmt.Errorf("self subject review on %s: no user named", b.ID)
	}
	u := &user.DefaultInfo{Name: ui.Username, UID: ui.UID, Groups: ui.Groups}
	if len(ui.Extra) > 0 {
		u.Extra = make(map[string][]string, len(ui.Extra))
		for k, v := range ui.Extra {
			u.Extra[k] = []string(v)
		}
	}
	return resp.StatusCode, u, nil
}
