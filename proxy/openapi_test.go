package proxy

import (
	"context"
	"testing"

	"github.com/skewgate/skewgate/proxy/route"
)

// The merged OpenAPI root is fetched from every server once per routing
// table (and TTL), not once per request.
func TestOpenAPIRootCached(t *testing.T) {
	var c openAPICache
	fetches := 0
	fetch := func(context.Context) ([]byte, error) { fetches++; return []byte(`{"paths":{}}`), nil }
	t1, t2 := &route.Table{}, &route.Table{}
	for range 5 {
		if _, etag, err := c.get(context.Background(), t1, fetch); err != nil || etag == "" {
			t.Fatalf("get: %q %v", etag, err)
		}
	}
	if fetches != 1 {
		t.Errorf("5 requests under one table fetched %d times, want 1", fetches)
	}
	c.get(context.Background(), t2, fetch)
	if fetches != 2 {
		t.Errorf("a new routing table did not refetch (%d fetches)", fetches)
	}
}
