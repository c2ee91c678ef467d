package daemonset

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/lab"
)

const dsName, dsNamespace = "skewgate", "kube-system"

// applyBase applies deploy/kubernetes with the image tag set.
func applyBase(t *testing.T, tag string) {
	t.Helper()
	out, err := plane.ApplyKustomize(context.Background(), "../../../deploy/kubernetes", "skewgate", tag)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl apply -k:\n%s", out)
}

func admin(t *testing.T) kubernetes.Interface {
	t.Helper()
	c, err := plane.AdminClient(plane.Spec.Nodes[len(plane.Spec.Nodes)-1])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitRolledOut waits until every node runs a Ready pod of the
// DaemonSet's current template, with image tag.
func waitRolledOut(t *testing.T, c kubernetes.Interface, tag string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var detail string
	for {
		ds, err := c.AppsV1().DaemonSets(dsNamespace).Get(ctx, dsName, metav1.GetOptions{})
		if err == nil {
			if rolledOut(ds, tag) && podsReady(ctx, c, tag) {
				return
			}
			detail = fmt.Sprintf("%+v", ds.Status)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("DaemonSet not rolled out to %s in %s: %s\n%s", tag, timeout, detail, podsDetail(c))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func rolledOut(ds *appsv1.DaemonSet, tag string) bool {
	s, want := ds.Status, int32(len(plane.Spec.Nodes))
	return s.ObservedGeneration >= ds.Generation && s.DesiredNumberScheduled == want &&
		s.UpdatedNumberScheduled == want && s.NumberAvailable == want && s.NumberUnavailable == 0 &&
		strings.HasSuffix(ds.Spec.Template.Spec.Containers[0].Image, ":"+tag)
}

// podsReady: exactly one pod per node, each Ready and of tag (old pods
// still terminating count against it).
func podsReady(ctx context.Context, c kubernetes.Interface, tag string) bool {
	pods, err := c.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=skewgate"})
	if err != nil || len(pods.Items) != len(plane.Spec.Nodes) {
		return false
	}
	for _, p := range pods.Items {
		if !podReady(&p) || !strings.HasSuffix(p.Spec.Containers[0].Image, ":"+tag) {
			return false
		}
	}
	return true
}

// podReady: its Ready condition is true and it is not terminating.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" && c.Status == "True" {
			return p.DeletionTimestamp == nil
		}
	}
	return false
}

func podsDetail(c kubernetes.Interface) string {
	pods, err := c.CoreV1().Pods(dsNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "%s on %s: %s %+v\n", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.ContainerStatuses)
	}
	return b.String()
}

// setImage rolls the DaemonSet to tag.
func setImage(t *testing.T, c kubernetes.Interface, tag string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"skewgate","image":"skewgate:%s"}]}}}}`, tag)
	_, err := c.AppsV1().DaemonSets(dsNamespace).Patch(context.Background(), dsName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// deleteDaemonSet deletes it and waits until its pods are gone.
func deleteDaemonSet(t *testing.T, c kubernetes.Interface, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	fg := metav1.DeletePropagationForeground
	if err := c.AppsV1().DaemonSets(dsNamespace).Delete(ctx, dsName, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	for {
		pods, err := c.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=skewgate"})
		if err == nil && len(pods.Items) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("skewgate pods still there %s after deleting the DaemonSet:\n%s", timeout, podsDetail(c))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// podLogs is the tail of a skewgate pod's log, which the apiserver fetches
// from the pod's kubelet.
func podLogs(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	ctx := context.Background()
	pods, err := c.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=skewgate"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("list pods: %v", err)
	}
	tail := int64(3)
	out, err := c.CoreV1().Pods(dsNamespace).GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
	if err != nil || len(out) == 0 {
		t.Fatalf("logs of %s: %v %s", pods.Items[0].Name, err, out)
	}
	return string(out)
}

// podOn is the name of the DaemonSet's pod on node.
func podOn(t *testing.T, c kubernetes.Interface, node string) string {
	t.Helper()
	pods, err := c.CoreV1().Pods(dsNamespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=skewgate", FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("skewgate pods on %s: %v %v", node, pods, err)
	}
	return pods.Items[0].Name
}

// deletePod deletes a pod and waits until it is gone (the DaemonSet then
// starts another).
func deletePod(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.CoreV1().Pods(dsNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := c.CoreV1().Pods(dsNamespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s still there a minute after its deletion: %v", name, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// deleteNodePod deletes node n's skewgate pod, as an eviction or a drain
// would, and returns its name.
func deleteNodePod(t *testing.T, c kubernetes.Interface, n lab.Node) string {
	t.Helper()
	ctx := context.Background()
	pods, err := c.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=skewgate", FieldSelector: "spec.nodeName=" + n.Name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("%s's skewgate pod: %v (%d pods)", n.Name, err, len(pods.Items))
	}
	name := pods.Items[0].Name
	if err := c.CoreV1().Pods(dsNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// waitReplaced waits until node n runs one skewgate pod, Ready, not old,
// and old is gone; it returns how long that took.
func waitReplaced(t *testing.T, c kubernetes.Interface, n lab.Node, old string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		pods, err := c.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=skewgate", FieldSelector: "spec.nodeName=" + n.Name})
		if err == nil && len(pods.Items) == 1 && pods.Items[0].Name != old && podReady(&pods.Items[0]) {
			return time.Since(start)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s's skewgate pod %s not replaced in %s:\n%s", n.Name, old, timeout, podsDetail(c))
		case <-time.After(250 * time.Millisecond):
		}
	}
}
