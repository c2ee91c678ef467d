package proxy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// A flood of distinct tokens evicts verdicts one at a time, the least
// recently used first: the verdict on a token in use (a controller's,
// asked between every two of the flood's) outlives any number of others.
// The cache it replaced was dropped whole at 4,096 entries, everyone's
// verdicts with it.
func TestCredentialCacheEvictsPerEntry(t *testing.T) {
	var c credentialCache
	now := time.Now()
	controller := sha256.Sum256([]byte("Bearer controller"))
	c.put(controller, credentialVerdict{status: http.StatusCreated, at: now})
	for i := range 3 * credentialCacheSize {
		c.put(sha256.Sum256(fmt.Appendf(nil, "Bearer flood-%d", i)), credentialVerdict{status: http.StatusUnauthorized, at: now})
		if _, ok := c.get(controller, now); !ok {
			t.Fatalf("the controller's verdict was lost after %d other tokens", i+1)
		}
	}
	if n := c.cache().Len(); n != credentialCacheSize {
		t.Errorf("%d verdicts kept, want the bound, %d", n, credentialCacheSize)
	}
	if _, ok := c.get(sha256.Sum256([]byte("Bearer flood-0")), now); ok {
		t.Error("the least recently used verdict was kept past the bound")
	}
	if _, ok := c.get(controller, now.Add(credentialTTL+time.Second)); ok {
		t.Error("a verdict outlived its TTL")
	}
}

// Fifty requests of one token whose verdict is not cached make one
// SelfSubjectReview, not fifty; the caller that started it leaving fails
// none of the others.
func TestCredentialCacheOneReviewPerToken(t *testing.T) {
	rig := newIdentityRig(t)
	rig.slowReviews.Store(true)
	before := rig.reviews.Load()
	const callers = 50
	var wg sync.WaitGroup
	statuses := make([]int, callers)
	for i := range callers {
		ctx := context.Background()
		if i == 0 { // the first caller leaves while the review is made
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = rig.handler.tokenVerdict(ctx, "Bearer good").status
		}()
		if i == 0 {
			time.Sleep(10 * time.Millisecond) // its review is in flight
		}
	}
	wg.Wait()
	if n := rig.reviews.Load() - before; n != 1 {
		t.Errorf("%d SelfSubjectReviews for %d concurrent requests of one token, want 1", n, callers)
	}
	for i, s := range statuses[1:] {
		if s != http.StatusCreated {
			t.Errorf("caller %d: verdict %d, want 201: another caller's leaving failed it", i+1, s)
		}
	}
}
