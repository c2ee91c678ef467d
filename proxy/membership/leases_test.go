package membership

import (
	"net/netip"
	"net/url"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestLeaseURLs(t *testing.T) {
	now := time.Now()
	lease := func(name, addr string, renewed time.Duration) *coordinationv1.Lease {
		holder := "apiserver-" + name + "_6f1c"
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "apiserver-" + name,
			Labels: map[string]string{"apiserver.kubernetes.io/identity": "kube-apiserver", "kubernetes.io/hostname": name}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
		if addr != "" {
			l.Annotations = map[string]string{"kubernetes.io/peer-advertise-address": addr}
		}
		if renewed >= 0 {
			l.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(-renewed)}
		}
		return l
	}
	self := func(a netip.Addr) bool { return a == netip.MustParseAddr("198.18.0.1") }
	got := leaseURLs([]*coordinationv1.Lease{
		lease("fresh", "198.18.0.2:6443", 5*time.Second),
		lease("fresh-v6", "[fd00::3]:6443", 0),
		lease("self", "198.18.0.1:6443", time.Second),
		lease("stale", "198.18.0.4:6443", identityLeaseStale+time.Second),
		lease("no-annotation", "", time.Second), // in-tree proxy off
		lease("garbage", "not an address", time.Second),
		lease("never-renewed", "198.18.0.5:6443", -1),
		forged(lease("other-name", "198.18.0.6:6443", 0), func(l *coordinationv1.Lease) { l.Name = "my-addon" }),
		forged(lease("other-holder", "198.18.0.7:6443", 0), func(l *coordinationv1.Lease) { h := "someone"; l.Spec.HolderIdentity = &h }),
		forged(lease("no-holder", "198.18.0.8:6443", 0), func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil }),
		forged(lease("no-hostname", "198.18.0.9:6443", 0), func(l *coordinationv1.Lease) { delete(l.Labels, "kubernetes.io/hostname") }),
	}, self, now)
	var hosts []string
	for _, u := range got {
		hosts = append(hosts, u.Scheme+"://"+u.Host)
	}
	want := []string{"https://198.18.0.2:6443", "https://[fd00::3]:6443"}
	if !slices.Equal(hosts, want) {
		t.Errorf("leaseURLs = %q, want %q", hosts, want)
	}
}

// forged changes a lease away from the shape kube-apiserver gives it.
func forged(l *coordinationv1.Lease, change func(*coordinationv1.Lease)) *coordinationv1.Lease {
	change(l)
	return l
}

func TestEndpointURLsOnlyFromTheAPIServersSlice(t *testing.T) {
	ready, port, https := true, int32(6443), "https"
	slice := func(name, addr string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
			Ports:     []discoveryv1.EndpointPort{{Name: &https, Port: &port}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}}
	}
	none := func(netip.Addr) bool { return false }
	got := endpointURLs([]*discoveryv1.EndpointSlice{slice("kubernetes", "198.18.0.2"), slice("kubernetes-extra", "198.18.0.66")}, none)
	if len(got) != 1 || got[0].Host != "198.18.0.2:6443" {
		t.Errorf("endpointURLs = %v, want only the apiservers' own slice", got)
	}
}

func TestPeersBounded(t *testing.T) {
	m, err := New(Config{Local: &url.URL{Scheme: "https", Host: "127.0.0.1:6443"}})
	if err != nil {
		t.Fatal(err)
	}
	var peers []*url.URL
	for i := range 100 {
		peers = append(peers, &url.URL{Scheme: "https", Host: netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 1, byte(i)}), 6443).String()})
	}
	m.SetPeers(peers)
	if n := len(m.Statuses()); n != maxPeers+1 {
		t.Errorf("%d servers followed, want %d peers and the local one", n, maxPeers)
	}
}
