package discovery

import (
	"encoding/json"
	"testing"
)

func TestMergeOpenAPIRoots(t *testing.T) {
	local := []byte(`{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=L"},"apis/scheduling.k8s.io/v1":{"serverRelativeURL":"/openapi/v3/apis/scheduling.k8s.io/v1?hash=L"}}}`)
	peer := []byte(`{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=P"},"apis/scheduling.k8s.io/v1alpha2":{"serverRelativeURL":"/openapi/v3/apis/scheduling.k8s.io/v1alpha2?hash=P"}}}`)
	roots := []*OpenAPIRoot{}
	for _, d := range [][]byte{local, peer} {
		r, err := ParseOpenAPIRoot(d)
		if err != nil {
			t.Fatal(err)
		}
		roots = append(roots, r)
	}
	out := MergeOpenAPIRoots(roots...)
	var got struct {
		Paths map[string]struct {
			URL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"api/v1":                          "/openapi/v3/api/v1?hash=L",
		"apis/scheduling.k8s.io/v1":       "/openapi/v3/apis/scheduling.k8s.io/v1?hash=L",
		"apis/scheduling.k8s.io/v1alpha2": "/openapi/v3/apis/scheduling.k8s.io/v1alpha2?hash=P",
	}
	if len(got.Paths) != len(want) {
		t.Fatalf("paths = %v", got.Paths)
	}
	for p, u := range want {
		if got.Paths[p].URL != u {
			t.Errorf("%s = %q, want %q", p, got.Paths[p].URL, u)
		}
	}
	if again := MergeOpenAPIRoots(roots...); string(again) != string(out) {
		t.Error("merge is not deterministic")
	}
	for _, bad := range [][]byte{[]byte(`<html>`), []byte(`{"openapi":"3.0"}`)} {
		if _, err := ParseOpenAPIRoot(bad); err == nil {
			t.Errorf("parsed a lying peer's %q as an OpenAPI root", bad)
		}
	}
}
