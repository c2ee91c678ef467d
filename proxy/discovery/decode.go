package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const listKind = "APIGroupDiscoveryList"

// formatOf tells the discovery format from a response's Content-Type. Only
// JSON is accepted because only JSON is asked for.
func formatOf(contentType string) (Format, error) {
	mediaType, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return "", fmt.Errorf("content type %q: %w", contentType, err)
	}
	if mediaType != "application/json" {
		return "", fmt.Errorf("unexpected content type %q", contentType)
	}
	if params["g"] == "" && params["v"] == "" && params["as"] == "" {
		return FormatLegacy, nil
	}
	if params["g"] != apidiscoveryv2.SchemeGroupVersion.Group || params["as"] != listKind {
		return "", fmt.Errorf("unexpected content type %q", contentType)
	}
	switch params["v"] {
	case "v2":
		return FormatV2, nil
	case "v2beta1":
		return FormatV2Beta1, nil
	}
	return "", fmt.Errorf("unexpected content type %q", contentType)
}

// apidiscoveryV2Beta1 is the aggregated discovery version that servers
// before 1.33 answer with (1.33 and 1.34 only with the gate
// AggregatedDiscoveryRemoveBetaType off; 1.35 locks it on, so no supported
// server sends it). Its Go types are gone from k8s.io/api v0.38,
// and skewgate does not need them: the v2beta1 and v2 type definitions are
// identical field for field (JSON names, omitempty, enums), so a v2beta1 body
// decodes into the v2 types as the apiserver's generated conversion, a plain
// field copy, would have produced them.
var apidiscoveryV2Beta1 = schema.GroupVersion{Group: apidiscoveryv2.SchemeGroupVersion.Group, Version: "v2beta1"}

// decodeAggregated decodes an aggregated discovery body into v2, checking
// that the body is the kind and version its content type claimed.
func decodeAggregated(format Format, body []byte) ([]apidiscoveryv2.APIGroupDiscovery, error) {
	want := apidiscoveryv2.SchemeGroupVersion
	if format == FormatV2Beta1 {
		want = apidiscoveryV2Beta1
	}
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("decode %s %s: %w", want.Version, listKind, err)
	}
	if err := checkKind(list.TypeMeta, want, listKind); err != nil {
		return nil, err
	}
	if format == FormatV2Beta1 {
		asV2(&list)
	}
	return list.Items, nil
}

// asV2 relabels a v2beta1 list decoded into the v2 types as v2, so no
// v2beta1 apiVersion survives into a Doc; items' TypeMeta is cleared as the
// apiserver's conversion cleared it (servers do not set it anyway).
func asV2(list *apidiscoveryv2.APIGroupDiscoveryList) {
	list.APIVersion = apidiscoveryv2.SchemeGroupVersion.String()
	for i := range list.Items {
		list.Items[i].TypeMeta = metav1.TypeMeta{}
	}
}

func checkKind(tm metav1.TypeMeta, gv schema.GroupVersion, kind string) error {
	if tm.Kind != kind || tm.APIVersion != gv.String() {
		return fmt.Errorf("body is %q %q, want %q %q", tm.APIVersion, tm.Kind, gv.String(), kind)
	}
	return nil
}

// validate rejects documents that would break the merge and the index: they
// key groups, versions and resources by name, so names must be unique and
// non-empty, and the core group (name "") belongs to /api only.
func validate(path string, groups []apidiscoveryv2.APIGroupDiscovery) error {
	seen := make(map[string]bool, len(groups))
	for _, g := range groups {
		if (path == "/api") != (g.Name == "") {
			return fmt.Errorf("group %q does not belong in %s", g.Name, path)
		}
		if seen[g.Name] {
			return fmt.Errorf("group %q listed twice", g.Name)
		}
		seen[g.Name] = true
		if err := validateVersions(g); err != nil {
			return fmt.Errorf("group %q: %w", g.Name, err)
		}
	}
	return nil
}

func validateVersions(g apidiscoveryv2.APIGroupDiscovery) error {
	seen := make(map[string]bool, len(g.Versions))
	for _, v := range g.Versions {
		if v.Version == "" || seen[v.Version] {
			return fmt.Errorf("empty or repeated version %q", v.Version)
		}
		seen[v.Version] = true
		if err := validateResources(v.Resources); err != nil {
			return fmt.Errorf("version %q: %w", v.Version, err)
		}
	}
	return nil
}

func validateResources(resources []apidiscoveryv2.APIResourceDiscovery) error {
	seen := make(map[string]bool, len(resources))
	for _, r := range resources {
		if r.Resource == "" || seen[r.Resource] {
			return fmt.Errorf("empty or repeated resource %q", r.Resource)
		}
		seen[r.Resource] = true
	}
	return nil
}

// ErrNotAggregated is returned (wrapped) by Decode for an answer in legacy
// discovery, which lists group-versions but not their resources.
var ErrNotAggregated = errors.New("not aggregated discovery")

// Decode reads an aggregated discovery answer of path ("/api" or "/apis"),
// v2 or v2beta1 as contentType says, checked as a fetched document is: the
// reader's side of what a server, or skewgate's merged view, answered.
func Decode(path, contentType string, body []byte) ([]apidiscoveryv2.APIGroupDiscovery, error) {
	format, err := formatOf(contentType)
	if err != nil {
		return nil, err
	}
	if format == FormatLegacy {
		return nil, fmt.Errorf("%s: %w", path, ErrNotAggregated)
	}
	items, err := decodeAggregated(format, body)
	if err != nil {
		return nil, err
	}
	return items, validate(path, items)
}
