package daemonset

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/proxy/removal"
	"github.com/skewgate/skewgate/proxy/upgrade"
)

// removal: installed with kustomize, then with Helm; each time removed
// as docs/deploy.md says (kubectl delete -k, helm uninstall), then
// `kubectl skewgate uninstall` (the first time as a user holding only
// the rights docs/security.md lists): on every node no pin, state file or
// hand-over socket is left, in the cluster no switch ConfigMap, upgrade
// Lease (new namespace or old), Job or Job pod.
func removalRounds(t *testing.T) {
	plugin := pluginBinary(t)
	c := admin(t)
	// As a user holding only what docs/security.md lists (grantUninstall).
	t.Run("kustomize", func(t *testing.T) {
		applyBase(t, images[1])
		grantUninstall(t, c)
		removeRound(t, c, plugin, func() {
			t.Logf("kubectl delete -k:\n%s", kubectl(t, "delete", "-k", filepath.Join(plane.Dir, "overlay")))
		}, "--image=skewgate:"+images[1], "--as="+uninstaller)
	})
	t.Run("helm", func(t *testing.T) {
		h, err := lab.EnsureHelm(context.Background(), lab.DefaultCacheDir(), os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		helm := func(args ...string) string {
			t.Helper()
			out, err := exec.Command(h, append(args, "--kubeconfig", adminKubeconfig())...).CombinedOutput()
			if err != nil {
				t.Fatalf("helm %v: %v\n%s", args, err, out)
			}
			return string(out)
		}
		t.Logf("helm install:\n%s", helm("install", "skewgate", "../../../deploy/helm/skewgate", "--namespace", dsNamespace,
			"--set", "image.repository=skewgate", "--set", "image.tag="+images[1]))
		// No --image: the command takes the terminating pods'.
		removeRound(t, c, plugin, func() { t.Logf("helm uninstall:\n%s", helm("uninstall", "skewgate", "--namespace", dsNamespace)) })
	})
}

// removeRound waits for the installed DaemonSet, leaves what an operator
// and skewgate leave behind, removes skewgate with remove and the plugin,
// and checks that nothing is left.
func removeRound(t *testing.T, c kubernetes.Interface, plugin string, remove func(), args ...string) {
	waitRolledOut(t, c, images[1], 3*time.Minute)
	waitSteering(t, true, time.Minute)
	for _, n := range plane.Spec.Nodes {
		deadline := time.Now().Add(30 * time.Second)
		for _, err := os.Stat(stateFile(n)); err != nil; _, err = os.Stat(stateFile(n)) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the DaemonSet's state file: %v", n.Name, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	remove()
	waitDaemonSetGone(t, c)
	leftovers(t, c)
	cmd := exec.Command(plugin, append([]string{"uninstall", "--kubeconfig", adminKubeconfig()}, args...)...)
	out, err := cmd.CombinedOutput()
	t.Logf("kubectl skewgate uninstall %v:\n%s", args, out)
	if err != nil {
		t.Fatalf("kubectl skewgate uninstall: %v", err)
	}
	for _, n := range plane.Spec.Nodes {
		for _, p := range []string{lab.KubeletPinPath(n), stateFile(n), filepath.Join(filepath.Dir(stateFile(n)), "state.handover.sock")} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: %s still there: %v", n.Name, p, err)
			}
		}
		if !strings.Contains(string(out), n.Name+": removed /var/lib/skewgate/state.json\n") {
			t.Errorf("the output does not say %s's state file was removed", n.Name)
		}
	}
	nothingLeft(t, c)
}

// leftovers: the switch an operator created and an upgrade Lease an
// older skewgate wrote in kube-system.
func leftovers(t *testing.T, c kubernetes.Interface) {
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: removal.SwitchConfigMap}, Data: map[string]string{"steering": "auto"}}
	if _, err := c.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: upgrade.LeaseName(plane.Spec.Nodes[0].Name)}}
	if _, err := c.CoordinationV1().Leases("kube-system").Create(ctx, l, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func nothingLeft(t *testing.T, c kubernetes.Interface) {
	ctx := context.Background()
	if _, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, removal.SwitchConfigMap, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the switch ConfigMap: %v, want not found", err)
	}
	for _, ns := range []string{upgrade.LeaseNamespace, "kube-system"} {
		ls, err := c.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls.Items {
			if strings.HasPrefix(l.Name, upgrade.LeasePrefix) {
				t.Errorf("lease %s/%s left", ns, l.Name)
			}
		}
	}
	jobs, err := c.BatchV1().Jobs(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: removal.JobLabel})
	if err != nil || len(jobs.Items) != 0 {
		t.Errorf("uninstall jobs left: %v %v", jobs, err)
	}
	pods, err := c.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: removal.JobLabel})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("uninstall pods left: %v %v", pods, err)
	}
}

func waitDaemonSetGone(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := c.AppsV1().DaemonSets(dsNamespace).Get(context.Background(), dsName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the DaemonSet still there a minute after its removal: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stateFile is node n's /var/lib/skewgate/state.json as the host sees it.
func stateFile(n lab.Node) string {
	return filepath.Join(plane.Dir, "nodes", n.Name, "skewgate", "state.json")
}

func adminKubeconfig() string {
	return lab.KubeconfigPath(plane.Dir, plane.Spec.Nodes[len(plane.Spec.Nodes)-1].Name)
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	k, err := plane.Kubectl(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(k, append(args, "--kubeconfig", adminKubeconfig())...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
	return string(out)
}
