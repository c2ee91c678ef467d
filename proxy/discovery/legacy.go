package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints"
	clientdiscovery "k8s.io/client-go/discovery"
)

// legacy converts an unaggregated /api (APIVersions) or /apis (APIGroupList)
// body into the aggregated shape, fetching each group-version's resources.
// Servers old enough to need this have at most a few dozen group-versions, so
// the requests are sequential.
func (f *HTTPFetcher) legacy(ctx context.Context, path string, body []byte) ([]apidiscoveryv2.APIGroupDiscovery, error) {
	if path == "/api" {
		return f.legacyCore(ctx, body)
	}
	return f.legacyGroups(ctx, body)
}

func (f *HTTPFetcher) legacyCore(ctx context.Context, body []byte) ([]apidiscoveryv2.APIGroupDiscovery, error) {
	var versions metav1.APIVersions
	if err := json.Unmarshal(body, &versions); err != nil {
		return nil, fmt.Errorf("decode APIVersions: %w", err)
	}
	if err := checkKind(versions.TypeMeta, metav1.Unversioned, "APIVersions"); err != nil {
		return nil, err
	}
	group := metav1.APIGroup{PreferredVersion: metav1.GroupVersionForDiscovery{}}
	for _, v := range versions.Versions {
		group.Versions = append(group.Versions, metav1.GroupVersionForDiscovery{GroupVersion: v, Version: v})
	}
	return f.legacyGroup(ctx, group)
}

func (f *HTTPFetcher) legacyGroups(ctx context.Context, body []byte) ([]apidiscoveryv2.APIGroupDiscovery, error) {
	var list metav1.APIGroupList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("decode APIGroupList: %w", err)
	}
	if err := checkKind(list.TypeMeta, metav1.Unversioned, "APIGroupList"); err != nil {
		return nil, err
	}
	var out []apidiscoveryv2.APIGroupDiscovery
	for _, g := range list.Groups {
		if g.Name == "" {
			continue // the core group is not a named group; validate would reject it
		}
		groups, err := f.legacyGroup(ctx, g)
		if err != nil {
			return nil, err
		}
		out = append(out, groups...)
	}
	return out, nil
}

// legacyGroup returns the group with the versions its server really serves,
// or nothing when it serves none of them.
func (f *HTTPFetcher) legacyGroup(ctx context.Context, g metav1.APIGroup) ([]apidiscoveryv2.APIGroupDiscovery, error) {
	out := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g.Name}}
	for _, v := range g.Versions {
		gv := schema.GroupVersion{Group: g.Name, Version: v.Version}
		version, served, err := f.legacyVersion(ctx, gv)
		if err != nil {
			return nil, err
		}
		if served {
			out.Versions = append(out.Versions, version)
		}
	}
	if len(out.Versions) == 0 {
		return nil, nil
	}
	return []apidiscoveryv2.APIGroupDiscovery{out}, nil
}

// legacyVersion fetches one group-version's APIResourceList. A 404 means the
// server does not serve it even though its group list said so (seen after
// restarts): not served. Any other failure to describe it is what aggregated
// discovery calls Stale, typically an unavailable APIService. Only transport
// errors fail the whole fetch, since then the server itself is in doubt.
func (f *HTTPFetcher) legacyVersion(ctx context.Context, gv schema.GroupVersion) (v apidiscoveryv2.APIVersionDiscovery, served bool, err error) {
	stale := apidiscoveryv2.APIVersionDiscovery{Version: gv.Version, Freshness: apidiscoveryv2.DiscoveryFreshnessStale}
	if (gv.Group != "" && !validPathSegment(gv.Group)) || !validPathSegment(gv.Version) {
		return v, false, nil
	}
	resp, err := f.get(ctx, legacyPath(gv), clientdiscovery.AcceptV1, "")
	if err != nil {
		return v, false, fmt.Errorf("fetch %s%s: %w", f.BaseURL, legacyPath(gv), err)
	}
	defer closeBody(resp)
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return v, false, nil
	default:
		return stale, true, nil
	}
	resources, err := f.decodeResourceList(resp, gv)
	if err != nil {
		return stale, true, nil
	}
	return apidiscoveryv2.APIVersionDiscovery{
		Version:   gv.Version,
		Resources: resources,
		Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
	}, true, nil
}

func (f *HTTPFetcher) decodeResourceList(resp *http.Response, gv schema.GroupVersion) ([]apidiscoveryv2.APIResourceDiscovery, error) {
	body, err := readBody(resp.Body, f.maxBody())
	if err != nil {
		return nil, err
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("decode APIResourceList: %w", err)
	}
	if list.GroupVersion != gv.String() {
		return nil, fmt.Errorf("APIResourceList for %q, want %q", list.GroupVersion, gv.String())
	}
	// The apiserver's own conversion, as used for its aggregated discovery.
	return endpoints.ConvertGroupVersionIntoToDiscovery(list.APIResources)
}

func legacyPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "/api/" + gv.Version
	}
	return "/apis/" + gv.Group + "/" + gv.Version
}

// validPathSegment keeps a lying group list from steering requests to other
// paths of the server.
func validPathSegment(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/?#%\\")
}
