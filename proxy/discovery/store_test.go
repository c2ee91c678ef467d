package discovery

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	clientdiscovery "k8s.io/client-go/discovery"
)

// scriptedFetcher returns its docs and errors in turn; nil doc means "prev".
type scriptedFetcher struct {
	docs []*Doc
	errs []error
	n    int
}

func (f *scriptedFetcher) Fetch(_ context.Context, prev *Doc) (*Doc, error) {
	i := f.n
	f.n++
	if f.errs[i] != nil {
		return nil, f.errs[i]
	}
	if f.docs[i] == nil {
		return prev, nil
	}
	return f.docs[i], nil
}

var workloads = schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "workloads"}

func TestStoreRefresh(t *testing.T) {
	s := NewStore()
	if len(s.Snapshot().Merged.APIs().Items) != 0 {
		t.Fatal("new store has a merged view")
	}
	boom := errors.New("boom")
	f := &scriptedFetcher{docs: []*Doc{newDoc(), nil, nil}, errs: []error{nil, nil, boom}}
	s.SetHealthy([]string{"b"})
	if err := s.Refresh(context.Background(), "b", f); err != nil {
		t.Fatal(err)
	}
	first := s.Snapshot()
	if !first.Capabilities("b").Serves(workloads, "") || !slices.Equal(first.Merged.Servers(), []string{"b"}) {
		t.Fatal("refresh not reflected")
	}
	if err := s.Refresh(context.Background(), "b", f); err != nil { // 304
		t.Fatal(err)
	}
	second := s.Snapshot()
	if second.Merged != first.Merged || second.Capabilities("b") != first.Capabilities("b") {
		t.Error("an unchanged doc recomputed the merged view or capabilities")
	}
	if second.Servers["b"].FetchedAt.Before(first.Servers["b"].FetchedAt) {
		t.Error("FetchedAt went back")
	}
	if err := s.Refresh(context.Background(), "b", f); !errors.Is(err, boom) {
		t.Fatalf("Refresh error %v", err)
	}
	third := s.Snapshot()
	if !errors.Is(third.Servers["b"].Err, boom) || !third.Capabilities("b").Serves(workloads, "") {
		t.Error("an error did not keep the last-known-good doc and record the error")
	}
}

func TestStoreHealthyAndServing(t *testing.T) {
	s := NewStore()
	s.Record("a", oldDoc(), nil)
	s.Record("b", newDoc(), nil)
	if len(s.Snapshot().Merged.Servers()) != 0 {
		t.Error("merged view includes servers never declared healthy")
	}
	s.SetHealthy([]string{"b", "a"})
	snap := s.Snapshot()
	if !slices.Equal(snap.Merged.Servers(), []string{"a", "b"}) {
		t.Errorf("merged servers %v", snap.Merged.Servers())
	}
	s.SetHealthy([]string{"a", "b"})
	if s.Snapshot() != snap {
		t.Error("an unchanged healthy set republished")
	}
	s.SetHealthy([]string{"a"})
	snap = s.Snapshot()
	if got := snap.ServersServing(workloads, ""); !slices.Equal(got, []string{"b"}) {
		t.Errorf("ServersServing(workloads) = %v: unhealthy servers must still be listed", got)
	}
	if got := snap.ServersServing(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "exec"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("ServersServing(pods/exec) = %v", got)
	}
	if got := snap.ServersServingGroupVersion(workloads.GroupVersion()); !slices.Equal(got, []string{"b"}) {
		t.Errorf("ServersServingGroupVersion = %v", got)
	}
	if slices.Contains(namesOf(snap.Merged.APIs().Items), "scheduling.k8s.io/v1alpha2") {
		t.Error("unhealthy b still merged")
	}
	s.Forget("b")
	if s.Snapshot().ServersServing(workloads, "") != nil || s.Snapshot().Capabilities("b") != nil {
		t.Error("forgotten server still serves")
	}
}

// TestStoreConcurrent is for -race: readers never lock, writers serialize.
func TestStoreConcurrent(t *testing.T) {
	s := NewStore()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 200 {
				if i%2 == 0 {
					s.Record([]string{"a", "b"}[j%2], []*Doc{oldDoc(), newDoc()}[(i+j)%2], nil)
					s.SetHealthy([][]string{{"a"}, {"a", "b"}}[j%2])
				} else {
					snap := s.Snapshot()
					snap.ServersServing(workloads, "")
					get(snap.Merged.ServeHTTP, "/apis", clientdiscovery.AcceptV2, "")
				}
			}
		})
	}
	wg.Wait()
}
