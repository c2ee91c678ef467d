package upgrade

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// agent is one node's Signal, as `skewgate run` starts it.
type agent struct {
	sig      *Signal
	manifest string
	mu       sync.Mutex
	running  string
	changes  atomic.Int32
	stop     context.CancelFunc
	done     chan struct{}
}

func startAgent(t *testing.T, client kubernetes.Interface, node, running, image string) *agent {
	t.Helper()
	return startAgentWith(t, client, Config{Node: node}, running, image)
}

// startAgentWith starts cfg's agent; its Manifest, Running and OnChange
// are the agent's.
func startAgentWith(t *testing.T, client kubernetes.Interface, cfg Config, running, image string) *agent {
	t.Helper()
	a := &agent{running: running, done: make(chan struct{})}
	if image != "" { // "": not a kubeadm node, no manifest watched
		a.manifest = filepath.Join(t.TempDir(), "kube-apiserver.yaml")
		writeManifest(t, a.manifest, image)
	}
	cfg.Manifest, cfg.Running, cfg.OnChange = a.manifest, a.version, func() { a.changes.Add(1) }
	sig, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.sig = sig
	sig.pollOnly = true // a synctest bubble: manifestEvents' own test watches the directory
	ctx, cancel := context.WithCancel(context.Background())
	a.stop = cancel
	go func() { defer close(a.done); sig.Run(ctx, client) }()
	return a
}

func (a *agent) version() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running
}

func (a *agent) setVersion(v string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.running = v
}

func (a *agent) halt() {
	a.stop()
	<-a.done
}

func wantSignal(t *testing.T, who string, a *agent, on bool, reason string) {
	t.Helper()
	gotOn, got := a.sig.Signal()
	if gotOn != on || got != reason {
		t.Fatalf("%s: Signal() = %t, %q; want %t, %q", who, gotOn, got, on, reason)
	}
}

func getLease(t *testing.T, client kubernetes.Interface, node string) (*coordinationv1.Lease, bool) {
	t.Helper()
	l, err := client.CoordinationV1().Leases(LeaseNamespace).Get(context.Background(), LeaseName(node), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return l, true
}

// TestUpgradeReachesEveryNode: node-a's manifest names a new version; its
// lease reaches node-b, whose Signal turns on and calls OnChange; the
// lease is renewed while the upgrade lasts and deleted when node-a's
// apiserver runs the new version, which turns node-b off again.
func TestUpgradeReachesEveryNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset()
		const old, new = "registry.k8s.io/kube-apiserver:v1.35.4", "registry.k8s.io/kube-apiserver:v1.36.3"
		a := startAgent(t, client, "node-a", "v1.35.4", old)
		b := startAgent(t, client, "node-b", "v1.35.4", old)
		defer b.halt()
		defer a.halt()
		synctest.Wait()
		wantSignal(t, "one version", b, false, "")
		if _, ok := getLease(t, client, "node-a"); ok {
			t.Fatal("a lease while no upgrade is under way")
		}

		writeManifest(t, a.manifest, new)
		time.Sleep(time.Second) // node-a's next poll
		synctest.Wait()
		reason := "node node-a: manifest names kube-apiserver v1.36.3, running v1.35.4"
		wantSignal(t, "node-a itself", a, true, reason)
		wantSignal(t, "node-b", b, true, reason)
		if b.changes.Load() != 1 {
			t.Errorf("node-b's OnChange called %d times, want once", b.changes.Load())
		}
		l, ok := getLease(t, client, "node-a")
		if !ok {
			t.Fatal("no lease for node-a's upgrade")
		}
		if l.Labels[Label] != "true" || *l.Spec.HolderIdentity != "node-a" || *l.Spec.LeaseDurationSeconds != 60 ||
			l.Annotations[AnnotationManifest] != "v1.36.3" || l.Annotations[AnnotationRunning] != "v1.35.4" {
			t.Errorf("lease %+v %+v", l.ObjectMeta, l.Spec)
		}
		if !l.Spec.RenewTime.Time.Equal(time.Now()) || !l.Spec.AcquireTime.Time.Equal(time.Now()) {
			t.Errorf("lease renewed %v, acquired %v; want now, %v", l.Spec.RenewTime, l.Spec.AcquireTime, time.Now())
		}
		acquired := l.Spec.AcquireTime.Time

		// Two minutes of the upgrade (the apiserver's restart): renewed
		// every 10 s, so node-b never sees it lapse.
		a.setVersion("")
		for range 12 {
			time.Sleep(10 * time.Second)
			synctest.Wait()
			wantSignal(t, "node-b during the restart", b, true, reason)
		}
		l, _ = getLease(t, client, "node-a")
		if age := time.Since(l.Spec.RenewTime.Time); age > 10*time.Second || !l.Spec.AcquireTime.Time.Equal(acquired) {
			t.Errorf("lease renewed %s ago, acquired %v: want within 10 s, still %v", age, l.Spec.AcquireTime, acquired)
		}

		a.setVersion("v1.36.3")
		time.Sleep(time.Second)
		synctest.Wait()
		wantSignal(t, "node-a upgraded", a, false, "")
		wantSignal(t, "node-b after node-a's upgrade", b, false, "")
		if _, ok := getLease(t, client, "node-a"); ok {
			t.Error("node-a's lease kept after its upgrade ended")
		}
		if b.changes.Load() != 2 {
			t.Errorf("node-b's OnChange called %d times, want twice (on, off)", b.changes.Load())
		}
	})
}

// TestLeaseLapses: an agent that stops mid-upgrade leaves its lease, which
// holds for its duration and no longer: the other nodes turn off when it
// expires and call OnChange, though no informer event says so — node-c,
// which watches no manifest, has nothing but the expiry to wake it.
func TestLeaseLapses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset()
		a := startAgent(t, client, "node-a", "v1.36.3", "registry.k8s.io/kube-apiserver:v1.35.4")
		b := startAgent(t, client, "node-b", "v1.36.3", "registry.k8s.io/kube-apiserver:v1.36.3")
		c := startAgent(t, client, "node-c", "", "")
		defer c.halt()
		defer b.halt()
		synctest.Wait()
		reason := "node node-a: manifest names kube-apiserver v1.35.4, running v1.36.3"
		wantSignal(t, "node-b during node-a's rollback", b, true, reason)
		wantSignal(t, "node-c during node-a's rollback", c, true, reason)
		a.halt()
		if _, ok := getLease(t, client, "node-a"); !ok {
			t.Fatal("a stopping agent deleted its lease: a restart mid-upgrade would drop the signal")
		}
		time.Sleep(59 * time.Second)
		synctest.Wait()
		wantSignal(t, "node-b, 59 s after node-a's last renewal", b, true, reason)
		before, beforeC := b.changes.Load(), c.changes.Load()
		time.Sleep(time.Second)
		synctest.Wait()
		wantSignal(t, "node-b, 60 s after", b, false, "")
		if b.changes.Load() != before+1 || c.changes.Load() != beforeC+1 {
			t.Errorf("OnChange called %d times on node-b and %d on node-c at the expiry, want once each",
				b.changes.Load()-before, c.changes.Load()-beforeC)
		}
		if on, _ := c.sig.Signal(); on {
			t.Error("node-c: on after the lease expired")
		}
	})
}

// TestOtherLeases: leases not of the agents' shape count for nothing, and
// an earlier run's lease of this node, with no upgrade under way, is
// deleted at start and never counted.
func TestOtherLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := metav1.NewMicroTime(time.Now())
		secs := int32(3600)
		lease := func(name, holder string) *coordinationv1.Lease {
			return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: LeaseNamespace, Labels: map[string]string{Label: "true"},
				Annotations: map[string]string{AnnotationManifest: "v9.9.9", AnnotationRunning: "v1.36.3"}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &now}}
		}
		client := fake.NewClientset(
			lease(LeaseName("node-c"), "node-d"), // holder and name disagree
			lease("kube-controller-manager", "node-c"),
			lease(LeaseName("node-a"), "node-a"), // node-a's, from before its restart
		)
		a := startAgent(t, client, "node-a", "v1.36.3", "registry.k8s.io/kube-apiserver:v1.36.3")
		defer a.halt()
		synctest.Wait()
		wantSignal(t, "node-a", a, false, "")
		if _, ok := getLease(t, client, "node-a"); ok {
			t.Error("node-a's stale lease not deleted")
		}
		if a.changes.Load() != 0 {
			t.Errorf("OnChange called %d times with nothing on", a.changes.Load())
		}
	})
}

// TestRestartMidUpgrade: an agent restarted while its apiserver is down
// for the upgrade (its version not read yet) keeps the lease its
// predecessor wrote, and counts it, until it can decide; then the
// upgrade's end deletes it.
func TestRestartMidUpgrade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset()
		before := startAgent(t, client, "node-a", "v1.35.4", "registry.k8s.io/kube-apiserver:v1.36.3")
		synctest.Wait()
		before.halt()

		a := startAgent(t, client, "node-a", "", "registry.k8s.io/kube-apiserver:v1.36.3")
		defer a.halt()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if _, ok := getLease(t, client, "node-a"); !ok {
			t.Fatal("the restarted agent deleted the lease before it could decide")
		}
		wantSignal(t, "the restarted agent", a, true, "node node-a: manifest names kube-apiserver v1.36.3, running v1.35.4")

		a.setVersion("v1.36.3")
		time.Sleep(time.Second)
		synctest.Wait()
		wantSignal(t, "the new apiserver up", a, false, "")
		if _, ok := getLease(t, client, "node-a"); ok {
			t.Error("the lease kept after the upgrade ended")
		}
	})
}

// TestManifestReadOnItsEvent: kubeadm renames a new manifest into place;
// the signal turns on from the directory's event, as the kubelet's restart
// of the apiserver begins, not at the next poll (an hour here).
func TestManifestReadOnItsEvent(t *testing.T) {
	client := fake.NewClientset()
	manifest := filepath.Join(t.TempDir(), "kube-apiserver.yaml")
	writeManifest(t, manifest, "registry.k8s.io/kube-apiserver:v1.35.4")
	sig, err := New(Config{Node: "node-a", Manifest: manifest, Running: func() string { return "v1.35.4" }, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sig.Run(ctx, client) }()
	defer func() { cancel(); <-done }()
	// The first poll, then the watch: an edit of another file in the
	// directory (the etcd manifest) reads nothing new.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10 s (the poll is an hour away)", what)
			}
		}
	}
	time.Sleep(200 * time.Millisecond)
	if on, _ := sig.Signal(); on {
		t.Fatal("on before the manifest changed")
	}
	writeManifest(t, filepath.Join(filepath.Dir(manifest), "etcd.yaml"), "registry.k8s.io/kube-apiserver:v1.36.3")
	time.Sleep(200 * time.Millisecond)
	if on, _ := sig.Signal(); on {
		t.Fatal("on from another manifest of the directory")
	}
	writeManifest(t, manifest, "registry.k8s.io/kube-apiserver:v1.36.3")
	waitFor("the signal on", func() bool { on, _ := sig.Signal(); return on })
	waitFor("node-a's lease written", func() bool {
		_, err := client.CoordinationV1().Leases(LeaseNamespace).Get(ctx, LeaseName("node-a"), metav1.GetOptions{})
		return err == nil
	})
}

// TestLeaseRetriedSoon: the lease write that tells the other nodes may
// reach the local apiserver as it stops; it is tried again a second later,
// not at the next renewal ten seconds on.
func TestLeaseRetriedSoon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset()
		var refused atomic.Int32
		client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			if refused.Add(1) == 1 {
				return true, nil, apierrors.NewServiceUnavailable("apiserver is shutting down")
			}
			return false, nil, nil
		})
		a := startAgent(t, client, "node-a", "v1.35.4", "registry.k8s.io/kube-apiserver:v1.35.4")
		defer a.halt()
		synctest.Wait()
		writeManifest(t, a.manifest, "registry.k8s.io/kube-apiserver:v1.36.3")
		time.Sleep(time.Second) // the poll: the write refused
		synctest.Wait()
		if _, ok := getLease(t, client, "node-a"); ok || refused.Load() != 1 {
			t.Fatalf("lease written at the refused attempt (attempts %d)", refused.Load())
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if _, ok := getLease(t, client, "node-a"); !ok {
			t.Fatalf("no lease a second after the refused write (attempts %d)", refused.Load())
		}
	})
}

// TestForgedLeaseBounded: whoever may write Leases in skewgate's
// namespace and Jobs in kube-system holds every node's window no longer than an agent's lease
// or kubeadm's Job would: a renewal dated 30 years ahead counts a minute
// from when it was first seen, a duration of 34 years a minute from its
// renewal, a Job dated an hour ahead two minutes from when it was first
// seen; a renewal in the past still counts from itself.
func TestForgedLeaseBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		forged := func(holder string, renewed time.Time, secs int32) *coordinationv1.Lease {
			rt := metav1.NewMicroTime(renewed)
			return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName(holder), Namespace: LeaseNamespace, Labels: map[string]string{Label: "true"},
				Annotations: map[string]string{AnnotationManifest: "v1.36.3", AnnotationRunning: "v1.35.4"}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &rt}}
		}
		const year = 365 * 24 * time.Hour
		client := fake.NewClientset(
			forged("node-f", now.Add(30*year), 60),
			forged("node-g", now, int32(34*year/time.Second)),
			forged("node-p", now.Add(-30*time.Second), 60),
		)
		c := startAgentWith(t, client, Config{Node: "node-c", Announcements: true}, "", "")
		defer c.halt()
		synctest.Wait()
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "upgrade-health-check-1764698400123", Namespace: metav1.NamespaceSystem,
			CreationTimestamp: metav1.NewTime(now.Add(time.Hour))}}
		if _, err := client.BatchV1().Jobs(metav1.NamespaceSystem).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		reason := func(nodes ...string) string {
			var out []string
			for _, n := range nodes {
				out = append(out, "node "+n+": manifest names kube-apiserver v1.36.3, running v1.35.4")
			}
			return strings.Join(out, "; ")
		}
		announced := "kubeadm upgrade announced: Job kube-system/upgrade-health-check-1764698400123 (the preflight of kubeadm upgrade apply, or plan)"
		wantSignal(t, "at first sight", c, true, announced+"; "+reason("node-f", "node-g", "node-p"))

		time.Sleep(30 * time.Second)
		synctest.Wait()
		wantSignal(t, "30 s on: the lease renewed 30 s before it was seen has lapsed", c, true, announced+"; "+reason("node-f", "node-g"))
		time.Sleep(30 * time.Second)
		synctest.Wait()
		wantSignal(t, "60 s on: the forged leases have lapsed", c, true, announced)
		time.Sleep(60 * time.Second)
		synctest.Wait()
		wantSignal(t, "2 min on: the Job dated ahead has lapsed", c, false, "")
	})
}
