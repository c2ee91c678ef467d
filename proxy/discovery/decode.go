package discovery

import (
	"encoding/json"
	"fmt"
	"mime"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apidiscoveryv2beta1 "k8s.io/api/apidiscovery/v2beta1"
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

// decodeAggregated decodes an aggregated discovery body into v2, checking
// that the body is the kind its content type claimed.
func decodeAggregated(format Format, body []byte) ([]apidiscoveryv2.APIGroupDiscovery, error) {
	if format == FormatV2Beta1 {
		return decodeV2Beta1(body)
	}
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("decode %s: %w", listKind, err)
	}
	if err := checkKind(list.TypeMeta, apidiscoveryv2.SchemeGroupVersion, listKind); err != nil {
		return nil, err
	}
	return list.Items, nil
}

func decodeV2Beta1(body []byte) ([]apidiscoveryv2.APIGroupDiscovery, error) {
	var in apidiscoveryv2beta1.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("decode v2beta1 %s: %w", listKind, err)
	}
	if err := checkKind(in.TypeMeta, apidiscoveryv2beta1.SchemeGroupVersion, listKind); err != nil {
		return nil, err
	}
	var out apidiscoveryv2.APIGroupDiscoveryList
	if err := codecScheme.Convert(&in, &out, nil); err != nil {
		return nil, fmt.Errorf("convert v2beta1 discovery: %w", err)
	}
	return out.Items, nil
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
