package membership

import (
	"context"
	"net/netip"
	"net/url"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	// identityLeaseSelector picks kube-apiserver identity leases in
	// kube-system (one per server, named after its APIServerID).
	identityLeaseSelector = "apiserver.kubernetes.io/identity=kube-apiserver"
	// identityLeaseRenew is how often kube-apiserver renews its identity
	// lease.
	identityLeaseRenew = 10 * time.Second
	// identityLeaseStale: a lease not renewed for this long names a server
	// that is gone, although the lease itself lasts an hour.
	identityLeaseStale = 4 * identityLeaseRenew
)

// canListIdentityLeases asks the cluster once, so a caller without the
// permission is told at start instead of an informer retrying for ever.
func canListIdentityLeases(ctx context.Context, client kubernetes.Interface) error {
	_, err := client.CoordinationV1().Leases(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: identityLeaseSelector, Limit: 1})
	return err
}

// leaseURLs turns the peer-advertise addresses of leases renewed within
// identityLeaseStale of now into apiserver URLs. A lease without the
// annotation (a server with the in-tree proxy off) names no address.
func leaseURLs(leases []*coordinationv1.Lease, self func(netip.Addr) bool, now time.Time) []*url.URL {
	var out []*url.URL
	for _, l := range leases {
		if l.Spec.RenewTime == nil || now.Sub(l.Spec.RenewTime.Time) > identityLeaseStale || !apiserverManaged(l) {
			continue
		}
		ap, err := netip.ParseAddrPort(l.Annotations[corev1.AnnotationPeerAdvertiseAddress])
		if err != nil || self(ap.Addr().Unmap()) {
			continue
		}
		out = append(out, &url.URL{Scheme: "https", Host: ap.String()})
	}
	return out
}

// apiserverManaged reports whether a lease has the shape kube-apiserver
// gives its identity lease: named apiserver-<hash of its hostname>, held by
// <name>_<uuid>, labelled with its hostname. Anyone who may write leases in
// kube-system can still forge that shape (docs/security.md); what it keeps
// out is a lease that merely carries the label, and maxPeers bounds the rest.
func apiserverManaged(l *coordinationv1.Lease) bool {
	return strings.HasPrefix(l.Name, "apiserver-") && l.Spec.HolderIdentity != nil &&
		strings.HasPrefix(*l.Spec.HolderIdentity, l.Name+"_") && l.Labels[corev1.LabelHostname] != ""
}
