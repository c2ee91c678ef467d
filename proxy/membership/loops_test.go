package membership

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestDiffGroupVersions(t *testing.T) {
	gv := func(g, v string) schema.GroupVersion { return schema.GroupVersion{Group: g, Version: v} }
	before := []schema.GroupVersion{gv("", "v1"), gv("apps", "v1"), gv("scheduling.k8s.io", "v1alpha1")}
	after := []schema.GroupVersion{gv("", "v1"), gv("apps", "v1"), gv("scheduling.k8s.io", "v1alpha2")}
	appeared, vanished := diffGroupVersions(before, after)
	if !slices.Equal(appeared, []string{"scheduling.k8s.io/v1alpha2"}) || !slices.Equal(vanished, []string{"scheduling.k8s.io/v1alpha1"}) {
		t.Errorf("appeared %v vanished %v", appeared, vanished)
	}
	if a, v := diffGroupVersions(after, after); a != nil || v != nil {
		t.Errorf("no change reported as appeared %v vanished %v", a, v)
	}
}
