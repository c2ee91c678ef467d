package upgrade

import (
	"os"
	"regexp"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes/fake"
)

// olderLease is the lease an agent before the move to LeaseNamespace
// wrote for node, in kube-system, renewed at renewed.
func olderLease(node string, renewed time.Time, secs int32) *coordinationv1.Lease {
	rt := metav1.NewMicroTime(renewed)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: LeaseName(node), Namespace: LegacyLeaseNamespace, Labels: map[string]string{Label: "true"},
			Annotations: map[string]string{AnnotationManifest: "v1.36.3", AnnotationRunning: "v1.35.4"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &node, LeaseDurationSeconds: &secs, RenewTime: &rt},
	}
}

// TestOlderAgentsLeaseReachesThisOne: during skewgate's rollout from a
// build that kept the upgrade Leases in kube-system, an old agent's lease
// there opens this agent's window as its own namespace's would, bounded
// the same (a renewal dated 30 years ahead counts a minute from when it
// was seen); it ends when the lease goes. This agent writes nothing in
// kube-system, its own upgrade included: it may not.
func TestOlderAgentsLeaseReachesThisOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		const year = 365 * 24 * time.Hour
		leases := coordinationv1.SchemeGroupVersion.WithResource("leases")
		client := fake.NewClientset(olderLease("node-a", now, 60), olderLease("node-f", now.Add(30*year), 60))
		const old, new = "registry.k8s.io/kube-apiserver:v1.35.4", "registry.k8s.io/kube-apiserver:v1.36.3"
		b := startAgent(t, client, "node-b", "v1.35.4", old)
		defer b.halt()
		synctest.Wait()
		reason := func(node string) string {
			return "node " + node + ": manifest names kube-apiserver v1.36.3, running v1.35.4"
		}
		wantSignal(t, "an older agent's lease in kube-system", b, true, reason("node-a")+"; "+reason("node-f"))

		time.Sleep(59 * time.Second)
		// The test writes through the tracker: every action recorded is
		// the agent's.
		if err := client.Tracker().Update(leases, olderLease("node-a", time.Now(), 60), LegacyLeaseNamespace); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		wantSignal(t, "61 s on: renewed; the one dated ahead lapsed", b, true, reason("node-a"))

		// This node's own upgrade: its lease in its namespace only.
		writeManifest(t, b.manifest, new)
		time.Sleep(time.Second)
		synctest.Wait()
		if _, ok := getLease(t, client, "node-b"); !ok {
			t.Errorf("node-b's upgrade: no lease in %s", LeaseNamespace)
		}
		if err := client.Tracker().Delete(leases, LegacyLeaseNamespace, LeaseName("node-a")); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		wantSignal(t, "the older lease deleted", b, true, reason("node-b"))
		for _, a := range client.Actions() {
			if a.GetNamespace() == LegacyLeaseNamespace && a.GetVerb() != "list" && a.GetVerb() != "watch" {
				t.Errorf("the agent: %s %s in %s", a.GetVerb(), a.GetResource().Resource, LegacyLeaseNamespace)
			}
		}
	})
}

// TestLegacyNamespaceForOneMinor: LegacyLeaseNamespace is read for one
// minor only. Once the Makefile's RELEASE is past v0.1.x, remove it (and
// proxy/removal's cleanup there): no supported release writes there.
func TestLegacyNamespaceForOneMinor(t *testing.T) {
	data, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^RELEASE\s*:=\s*(\S+)$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("Makefile: no RELEASE := …")
	}
	v, err := version.ParseSemantic(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	if v.AtLeast(version.MustParseSemantic("v0.2.0")) {
		t.Errorf("RELEASE %s: agents still read upgrade Leases in %s, which only builds before v0.1.0 wrote; drop LegacyLeaseNamespace", v, LegacyLeaseNamespace)
	}
}
