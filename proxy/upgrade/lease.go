package upgrade

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The Lease every node's agent keeps while its own upgrade is under way, so
// every other node's agent learns of it at once — before the apiserver
// stops, which is the earliest any of them could.
const (
	// LeaseNamespace holds the leases: skewgate's own, which the manifests
	// create, so that its grant to write Leases reaches no one else's
	// (kube-system holds the controller-manager's and scheduler's leader
	// leases and the apiservers' identity leases; RBAC cannot limit create
	// by name).
	LeaseNamespace = "skewgate"
	// LegacyLeaseNamespace held the leases before they moved to
	// LeaseNamespace. Agents read them there too, never write them, so that
	// during skewgate's own rollout from such a build the old agents'
	// upgrades still reach the new ones (the other way, new to old, cannot
	// be had: the ServiceAccount may not write Leases in kube-system;
	// docs/security.md says what that leaves). They count as every lease
	// does, bounded the same (leaseUntil). Drop it, with proxy/removal's
	// cleanup there, one minor after v0.1.0: by then no supported release
	// writes there (TestLegacyNamespaceForOneMinor).
	LegacyLeaseNamespace = "kube-system"
	// LeasePrefix + the node's name is a node's lease.
	LeasePrefix = "skewgate-upgrade-"
	// Label marks the leases (value "true"); agents watch by it.
	Label = "skewgate.io/upgrade"
	// AnnotationRunning and AnnotationManifest carry the versions: the one
	// the node's apiserver runs and the one its manifest names.
	AnnotationRunning  = "skewgate.io/upgrade-running"
	AnnotationManifest = "skewgate.io/upgrade-manifest"
)

// LeaseName is the name of node's lease.
func LeaseName(node string) string { return LeasePrefix + node }

// lease is node's lease for c, renewed at now.
func lease(c Condition, duration time.Duration, now time.Time) *coordinationv1.Lease {
	secs := int32(duration / time.Second)
	renew := metav1.NewMicroTime(now)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: LeaseName(c.Node), Namespace: LeaseNamespace,
			Labels:      map[string]string{Label: "true"},
			Annotations: map[string]string{AnnotationRunning: c.Running, AnnotationManifest: c.Manifest},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &c.Node, LeaseDurationSeconds: &secs, RenewTime: &renew},
	}
}

// renew creates or updates c's lease, renewed at now. A conflict (another
// writer between get and update) is returned: the next renewal retries.
func renew(ctx context.Context, client kubernetes.Interface, c Condition, duration time.Duration, now time.Time) error {
	leases := client.CoordinationV1().Leases(LeaseNamespace)
	want := lease(c, duration, now)
	cur, err := leases.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		want.Spec.AcquireTime = want.Spec.RenewTime
		if _, err := leases.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create lease %s/%s: %w", LeaseNamespace, want.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("get lease %s/%s: %w", LeaseNamespace, want.Name, err)
	}
	// AcquireTime says when this upgrade began: kept while it is the same
	// one (the same versions), restarted for another.
	acquired := cur.Spec.AcquireTime
	if acquired == nil || cur.Annotations[AnnotationManifest] != c.Manifest || cur.Annotations[AnnotationRunning] != c.Running {
		acquired = want.Spec.RenewTime
	}
	cur = cur.DeepCopy()
	cur.Labels, cur.Annotations = want.Labels, want.Annotations
	cur.Spec = want.Spec
	cur.Spec.AcquireTime = acquired
	if _, err := leases.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update lease %s/%s: %w", LeaseNamespace, want.Name, err)
	}
	return nil
}

// release deletes node's lease; one already gone is no error.
func release(ctx context.Context, client kubernetes.Interface, node string) error {
	err := client.CoordinationV1().Leases(LeaseNamespace).Delete(ctx, LeaseName(node), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete lease %s/%s: %w", LeaseNamespace, LeaseName(node), err)
	}
	return nil
}

// MaxLeaseFor caps how long one renewal of a lease counts, whatever
// duration it claims: what agents write (Config.LeaseDuration's default).
const MaxLeaseFor = time.Minute

// leaseCondition reads a lease another agent wrote: its condition, and
// the renewal it claims and the duration it counts for. ok is false for
// a lease not of the shape agents write (holder and name disagree, no
// renew time or duration).
func leaseCondition(l *coordinationv1.Lease) (c Condition, renewed time.Time, d time.Duration, ok bool) {
	s := l.Spec
	if s.HolderIdentity == nil || l.Name != LeaseName(*s.HolderIdentity) || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
		return Condition{}, time.Time{}, 0, false
	}
	c = Condition{On: true, Node: *s.HolderIdentity,
		Manifest: bounded(l.Annotations[AnnotationManifest]), Running: bounded(l.Annotations[AnnotationRunning])}
	return c, s.RenewTime.Time, min(time.Duration(*s.LeaseDurationSeconds)*time.Second, MaxLeaseFor), true
}

// bounded keeps a value anyone who may write leases in LeaseNamespace chose
// from filling logs and the window's reason.
func bounded(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
