package drill

import (
	"slices"
	"testing"
)

func TestGCDeleted(t *testing.T) {
	pairs := []pair{
		{"gc-owner-0", "gc-dep-0"},   // both there: kept
		{"gc-owner-1", "gc-dep-1"},   // dependent gone, owner there: lost
		{"gc-owner-2", "gc-dep-2"},   // both gone: the owner was deleted
		{"gc-owner-11", "gc-dep-11"}, // dependent gone, owner there: lost
		{"gc-owner-3", "gc-dep-3"},   // dependent gone, only a configmap named like the owner
		{"gc-owner-4", "gc-dep-4"},   // dependent gone, owner of that name in another namespace
	}
	keys := []string{
		"/registry/scheduling.k8s.io/workloads/drill-gc/gc-owner-0",
		"/registry/configmaps/drill-gc/gc-dep-0",
		"/registry/scheduling.k8s.io/workloads/drill-gc/gc-owner-1",
		"/registry/certificates.k8s.io/podcertificaterequests/drill-gc/gc-owner-11",
		"/registry/configmaps/drill-gc/gc-owner-3",
		"/registry/scheduling.k8s.io/workloads/other/gc-owner-4",
		"/registry/configmaps/drill-gc/gc-dep-2x",
	}
	got := gcDeleted(pairs, keys)
	if want := []string{"gc-dep-1", "gc-dep-11"}; !slices.Equal(got, want) {
		t.Errorf("gcDeleted = %q, want %q", got, want)
	}
	if got := gcDeleted(pairs, nil); len(got) != 0 {
		t.Errorf("no keys: %q, want none (no owner exists)", got)
	}
}
