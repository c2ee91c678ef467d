package upgrade

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

func TestIsKubeadmJob(t *testing.T) {
	for name, want := range map[string]bool{
		"upgrade-health-check":               true, // kubeadm before 1.31
		"upgrade-health-check-1764698400123": true,
		"upgrade-health-check-":              false,
		"upgrade-health-check-x1":            false,
		"upgrade-health-check-1-2":           false,
		"my-upgrade-health-check-1764698400": false,
		"upgrade-health-checker-1764698400":  false,
	} {
		if got := isKubeadmJob(name); got != want {
			t.Errorf("isKubeadmJob(%q) = %t, want %t", name, got, want)
		}
	}
}

func createJob(t *testing.T, client kubernetes.Interface, ns, name string) {
	t.Helper()
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, CreationTimestamp: metav1.NewTime(time.Now())}}
	if _, err := client.BatchV1().Jobs(ns).Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func deleteJob(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	if err := client.BatchV1().Jobs(metav1.NamespaceSystem).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestKubeadmAnnouncement: kubeadm's health-check Job turns every node's
// signal on as it is created, whether or not the node watches a manifest,
// and off when it is deleted or AnnounceFor after its creation (a Job
// left behind); other Jobs, and kubeadm's name in another namespace,
// count for nothing; an agent with Announcements off ignores it.
func TestKubeadmAnnouncement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client := fake.NewClientset()
		const image = "registry.k8s.io/kube-apiserver:v1.36.3"
		a := startAgentWith(t, client, Config{Node: "node-a", Announcements: true}, "v1.36.3", image)
		c := startAgentWith(t, client, Config{Node: "node-c", Announcements: true}, "", "")
		off := startAgentWith(t, client, Config{Node: "node-x"}, "v1.36.3", image)
		defer off.halt()
		defer c.halt()
		defer a.halt()
		synctest.Wait()

		createJob(t, client, metav1.NamespaceSystem, "backup-29412345")
		createJob(t, client, "default", "upgrade-health-check-1764698400000")
		synctest.Wait()
		wantSignal(t, "other Jobs", a, false, "")

		createJob(t, client, metav1.NamespaceSystem, "upgrade-health-check-1764698400123")
		synctest.Wait()
		reason := "kubeadm upgrade announced: Job kube-system/upgrade-health-check-1764698400123 (the preflight of kubeadm upgrade apply, or plan)"
		wantSignal(t, "node-a, the Job created", a, true, reason)
		wantSignal(t, "node-c (no manifest), the Job created", c, true, reason)
		wantSignal(t, "announcements off", off, false, "")
		if n := c.changes.Load(); n != 1 {
			t.Errorf("node-c's OnChange called %d times, want once", n)
		}

		time.Sleep(10 * time.Second) // kubeadm waits for the Job, then deletes it
		deleteJob(t, client, "upgrade-health-check-1764698400123")
		synctest.Wait()
		wantSignal(t, "node-a, the Job deleted", a, false, "")

		// A Job kubeadm could not delete counts for AnnounceFor.
		createJob(t, client, metav1.NamespaceSystem, "upgrade-health-check-1764698500000")
		synctest.Wait()
		wantSignal(t, "node-c, a second Job", c, true, "kubeadm upgrade announced: Job kube-system/upgrade-health-check-1764698500000 (the preflight of kubeadm upgrade apply, or plan)")
		before := c.changes.Load()
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		wantSignal(t, "node-c, 2 min after the Job's creation", c, false, "")
		if n := c.changes.Load() - before; n != 1 {
			t.Errorf("node-c's OnChange called %d times at the Job's expiry, want once", n)
		}
	})
}
