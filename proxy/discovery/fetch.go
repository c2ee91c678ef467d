package discovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	clientdiscovery "k8s.io/client-go/discovery"
)

// DefaultMaxBodyBytes caps one discovery response when HTTPFetcher.MaxBodyBytes
// is zero. A 1.36 /apis document is a few hundred KiB; a peer that sends more
// than this is broken or lying, and must not exhaust the agent's memory.
const DefaultMaxBodyBytes = 16 << 20

// ErrBodyTooLarge is returned (wrapped) when a response exceeds the body cap.
var ErrBodyTooLarge = errors.New("response body too large")

// acceptV2Beta1 is client-go's old constant, gone from client-go since
// servers ≥ 1.35 no longer serve v2beta1; 1.26–1.32 servers still do.
const acceptV2Beta1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"

// acceptLocal lists the formats in order of preference, so one round trip
// falls back from v2 to v2beta1 to legacy. profile=nopeer comes first: a 1.36
// server otherwise answers with its merged peer view and looks capable of
// everything its peers serve. Servers that predate the profile skip that
// clause and answer the next, which is local on them anyway.
const acceptLocal = clientdiscovery.AcceptV2NoPeer + "," + clientdiscovery.AcceptV2 + "," +
	acceptV2Beta1 + "," + clientdiscovery.AcceptV1

// Fetcher reads one server's local discovery. It is the Store's test seam.
type Fetcher interface {
	// Fetch returns the server's discovery; prev (may be nil) is the last
	// doc it returned, used for conditional requests. It returns prev itself
	// when nothing changed.
	Fetch(ctx context.Context, prev *Doc) (*Doc, error)
}

// HTTPFetcher fetches local discovery from one kube-apiserver.
type HTTPFetcher struct {
	// Client is configured for the server's TLS (mTLS) already.
	Client *http.Client
	// BaseURL is the server's URL without a trailing slash, e.g.
	// "https://198.18.0.2:6443".
	BaseURL string
	// MaxBodyBytes caps each response; zero means DefaultMaxBodyBytes.
	MaxBodyBytes int64
}

// Fetch reads /api and /apis, sending If-None-Match with prev's ETags; an
// endpoint answered 304 keeps prev's content. It returns prev itself when
// both endpoints are unchanged. Any transport error, unexpected status,
// unexpected content type, oversized or malformed body of /api or /apis is
// returned wrapped with the URL; the caller should keep its last-known-good
// doc. Legacy per-group-version failures do not fail the fetch: see
// legacyVersion.
func (f *HTTPFetcher) Fetch(ctx context.Context, prev *Doc) (*Doc, error) {
	var prevDoc Doc
	if prev != nil {
		prevDoc = *prev
	}
	api, apiSame, err := f.fetchEndpoint(ctx, "/api", prevDoc.API)
	if err != nil {
		return nil, err
	}
	apis, apisSame, err := f.fetchEndpoint(ctx, "/apis", prevDoc.APIs)
	if err != nil {
		return nil, err
	}
	if prev != nil && apiSame && apisSame {
		return prev, nil
	}
	return &Doc{API: api, APIs: apis}, nil
}

// fetchEndpoint reads one discovery endpoint. notModified reports a 304 to
// our If-None-Match, in which case prev is returned.
func (f *HTTPFetcher) fetchEndpoint(ctx context.Context, path string, prev Endpoint) (ep Endpoint, notModified bool, err error) {
	url := f.BaseURL + path
	resp, err := f.get(ctx, path, acceptLocal, prev.ETag)
	if err != nil {
		return Endpoint{}, false, fmt.Errorf("fetch %s: %w", url, err)
	}
	defer closeBody(resp)
	if resp.StatusCode == http.StatusNotModified && prev.ETag != "" {
		return prev, true, nil
	}
	if resp.StatusCode != http.StatusOK {
		return Endpoint{}, false, fmt.Errorf("fetch %s: unexpected status %d", url, resp.StatusCode)
	}
	ep, err = f.decodeEndpoint(ctx, path, resp)
	if err != nil {
		return Endpoint{}, false, fmt.Errorf("fetch %s: %w", url, err)
	}
	return ep, false, nil
}

func (f *HTTPFetcher) decodeEndpoint(ctx context.Context, path string, resp *http.Response) (Endpoint, error) {
	format, err := formatOf(resp.Header.Get("Content-Type"))
	if err != nil {
		return Endpoint{}, err
	}
	body, err := readBody(resp.Body, f.maxBody())
	if err != nil {
		return Endpoint{}, err
	}
	var items []apidiscoveryv2.APIGroupDiscovery
	if format == FormatLegacy {
		items, err = f.legacy(ctx, path, body)
	} else {
		items, err = decodeAggregated(format, body)
	}
	if err != nil {
		return Endpoint{}, err
	}
	if err := validate(path, items); err != nil {
		return Endpoint{}, err
	}
	return Endpoint{Items: items, ETag: resp.Header.Get("ETag"), Format: format}, nil
}

func (f *HTTPFetcher) get(ctx context.Context, path, accept, etag string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.BaseURL+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	return f.Client.Do(req)
}

func (f *HTTPFetcher) maxBody() int64 {
	if f.MaxBodyBytes > 0 {
		return f.MaxBodyBytes
	}
	return DefaultMaxBodyBytes
}

// readBody reads at most limit bytes and fails rather than truncating, since
// a truncated document would silently drop capabilities.
func readBody(r io.Reader, limit int64) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("read body: %w (limit %d bytes)", ErrBodyTooLarge, limit)
	}
	return body, nil
}

// closeBody drains a little before closing so the keep-alive connection can
// be reused, without reading an endless body from a broken peer.
func closeBody(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}
