package drill

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/lab"
)

// What users lose, not only what they see: on the kubeadm lab the real
// kube-controller-manager runs the garbage collector and the namespace
// controller through whichever apiserver its kubeconfig names (kubeadm's:
// the node's own address). A false 404 for an owner's type makes the
// garbage collector delete its dependents; a discovery that lacks a type
// makes the namespace controller finish a namespace whose objects of that
// type stay in etcd, or keeps the namespace terminating.

// gcNamespace holds the owned pairs; the drill never deletes it.
const gcNamespace = "drill-gc"

// Loss is what one mode's run lost, counted after the drill settled.
type Loss struct {
	// Pairs are the owners (of the pair's Owned type, which only its To
	// serves) created with a dependent configmap each.
	Pairs int
	// GCDeleted are dependents gone although their owner exists: the
	// garbage collector deleted them.
	GCDeleted []string
	// Namespaces were deleted during the drill, each holding an owned
	// pair; Stuck still exist (terminating) after the settle time, each
	// with the namespace controller's conditions that are true.
	Namespaces int
	Stuck      []string
	// Orphans are etcd keys of objects in a namespace that no longer
	// exists, by resource; OrphanKeys the first few.
	Orphans    map[string]int
	OrphanKeys []string
	// Settled is how long the drill waited before counting.
	Settled time.Duration
	Err     string
}

// OrphanCount sums Orphans.
func (l *Loss) OrphanCount() int {
	n := 0
	for _, c := range l.Orphans {
		n += c
	}
	return n
}

// losses records what the workload created and deleted, to be counted
// after the drill.
type losses struct {
	mu         sync.Mutex
	pairs      []pair
	namespaces []string
}

type pair struct{ owner, dependent string }

func (l *losses) addPair(p pair) {
	l.mu.Lock()
	l.pairs = append(l.pairs, p)
	l.mu.Unlock()
}

func (l *losses) deleted(ns string) {
	l.mu.Lock()
	l.namespaces = append(l.namespaces, ns)
	l.mu.Unlock()
}

// createPair creates an owner of type t and a configmap it owns in ns,
// and reports whether both exist.
func createPair(ctx context.Context, dyn dynamic.Interface, t NewType, ns string, n int) (pair, bool) {
	p := pair{owner: fmt.Sprintf("gc-owner-%d", n), dependent: fmt.Sprintf("gc-dep-%d", n)}
	obj, err := t.Object(p.owner)
	if err != nil {
		return p, false
	}
	owner, err := dyn.Resource(t.GVR).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return p, false
	}
	dep := configMap(p.dependent)
	dep.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: t.GVR.GroupVersion().String(), Kind: t.Kind, Name: owner.GetName(), UID: owner.GetUID()}})
	_, err = dyn.Resource(configMaps).Namespace(ns).Create(ctx, dep, metav1.CreateOptions{})
	return p, err == nil
}

// owners creates an owned pair in gcNamespace every 2 s, each attempt on
// a new connection through the load balancer, retried on up to two more
// if it fails, as a user retries `kubectl create`; outside the window (no
// server serves the owned type) every attempt fails and nothing is
// recorded. One kept connection would stay on the server it reached
// first: without skewgate an old one, and no pair would ever exist for
// the garbage collector to lose.
func (c clients) owners(ctx context.Context) {
	dyn, err := c.dynamic()
	if err != nil {
		return
	}
	nsObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": gcNamespace}}}
	for ctx.Err() == nil {
		if _, err := dyn.Resource(namespaces).Create(ctx, nsObj, metav1.CreateOptions{}); err == nil || strings.Contains(err.Error(), "already exists") {
			break
		}
		sleep(ctx, time.Second)
	}
	for n := 0; ctx.Err() == nil; n++ {
		for range 3 {
			if p, ok := c.freshPair(ctx, n); ok {
				c.loss.addPair(p)
				break
			}
		}
		sleep(ctx, 2*time.Second)
	}
}

// freshPair creates pair n on a client of its own, its connection closed
// after.
func (c clients) freshPair(ctx context.Context, n int) (pair, bool) {
	cfg := c.config()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return pair{}, false
	}
	defer hc.CloseIdleConnections()
	dyn, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return pair{}, false
	}
	return createPair(ctx, dyn, c.pair.Owned, gcNamespace, n)
}

var namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// count waits settle, then counts what was lost: etcd's keys, read
// directly (a rolled-back plane does not serve the owned type), and the deleted
// namespaces that still exist.
func (l *losses) count(ctx context.Context, plane *lab.Plane, settle time.Duration) *Loss {
	sleep(ctx, settle)
	l.mu.Lock()
	defer l.mu.Unlock()
	out := &Loss{Pairs: len(l.pairs), Namespaces: len(l.namespaces), Orphans: map[string]int{}, Settled: settle}
	keys, err := plane.EtcdKeys(ctx, "/registry/")
	if err != nil {
		out.Err = err.Error()
		return out
	}
	out.GCDeleted = gcDeleted(l.pairs, keys)
	c, err := plane.AdminClient(plane.Spec.Nodes[0])
	if err != nil {
		out.Err = err.Error()
		return out
	}
	for _, ns := range l.namespaces {
		got, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err == nil {
			why := []string{}
			for _, cond := range got.Status.Conditions {
				if cond.Status == "True" {
					why = append(why, string(cond.Type)+": "+cond.Message)
				}
			}
			out.Stuck = append(out.Stuck, ns+" ("+strings.Join(why, "; ")+")")
			continue
		}
		for _, k := range keys {
			if res, ok := inNamespace(k, ns); ok {
				out.Orphans[res]++
				if len(out.OrphanKeys) < 5 {
					out.OrphanKeys = append(out.OrphanKeys, k)
				}
			}
		}
	}
	return out
}

// gcDeleted are the dependents of pairs that etcd's keys lack while they
// hold their owner: the garbage collector deleted them although their
// owner exists. A pair whose owner is gone too is not counted (the owner
// was deleted, and the collector rightly followed).
func gcDeleted(pairs []pair, keys []string) []string {
	have := map[string]bool{}
	owners := map[string]bool{} // names in gcNamespace of any type but configmaps
	for _, k := range keys {
		have[k] = true
		if strings.HasPrefix(k, "/registry/configmaps/") {
			continue
		}
		if res, ok := inNamespace(k, gcNamespace); ok && res != "" {
			owners[k[strings.LastIndexByte(k, '/')+1:]] = true
		}
	}
	var out []string
	for _, p := range pairs {
		if !have["/registry/configmaps/"+gcNamespace+"/"+p.dependent] && owners[p.owner] {
			out = append(out, p.dependent)
		}
	}
	return out
}

// inNamespace reports whether etcd key k is an object in namespace ns
// (/registry/<resource>/<ns>/<name>, or /registry/<group>/<resource>/<ns>/<name>),
// and its resource.
func inNamespace(k, ns string) (string, bool) {
	parts := strings.Split(strings.TrimPrefix(k, "/registry/"), "/")
	if len(parts) < 3 || parts[len(parts)-2] != ns {
		return "", false
	}
	return strings.Join(parts[:len(parts)-2], "/"), true
}
