package discovery

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestCapabilities(t *testing.T) {
	c := NewCapabilities(newDoc())
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	workloads := schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "workloads"}
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	for _, tc := range []struct {
		gvr  schema.GroupVersionResource
		sub  string
		want bool
	}{
		{pods, "", true},
		{pods, "exec", true},
		{pods, "status", true},
		{pods, "scale", false},
		{workloads, "", true},
		{workloads, "status", false},
		{deployments, "scale", true},
		{deployments.GroupVersion().WithResource("replicasets"), "", false},
		{schema.GroupVersionResource{Group: "metrics.k8s.io", Version: "v1beta1", Resource: "pods"}, "", false},
		{schema.GroupVersionResource{Version: "v2", Resource: "pods"}, "", false},
	} {
		if got := c.Serves(tc.gvr, tc.sub); got != tc.want {
			t.Errorf("Serves(%v, %q) = %v, want %v", tc.gvr, tc.sub, got, tc.want)
		}
	}
	if v, ok := c.Verbs(pods, "exec"); !ok || !slices.Equal(v, []string{"create", "get"}) {
		t.Errorf("Verbs(pods, exec) = %v, %v", v, ok)
	}
	if v, ok := c.Verbs(deployments, ""); !ok || !slices.Equal(v, rwVerbs) {
		t.Errorf("Verbs(deployments) = %v, %v", v, ok)
	}
}

func TestCapabilitiesGroupVersions(t *testing.T) {
	c := NewCapabilities(newDoc())
	want := []schema.GroupVersion{
		{Version: "v1"}, {Group: "apps", Version: "v1"},
		{Group: "scheduling.k8s.io", Version: "v1"}, {Group: "scheduling.k8s.io", Version: "v1alpha2"},
	}
	if got := c.GroupVersions(); !slices.Equal(got, want) {
		t.Errorf("GroupVersions() = %v, want %v", got, want)
	}
	stale := schema.GroupVersion{Group: "metrics.k8s.io", Version: "v1beta1"}
	if got := c.StaleGroupVersions(); !slices.Equal(got, []schema.GroupVersion{stale}) {
		t.Errorf("StaleGroupVersions() = %v", got)
	}
	if c.ServesGroupVersion(stale) || c.ServesGroup("metrics.k8s.io") {
		t.Error("a Stale group-version counts as served")
	}
	if !c.ServesGroupVersion(want[3]) || !c.ServesGroup("scheduling.k8s.io") || !c.ServesGroup("") {
		t.Error("served group-version or group not reported")
	}
	if NewCapabilities(oldDoc()).ServesGroupVersion(want[3]) {
		t.Error("old server serves v1alpha2")
	}
}

func TestCapabilitiesNil(t *testing.T) {
	var c *Capabilities
	if c.Serves(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "") ||
		c.ServesGroupVersion(schema.GroupVersion{Version: "v1"}) || c.ServesGroup("") ||
		c.GroupVersions() != nil || c.StaleGroupVersions() != nil {
		t.Error("nil Capabilities serves something")
	}
	if NewCapabilities(nil).Serves(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "") {
		t.Error("capabilities of a nil doc serve something")
	}
}

func BenchmarkServes(b *testing.B) {
	c := NewCapabilities(newDoc())
	gvr := schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "workloads"}
	b.ReportAllocs()
	for b.Loop() {
		c.Serves(gvr, "status")
	}
}
