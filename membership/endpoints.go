package membership

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"

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

// WatchEndpoints keeps the peers equal to static plus every ready address
// of the default/kubernetes EndpointSlices, except this node's own
// addresses (self). It returns once the informer has synced, or ctx's
// error; the watch runs until ctx ends.
func (m *Members) WatchEndpoints(ctx context.Context, client kubernetes.Interface, static []*url.URL, self func(netip.Addr) bool) error {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("default"),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = discoveryv1.LabelServiceName + "=" + kubernetesService
		}))
	slices := factory.Discovery().V1().EndpointSlices()
	sync := func() {
		all, err := slices.Lister().List(labels.Everything())
		if err != nil {
			return // the lister reads a local cache: it does not fail
		}
		m.SetPeers(append(append([]*url.URL{}, static...), endpointURLs(all, self)...))
	}
	if _, err := slices.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { sync() },
		UpdateFunc: func(any, any) { sync() },
		DeleteFunc: func(any) { sync() },
	}); err != nil {
		return fmt.Errorf("watch endpointslices: %w", err)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("sync %v from the cluster: %w", typ, ctx.Err())
		}
	}
	sync()
	return nil
}

// endpointURLs turns the ready endpoints' addresses and https port into
// apiserver URLs.
func endpointURLs(slices []*discoveryv1.EndpointSlice, self func(netip.Addr) bool) []*url.URL {
	var out []*url.URL
	for _, s := range slices {
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
