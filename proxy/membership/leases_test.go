package membership

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestLeaseURLs(t *testing.T) {
	now := time.Now()
	lease := func(name, addr string, renewed time.Duration) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}
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
