package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// kubernetesService labels the EndpointSlices kube-apiservers keep their
// addresses in (--endpoint-reconciler-type=lease, the default).
const kubernetesService = "kubernetes"

// WatchCluster keeps the peers equal to static plus the apiservers the
// cluster lists, except this node's own addresses (self):
//   - every ready address of the default/kubernetes EndpointSlices, which
//     kube-apiservers keep with the default lease endpoint reconciler;
//   - the peer-advertise address of every fresh kube-apiserver identity
//     lease in kube-system, which servers with the in-tree proxy
//     (UnknownVersionInteroperabilityProxy) publish, whatever their
//     endpoint reconciler.
//
// A caller not allowed to list leases in kube-system gets the EndpointSlices
// alone, and a log line saying so. WatchCluster returns once the informers
// have synced, or ctx's error; the watches run until ctx ends.
func (m *Members) WatchCluster(ctx context.Context, client kubernetes.Interface, static []*url.URL, self func(netip.Addr) bool, log *slog.Logger) error {
	slices := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(metav1.NamespaceDefault),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = discoveryv1.LabelServiceName + "=" + kubernetesService
		}))
	factories := []informers.SharedInformerFactory{slices}
	sliceLister := slices.Discovery().V1().EndpointSlices()
	informersToWatch := []cache.SharedIndexInformer{sliceLister.Informer()}

	var leases func() ([]*coordinationv1.Lease, error)
	if err := canListIdentityLeases(ctx, client); err != nil {
		log.Warn("apiserver identity leases not read: peers come from the EndpointSlices only", "err", err)
	} else {
		// A resync every identityLeaseRenew re-reads the cache, so a lease
		// that stopped being renewed goes stale without an event.
		lf := informers.NewSharedInformerFactoryWithOptions(client, identityLeaseRenew, informers.WithNamespace(metav1.NamespaceSystem),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = identityLeaseSelector }))
		factories = append(factories, lf)
		ll := lf.Coordination().V1().Leases()
		informersToWatch = append(informersToWatch, ll.Informer())
		leases = func() ([]*coordinationv1.Lease, error) { return ll.Lister().List(labels.Everything()) }
	}

	// Until every informer has synced, a partial view would depart the
	// peers only the other source lists.
	var synced atomic.Bool
	sync := func() {
		if !synced.Load() {
			return
		}
		all, err := sliceLister.Lister().List(labels.Everything())
		if err != nil {
			return // the lister reads a local cache: it does not fail
		}
		peers := append(append([]*url.URL{}, static...), endpointURLs(all, self)...)
		if leases != nil {
			ls, err := leases()
			if err != nil {
				return
			}
			peers = append(peers, leaseURLs(ls, self, time.Now())...)
		}
		m.SetPeers(peers)
	}
	for _, inf := range informersToWatch {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { sync() },
			UpdateFunc: func(any, any) { sync() },
			DeleteFunc: func(any) { sync() },
		}); err != nil {
			return fmt.Errorf("watch the cluster's apiservers: %w", err)
		}
	}
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	for _, f := range factories {
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("sync %v from the cluster: %w", typ, ctx.Err())
			}
		}
	}
	synced.Store(true)
	sync()
	return nil
}

// endpointURLs turns the ready endpoints' addresses and https port into
// apiserver URLs.
func endpointURLs(slices []*discoveryv1.EndpointSlice, self func(netip.Addr) bool) []*url.URL {
	var out []*url.URL
	for _, s := range slices {
		// kube-apiserver's endpoint reconciler keeps exactly one slice,
		// named after the service: another slice that merely carries the
		// service-name label was written by someone else.
		if s.Name != kubernetesService {
			continue
		}
		port := httpsPort(s)
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil || self(ip) {
					continue
				}
				out = append(out, &url.URL{Scheme: "https", Host: net.JoinHostPort(ip.String(), strconv.Itoa(port))})
			}
		}
	}
	return out
}

func httpsPort(s *discoveryv1.EndpointSlice) int {
	for _, p := range s.Ports {
		if p.Port != nil && (p.Name == nil || *p.Name == "https") {
			return int(*p.Port)
		}
	}
	return 6443
}

// LocalAddrs reports whether an address belongs to one of this network
// namespace's interfaces: the node's own apiserver is not its peer.
func LocalAddrs() (func(netip.Addr) bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list interface addresses: %w", err)
	}
	own := map[netip.Addr]bool{}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			own[p.Addr().Unmap()] = true
		}
	}
	return func(ip netip.Addr) bool { return own[ip.Unmap()] }, nil
}

// WatchClusterSynced is WatchCluster bounding the initial sync to 30 s.
func (m *Members) WatchClusterSynced(ctx context.Context, client kubernetes.Interface, static []*url.URL, log *slog.Logger) error {
	self, err := LocalAddrs()
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The informers live on ctx; only the initial sync is bounded.
	synced := make(chan error, 1)
	go func() { synced <- m.WatchCluster(ctx, client, static, self, log) }()
	select {
	case err := <-synced:
		return err
	case <-sctx.Done():
		return errors.New("the cluster's apiservers not synced within 30s")
	}
}
