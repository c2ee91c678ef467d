package drill

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/skewgate/skewgate/lab"
)

// configMaps is the resource every version serves; the ones only the
// pair's To serves are its Pair's.
var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// balancer spreads new connections over the nodes whose /readyz passes, as
// an L4 load balancer in front of the apiservers does.
type balancer struct {
	nodes   []lab.Node
	mu      sync.Mutex
	healthy []string // ip:port
	next    atomic.Uint64
}

func newBalancer(nodes []lab.Node) *balancer {
	b := &balancer{nodes: nodes}
	for _, n := range nodes {
		b.healthy = append(b.healthy, net.JoinHostPort(n.IP.String(), fmt.Sprint(lab.APIServerPort)))
	}
	return b
}

// check keeps the healthy set current, every 500 ms.
func (b *balancer) check(ctx context.Context, c *http.Client) {
	for ctx.Err() == nil {
		var up []string
		for _, n := range b.nodes {
			addr := net.JoinHostPort(n.IP.String(), fmt.Sprint(lab.APIServerPort))
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			req, _ := http.NewRequestWithContext(cctx, http.MethodGet, "https://"+addr+"/readyz", nil)
			if resp, err := c.Do(req); err == nil {
				if resp.StatusCode == http.StatusOK {
					up = append(up, addr)
				}
				resp.Body.Close()
			}
			cancel()
		}
		b.mu.Lock()
		b.healthy = up
		b.mu.Unlock()
		sleep(ctx, 500*time.Millisecond)
	}
}

func (b *balancer) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	b.mu.Lock()
	healthy := slices.Clone(b.healthy)
	b.mu.Unlock()
	if len(healthy) == 0 {
		return nil, fmt.Errorf("load balancer: no apiserver passes /readyz")
	}
	var d net.Dialer
	return d.DialContext(ctx, network, healthy[b.next.Add(1)%uint64(len(healthy))])
}

// clients makes REST clients through the balancer as the lab admin, each
// with its own connections, every answer recorded.
type clients struct {
	pki *lab.PKI
	lb  *balancer
	rec *recorder
	// loss, on a plane with a real controller-manager (kubeadm), records
	// owned pairs and deleted namespaces for the garbage collector and
	// the namespace controller to act on.
	loss *losses
	pair Pair // the types only its To serves
}

func (c clients) config() *rest.Config {
	return &rest.Config{
		Host: "https://kubernetes:6443",
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: c.pki.CAFile, CertFile: c.pki.Admin.CertFile, KeyFile: c.pki.Admin.KeyFile, ServerName: "kubernetes",
		},
		Dial:          c.lb.dial,
		WrapTransport: c.rec.RoundTripper,
		QPS:           -1, // no client-side throttling: the drill paces itself
		Timeout:       15 * time.Second,
	}
}

func (c clients) dynamic() (*dynamic.DynamicClient, error) { return dynamic.NewForConfig(c.config()) }

// probeClient checks /readyz of each node directly, unrecorded.
func probeClient(pki *lab.PKI) (*http.Client, error) {
	caPEM, err := os.ReadFile(pki.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(pki.Admin.CertFile, pki.Admin.KeyFile)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: "kubernetes"}}
	return &http.Client{Transport: tr, Timeout: 2 * time.Second}, nil
}

// workload runs every kind of traffic until ctx ends.
func (c clients) workload(ctx context.Context, gaps *gapCounter) {
	var wg sync.WaitGroup
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	run(c.informers)
	for i := range 2 {
		run(func(ctx context.Context) { c.writer(ctx, i) })
		run(c.reader)
	}
	run(func(ctx context.Context) { c.discovery(ctx, gaps) })
	run(func(ctx context.Context) { c.namespaces(ctx, gaps) })
	if c.loss != nil {
		run(c.owners)
	}
	wg.Wait()
}

// pinned is a client of one node's own address, as kube-controller-manager,
// kube-scheduler and the kubelets of a control-plane node are (kubeadm's
// local API endpoint): one connection, kept through the node's restart;
// lists, creates and deletes of configmaps and lists of workloads, about
// ten a second. Workloads: the pair's Owned type.
func (c clients) pinned(ctx context.Context, n lab.Node) {
	// The files' contents, not their names: client-go caches transports
	// by CA file name, and each mode's plane has a new CA at the same path.
	var tc rest.TLSClientConfig
	var err error
	for _, f := range []struct {
		path string
		into *[]byte
	}{{c.pki.CAFile, &tc.CAData}, {c.pki.Admin.CertFile, &tc.CertData}, {c.pki.Admin.KeyFile, &tc.KeyData}} {
		if *f.into, err = os.ReadFile(f.path); err != nil {
			return
		}
	}
	dyn, err := dynamic.NewForConfig(&rest.Config{
		Host:            n.URL(),
		TLSClientConfig: tc,
		WrapTransport:   c.rec.Pinned(n.Name),
		QPS:             -1,
		Timeout:         15 * time.Second,
	})
	if err != nil {
		return
	}
	cms := dyn.Resource(configMaps).Namespace("default")
	for i := 0; ctx.Err() == nil; i++ {
		name := fmt.Sprintf("pinned-%s-%d", n.Name, i/4)
		switch i % 4 {
		case 0:
			_, _ = cms.List(ctx, metav1.ListOptions{Limit: 20})
		case 1:
			_, _ = cms.Create(ctx, configMap(name), metav1.CreateOptions{})
		case 2:
			_, _ = dyn.Resource(c.pair.Owned.GVR).Namespace("default").List(ctx, metav1.ListOptions{Limit: 20})
		case 3:
			_ = cms.Delete(ctx, name, metav1.DeleteOptions{})
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// informers list and watch the three resources, as controllers do.
func (c clients) informers(ctx context.Context) {
	dyn, err := c.dynamic()
	if err != nil {
		return
	}
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, metav1.NamespaceAll, nil)
	for _, gvr := range append([]schema.GroupVersionResource{configMaps}, c.pair.types()...) {
		f.ForResource(gvr).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{})
	}
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
}

// fresh yields a new dynamic client every 5 s, so each worker's
// connections spread over the nodes as clients come and go.
func (c clients) fresh(ctx context.Context, each func(*dynamic.DynamicClient) bool) {
	for ctx.Err() == nil {
		dyn, err := c.dynamic()
		if err != nil {
			return
		}
		until := time.Now().Add(5 * time.Second)
		for ctx.Err() == nil && time.Now().Before(until) {
			if !each(dyn) {
				return
			}
		}
	}
}

// writer creates, updates and deletes configmaps and objects of the
// pair's Owned type.
func (c clients) writer(ctx context.Context, id int) {
	n := 0
	c.fresh(ctx, func(dyn *dynamic.DynamicClient) bool {
		n++
		name := fmt.Sprintf("drill-%d-%d", id, n)
		gvr, obj, err := configMaps, configMap(name), error(nil)
		if n%2 == 0 {
			gvr = c.pair.Owned.GVR
			if obj, err = c.pair.Owned.Object(name); err != nil {
				return false
			}
		}
		res := dyn.Resource(gvr).Namespace("default")
		if created, err := res.Create(ctx, obj, metav1.CreateOptions{}); err == nil {
			created.SetLabels(map[string]string{"drill": "updated"})
			_, _ = res.Update(ctx, created, metav1.UpdateOptions{})
			_ = res.Delete(ctx, name, metav1.DeleteOptions{})
		}
		return sleep(ctx, 200*time.Millisecond)
	})
}

// reader lists and gets, as kubectl and controllers do.
func (c clients) reader(ctx context.Context) {
	c.fresh(ctx, func(dyn *dynamic.DynamicClient) bool {
		_, _ = dyn.Resource(configMaps).Namespace("default").List(ctx, metav1.ListOptions{Limit: 20})
		_, _ = dyn.Resource(c.pair.Owned.GVR).Namespace("default").List(ctx, metav1.ListOptions{Limit: 20})
		_, _ = dyn.Resource(c.pair.Owned.GVR).Namespace("default").Get(ctx, "drill-absent", metav1.GetOptions{})
		if !c.pair.Cluster.Empty() {
			_, _ = dyn.Resource(c.pair.Cluster).List(ctx, metav1.ListOptions{Limit: 20})
		}
		return sleep(ctx, 100*time.Millisecond)
	})
}

// gapCounter counts discovery answers that lack a type some server
// present serves (of the pair's Owned type's group/version): a client acts
// on that as on a false 404.
type gapCounter struct {
	mu     sync.Mutex
	phase  func() string
	served func(schema.GroupVersionResource) bool
	owned  schema.GroupVersionResource
	counts map[string]int // phase → gaps
}

// check counts a gap when discovery's answer lacks the owned type.
func (g *gapCounter) check(found listed) {
	for _, gvr := range []schema.GroupVersionResource{g.owned} {
		if g.served(gvr) && !found.has(gvr) {
			g.mu.Lock()
			g.counts[g.phase()]++
			g.mu.Unlock()
		}
	}
}

// discovery refreshes discovery as kubectl does, every 2 s.
func (c clients) discovery(ctx context.Context, gaps *gapCounter) {
	for ctx.Err() == nil {
		dc, err := discovery.NewDiscoveryClientForConfig(c.config())
		if err != nil {
			return
		}
		if groups, lists, err := dc.ServerGroupsAndResources(); err == nil || groups != nil {
			found := failing(err)
			for _, l := range lists {
				found.add(l)
			}
			gaps.check(found)
		}
		sleep(ctx, 2*time.Second)
	}
}

// namespaces creates a namespace with objects of version-dependent types
// and deletes it. With a real controller-manager (c.loss) the namespace
// controller empties it and the count after the drill sees what it left;
// without one the drill plays its part: discovery, then a
// deletecollection of every namespaced resource it lists.
func (c clients) namespaces(ctx context.Context, gaps *gapCounter) {
	for n := 0; ctx.Err() == nil; n++ {
		dyn, err := c.dynamic()
		if err != nil {
			return
		}
		ns := fmt.Sprintf("drill-ns-%d", n)
		nsObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
		if _, err := dyn.Resource(namespaces).Create(ctx, nsObj, metav1.CreateOptions{}); err == nil {
			_, _ = dyn.Resource(configMaps).Namespace(ns).Create(ctx, configMap("in-ns"), metav1.CreateOptions{})
			if c.loss == nil {
				if obj, err := c.pair.Owned.Object("in-ns"); err == nil {
					_, _ = dyn.Resource(c.pair.Owned.GVR).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
				}
				c.deleteNamespace(ctx, dyn, ns, gaps)
			} else {
				// Outside the window the pair fails (no server serves
				// the owned type): the namespace is deleted all the same.
				_, _ = createPair(ctx, dyn, c.pair.Owned, ns, n)
				if dyn.Resource(namespaces).Delete(ctx, ns, metav1.DeleteOptions{}) == nil {
					c.loss.deleted(ns)
				}
			}
		}
		sleep(ctx, 8*time.Second)
	}
}

func (c clients) deleteNamespace(ctx context.Context, dyn *dynamic.DynamicClient, ns string, gaps *gapCounter) {
	dc, err := discovery.NewDiscoveryClientForConfig(c.config())
	if err != nil {
		return
	}
	lists, err := dc.ServerPreferredNamespacedResources()
	found := failing(err)
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		found.add(l)
		for _, r := range l.APIResources {
			if slices.Contains(r.Verbs, "deletecollection") {
				_ = dyn.Resource(gv.WithResource(r.Name)).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
			}
		}
	}
	gaps.check(found)
	_ = dyn.Resource(namespaces).Delete(ctx, ns, metav1.DeleteOptions{})
}

// listed is what a discovery answer lists: resources by group/version, and
// the group/versions it reported failing, which may hold any resource.
// By resource, not group/version: 1.37's new types are in group/versions
// 1.36 serves too (certificates.k8s.io/v1, resource.k8s.io/v1).
type listed struct {
	resources map[schema.GroupVersion]map[string]bool
	failed    map[schema.GroupVersion]bool
}

func (l listed) add(list *metav1.APIResourceList) {
	gv, err := schema.ParseGroupVersion(list.GroupVersion)
	if err != nil {
		return
	}
	if l.resources[gv] == nil {
		l.resources[gv] = map[string]bool{}
	}
	for _, r := range list.APIResources {
		l.resources[gv][r.Name] = true
	}
}

func (l listed) has(gvr schema.GroupVersionResource) bool {
	return l.failed[gvr.GroupVersion()] || l.resources[gvr.GroupVersion()][gvr.Resource]
}

// failing starts a listing with the group-versions discovery reported as
// failing (Stale: an API temporarily unavailable). A client knows those
// exist: the namespace controller, for one, does not finish a deletion
// while any fails.
func failing(err error) listed {
	l := listed{resources: map[schema.GroupVersion]map[string]bool{}, failed: map[schema.GroupVersion]bool{}}
	var failed *discovery.ErrGroupDiscoveryFailed
	if errors.As(err, &failed) {
		for gv := range failed.Groups {
			l.failed[gv] = true
		}
	}
	return l
}

func configMap(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name}, "data": map[string]any{"k": "v"}}}
}

// sleep waits d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
