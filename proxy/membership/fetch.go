package membership

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// maxFetchBytes caps a document fetched from an apiserver: an OpenAPI root
// is tens of KiB, and a peer must not exhaust the agent's memory.
const maxFetchBytes = 16 << 20

// FetchAll GETs path from the local server and every healthy peer at once,
// as skewgate's own identity, for documents skewgate merges (the OpenAPI
// root). The local answer is required; a peer that fails is left out.
func (m *Members) FetchAll(ctx context.Context, path string) (local []byte, peers [][]byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m.mu.Lock()
	var targets []*server
	for _, s := range m.servers {
		if st := s.status(); s.local || st.Healthy && st.Departed == nil {
			targets = append(targets, s)
		}
	}
	m.mu.Unlock()
	bodies := make([][]byte, len(targets))
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, s := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bodies[i], errs[i] = get(ctx, s.client, s.backend.URL.String()+path)
		}()
	}
	wg.Wait()
	for i, s := range targets {
		switch {
		case s.local && errs[i] != nil:
			return nil, nil, errs[i]
		case s.local:
			local = bodies[i]
		case errs[i] == nil:
			peers = append(peers, bodies[i])
		}
	}
	return local, peers, nil
}

func get(ctx context.Context, c *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxFetchBytes+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if len(body) > maxFetchBytes {
		return nil, fmt.Errorf("GET %s: more than %d bytes", url, maxFetchBytes)
	}
	return body, nil
}
