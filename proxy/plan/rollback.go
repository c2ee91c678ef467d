package plan

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// RollbackPlan is what a rollback to a version takes away, and what it
// hits.
type RollbackPlan struct {
	// To is the target minor version, TargetFrom the recorded build its
	// built-in types come from and how that server ran.
	To         string `json:"to"`
	TargetFrom string `json:"targetRecordedFrom"`
	TargetRun  string `json:"targetRecording"`
	// Discovery says how the cluster's types were read.
	Discovery string `json:"discovery"`
	// Lacking are the built-in types the cluster serves now and the
	// target does not.
	Lacking []LackingType `json:"lacking"`
	// Namespaces are those a deletion during the rollback would leave
	// stuck or orphaned, and those already Terminating.
	Namespaces []NamespaceRisk `json:"namespaces"`
	// Usage says where the request figures come from ("unknown": none).
	Usage string `json:"usage"`
}

// LackingType is one type the target does not serve.
type LackingType struct {
	Resource   string `json:"resource"`
	Namespaced bool   `json:"namespaced"`
	// TargetVersions are the versions in which the target serves the same
	// group/resource: its objects stay reachable there, and only clients
	// of this version lose it. Empty: the objects become unreachable.
	TargetVersions []string `json:"targetVersions,omitempty"`
	// Objects is how many exist (nil: unknown, see Error), Namespaces
	// where, for a namespaced type.
	Objects    *int             `json:"objects"`
	Namespaces []NamespaceCount `json:"namespaces,omitempty"`
	Error      string           `json:"error,omitempty"`
	// Requests are the type's requests by verb (nil: unknown).
	Requests map[string]float64 `json:"requests"`
}

// NamespaceCount is how many objects of a type one namespace holds.
type NamespaceCount struct {
	Name    string `json:"name"`
	Objects int    `json:"objects"`
}

// NamespaceRisk is one namespace the rollback endangers or that is
// already being deleted.
type NamespaceRisk struct {
	Name        string `json:"name"`
	Terminating bool   `json:"terminating"`
	// Conditions are the namespace's true conditions ("Type: message"),
	// e.g. NamespaceDeletionDiscoveryFailure.
	Conditions []string `json:"conditions,omitempty"`
	// Holds are the types the target lacks in every version that it has
	// objects of, and Objects how many.
	Holds   []string `json:"holds,omitempty"`
	Objects int      `json:"objects"`
	Risk    string   `json:"risk"`
}

// Usage tells how much a type is requested.
type Usage interface {
	// Requests returns gvr's requests by verb, or nil when unknown.
	Requests(gvr schema.GroupVersionResource) map[string]float64
	// Source says what the figures are, for people.
	Source() string
}

// Rollback plans a rollback of the cluster to target. usage may be nil
// (the requests are then unknown). It fails if the cluster's discovery,
// CRDs, APIServices or namespaces cannot be read; an object count that
// cannot be read is reported in its type, not as a failure.
func Rollback(ctx context.Context, c *Cluster, target *Builtin, usage Usage) (*RollbackPlan, error) {
	served, err := ReadServed(ctx, c.HTTP, c.Host)
	if err != nil {
		return nil, err
	}
	ext, err := readExtensions(ctx, c)
	if err != nil {
		return nil, err
	}
	p := &RollbackPlan{To: target.Minor, TargetFrom: target.RecordedFrom, TargetRun: target.Recording, Discovery: served.Via, Usage: "unknown", Lacking: []LackingType{}, Namespaces: []NamespaceRisk{}}
	if usage != nil {
		p.Usage = usage.Source()
	}
	counted := map[schema.GroupResource]*LackingType{}
	for _, gvr := range sortedTypes(served.Types) {
		if target.Serves(gvr) || ext.owns(gvr) {
			continue
		}
		lt := LackingType{Resource: GVRString(gvr), Namespaced: served.Types[gvr], TargetVersions: target.VersionsOf(gvr.GroupResource())}
		// Every version of a group/resource lists the same objects.
		if prev := counted[gvr.GroupResource()]; prev != nil {
			lt.Objects, lt.Namespaces, lt.Error = prev.Objects, prev.Namespaces, prev.Error
		} else {
			countObjects(ctx, c, gvr, &lt)
			counted[gvr.GroupResource()] = &lt
		}
		if usage != nil {
			lt.Requests = usage.Requests(gvr)
		}
		p.Lacking = append(p.Lacking, lt)
	}
	if p.Namespaces, err = namespaceRisks(ctx, c, p.Lacking); err != nil {
		return nil, err
	}
	return p, nil
}

func sortedTypes(types map[schema.GroupVersionResource]bool) []schema.GroupVersionResource {
	out := make([]schema.GroupVersionResource, 0, len(types))
	for gvr := range types {
		out = append(out, gvr)
	}
	slices.SortFunc(out, func(a, b schema.GroupVersionResource) int { return strings.Compare(GVRString(a), GVRString(b)) })
	return out
}

// extensions are the cluster's own types, CRDs and aggregated APIs: a
// rollback of the apiservers keeps them.
type extensions struct {
	crds       map[schema.GroupResource]bool
	aggregated map[schema.GroupVersion]bool
}

var (
	crdsGVR        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	apiServicesGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
)

func (e extensions) owns(gvr schema.GroupVersionResource) bool {
	return e.crds[gvr.GroupResource()] || e.aggregated[gvr.GroupVersion()]
}

// readExtensions lists CRDs by name (always "<plural>.<group>") and the
// APIServices that name a service (the built-in ones are local).
func readExtensions(ctx context.Context, c *Cluster) (extensions, error) {
	e := extensions{crds: map[schema.GroupResource]bool{}, aggregated: map[schema.GroupVersion]bool{}}
	crds, err := c.Metadata.Resource(crdsGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return e, fmt.Errorf("list CRDs: %w", err)
	}
	for _, crd := range crds.Items {
		if plural, group, ok := strings.Cut(crd.Name, "."); ok {
			e.crds[schema.GroupResource{Group: group, Resource: plural}] = true
		}
	}
	svcs, err := c.Dynamic.Resource(apiServicesGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return e, fmt.Errorf("list APIServices: %w", err)
	}
	for _, s := range svcs.Items {
		if svc, _, _ := unstructured.NestedMap(s.Object, "spec", "service"); svc == nil {
			continue
		}
		group, _, _ := unstructured.NestedString(s.Object, "spec", "group")
		version, _, _ := unstructured.NestedString(s.Object, "spec", "version")
		e.aggregated[schema.GroupVersion{Group: group, Version: version}] = true
	}
	return e, nil
}

// countObjects lists gvr's objects' metadata, a page at a time, into lt.
func countObjects(ctx context.Context, c *Cluster, gvr schema.GroupVersionResource, lt *LackingType) {
	byNS := map[string]int{}
	total := 0
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := c.Metadata.Resource(gvr).List(ctx, opts)
		if err != nil {
			lt.Error = fmt.Sprintf("list: %v", err)
			return
		}
		for _, o := range list.Items {
			total++
			if o.Namespace != "" {
				byNS[o.Namespace]++
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	lt.Objects = &total
	for ns, n := range byNS {
		lt.Namespaces = append(lt.Namespaces, NamespaceCount{Name: ns, Objects: n})
	}
	slices.SortFunc(lt.Namespaces, func(a, b NamespaceCount) int { return strings.Compare(a.Name, b.Name) })
}

// Why a namespace is at risk. The namespace controller deletes a
// namespace's content type by type, as discovery lists them: while the
// grace answers 503 for a type it cannot finish (Terminating, condition
// NamespaceDeletionDiscoveryFailure); once no server lists the type it
// no longer knows of it, removes the namespace, and the objects stay in
// etcd, unreachable — back, in a namespace of the same name, after the
// next upgrade.
const (
	riskHolds            = "if deleted during the rollback: stuck Terminating while the grace answers 503, then removed with these objects left in etcd (orphaned)"
	riskTerminatingHolds = "already Terminating: stuck while the grace answers 503, then its objects of these types are orphaned"
	riskTerminating      = "already Terminating (holds no type the target lacks)"
)

func namespaceRisks(ctx context.Context, c *Cluster, lacking []LackingType) ([]NamespaceRisk, error) {
	byName := map[string]*NamespaceRisk{}
	for _, lt := range lacking {
		if len(lt.TargetVersions) > 0 {
			continue // the namespace controller deletes them through another version
		}
		for _, n := range lt.Namespaces {
			r := byName[n.Name]
			if r == nil {
				r = &NamespaceRisk{Name: n.Name}
				byName[n.Name] = r
			}
			r.Holds = append(r.Holds, lt.Resource)
			r.Objects += n.Objects
		}
	}
	nss, err := c.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	for _, ns := range nss.Items {
		r := byName[ns.Name]
		if ns.Status.Phase != corev1.NamespaceTerminating {
			continue
		}
		if r == nil {
			r = &NamespaceRisk{Name: ns.Name}
			byName[ns.Name] = r
		}
		r.Terminating = true
		for _, cond := range ns.Status.Conditions {
			if cond.Status == corev1.ConditionTrue {
				r.Conditions = append(r.Conditions, string(cond.Type)+": "+cond.Message)
			}
		}
	}
	out := []NamespaceRisk{}
	for _, r := range byName {
		switch {
		case r.Terminating && len(r.Holds) > 0:
			r.Risk = riskTerminatingHolds
		case r.Terminating:
			r.Risk = riskTerminating
		default:
			r.Risk = riskHolds
		}
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b NamespaceRisk) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
