package membership

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/skewgate/skewgate/proxy/route"
)

// APIServicesGVR is where kube-aggregator keeps the cluster's APIServices.
var APIServicesGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// The label kube-aggregator's autoregister controller puts on the
// APIServices it manages (k8s.io/kube-aggregator
// pkg/controllers/autoregister): "onstart" on those kube-apiserver
// registers for its own group/versions when it starts, "true" on those it
// keeps in sync for CRDs. Both have no spec.service (they are local);
// only the label tells a built-in group from a CRD's.
const (
	AutoManagedLabel   = "kube-aggregator.kubernetes.io/automanaged"
	AutoManagedOnStart = "onstart"
)

// Where the built-in groups came from, in BuiltInView.Source.
const (
	BuiltInFromAPIServices = "apiservices"
	BuiltInFromStateFile   = "state file"
	BuiltInCompiled        = "compiled"
)

// builtIns are the groups kube-apiserver serves itself, every one ever
// seen: a server of the previous release that starts after one of the new
// release deletes the new one's registrations, and a rollback removes
// them, while rule 5 and the window must still count those groups.
type builtIns struct {
	// groups is replaced, never changed, once a table holds it; nil
	// until the cluster's APIServices or the state file said.
	groups route.BuiltInGroups
	source string
}

// BuiltInView is which groups count as built in, and from where; the
// groups of the release skewgate was built with count as well
// (route.CompiledBuiltIn).
type BuiltInView struct {
	// Source is apiservices (the cluster's, now), state file (an earlier
	// run read them; the cluster's are not read yet) or compiled
	// (neither: only the groups of the release skewgate was built with).
	Source string `json:"source"`
	// Groups are the groups the cluster's APIServices named, every one
	// seen.
	Groups []string `json:"groups,omitempty"`
}

// BuiltIn says which groups count as built in, and from where.
func (m *Members) BuiltIn() BuiltInView {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.builtIn.groups == nil {
		return BuiltInView{Source: BuiltInCompiled}
	}
	return BuiltInView{Source: m.builtIn.source, Groups: slices.Sorted(maps.Keys(m.builtIn.groups))}
}

// addBuiltIn adds groups, as source says; it reports whether any was new.
// Call with m.mu held.
func (m *Members) addBuiltIn(source string, groups ...string) bool {
	b := &m.builtIn
	fresh := b.groups == nil
	var added []string
	for _, g := range groups {
		if !b.groups[g] {
			added = append(added, g)
		}
	}
	if source == BuiltInFromAPIServices || b.source == "" {
		b.source = source
	}
	if len(added) == 0 && !fresh {
		return false
	}
	next := make(route.BuiltInGroups, len(b.groups)+len(added))
	maps.Copy(next, b.groups)
	for _, g := range added {
		next[g] = true
	}
	b.groups = next
	return true
}

// BuiltInGroup is the group an APIService registers when kube-apiserver
// registered it for one of its own group/versions: local (no
// spec.service) and labelled onstart. ok is false for a CRD's (labelled
// "true") and an aggregated API's (a service).
func BuiltInGroup(apiService *unstructured.Unstructured) (group string, ok bool) {
	if apiService.GetLabels()[AutoManagedLabel] != AutoManagedOnStart {
		return "", false
	}
	if svc, found, _ := unstructured.NestedFieldNoCopy(apiService.Object, "spec", "service"); found && svc != nil {
		return "", false
	}
	group, _, _ = unstructured.NestedString(apiService.Object, "spec", "group")
	return group, true
}

// noteAPIServices adds the built-in groups of the APIServices listed.
func (m *Members) noteAPIServices(objs ...*unstructured.Unstructured) {
	var groups []string
	for _, o := range objs {
		if g, ok := BuiltInGroup(o); ok {
			groups = append(groups, g)
		}
	}
	m.mu.Lock()
	changed := m.addBuiltIn(BuiltInFromAPIServices, groups...)
	m.mu.Unlock()
	if changed {
		m.cfg.Log.Info("built-in groups from the cluster's APIServices", "groups", groups)
		m.publish()
	}
}

// errAPIServicesUnreadable wraps why the cluster's APIServices could not
// be read.
var errAPIServicesUnreadable = errors.New("the cluster's APIServices are not readable (skewgate's user needs list and watch on apiregistration.k8s.io apiservices)")

// WatchAPIServices follows the cluster's APIServices that kube-apiserver
// registered for its own groups, and counts every group they name as
// built in from then on. It returns once they were read, or with an error
// when they cannot be: then the groups an earlier run saw (state file),
// or else the groups skewgate was compiled with, decide — and a group
// only a release newer than skewgate adds does not count.
func (m *Members) WatchAPIServices(ctx context.Context, client dynamic.Interface) error {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	selector := AutoManagedLabel + "=" + AutoManagedOnStart
	list, err := client.Resource(APIServicesGVR).List(rctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return fmt.Errorf("%w: %w", errAPIServicesUnreadable, err)
	}
	objs := make([]*unstructured.Unstructured, len(list.Items))
	for i := range list.Items {
		objs[i] = &list.Items[i]
	}
	m.noteAPIServices(objs...)
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 0, metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = selector })
	apply := func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			m.noteAPIServices(u)
		}
	}
	// Deletions are not followed: a group once built in stays so.
	_, err = f.ForResource(APIServicesGVR).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: apply, UpdateFunc: func(_, obj any) { apply(obj) }})
	if err != nil {
		return fmt.Errorf("apiservices informer: %w", err)
	}
	f.Start(ctx.Done())
	return nil
}
