package status

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// dsUID is the UID of the DaemonSet kube-system/skewgate of the fixtures.
const dsUID = "d5e7"

// daemonSet is kube-system/skewgate, as the base makes it.
func daemonSet() *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: DaemonSetName, Namespace: DefaultNamespace, UID: dsUID}}
}

// controlPlane is a control-plane node with addrs.
func controlPlane(name string, addrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{ControlPlaneLabel: ""}}}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	return n
}

// pod is a pod of the DaemonSet kube-system/skewgate.
func pod(name, ns, node, hostIP string, labels map[string]string, args ...string) *corev1.Pod {
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: DaemonSetName, UID: dsUID, Controller: &yes}}},
		Spec:   corev1.PodSpec{NodeName: node, HostNetwork: true, Containers: []corev1.Container{{Name: "skewgate", Args: args}}},
		Status: corev1.PodStatus{HostIP: hostIP, Phase: corev1.PodRunning},
	}
}

// Every skewgate pod is a target at its host IP and the port of its
// --secure-admin-address, sorted by node; a pod that has neither says why.
func TestTargets(t *testing.T) {
	sg := map[string]string{"app.kubernetes.io/name": "skewgate"}
	pending := pod("skewgate-p", "kube-system", "node-d", "", sg, "run", "--secure-admin-address=$(NODE_IP):16444")
	pending.Status.Phase = corev1.PodPending
	cs := fake.NewClientset(
		pod("skewgate-b", "kube-system", "node-b", "fd00::2", sg, "run", "--secure-admin-address", "$(NODE_IP):17444"),
		pod("skewgate-a", "kube-system", "node-a", "198.18.0.1", sg, "run", "--steering", "--secure-admin-address=$(NODE_IP):16444", "--metrics-bind-address="),
		pod("skewgate-c", "kube-system", "node-c", "198.18.0.3", sg, "run", "--metrics-bind-address=127.0.0.1:16444"),
		pending,
		pod("other", "kube-system", "node-a", "198.18.0.1", map[string]string{"app.kubernetes.io/name": "other"}, "--secure-admin-address=:1"),
		pod("skewgate-x", "default", "node-a", "198.18.0.1", sg, "--secure-admin-address=:1"),
		daemonSet(), controlPlane("node-a", "198.18.0.1"), controlPlane("node-b", "fd00::2"), controlPlane("node-c", "198.18.0.3"), controlPlane("node-d"),
	)
	got, err := Targets(context.Background(), cs, DefaultNamespace, DefaultSelector, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ node, url, err string }{
		{"node-a", "https://198.18.0.1:16444", ""},
		{"node-b", "https://[fd00::2]:17444", ""},
		{"node-c", "", "has no --secure-admin-address"},
		{"node-d", "", "skewgate-p has no host IP yet (phase \"Pending\")"},
	}
	if len(got) != len(want) {
		t.Fatalf("targets %+v, want %d", got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Node != w.node || g.URL != w.url || (w.err == "") != (g.Err == nil) || g.Err != nil && !strings.Contains(g.Err.Error(), w.err) {
			t.Errorf("target %d: %+v, want %+v", i, g, w)
		}
	}
	got, err = Targets(context.Background(), cs, DefaultNamespace, DefaultSelector, 20000)
	if err != nil {
		t.Fatal(err)
	}
	if got[2].URL != "https://198.18.0.3:20000" || got[2].Err != nil {
		t.Errorf("with a port given, node-c: %+v", got[2])
	}
}

// Issue 41: kubectl skewgate sent the operator's token to any pod in
// kube-system with skewgate's label, a worker's mirror pod among them. A
// pod is a target only when it is the DaemonSet's (by UID) or a static
// pod's mirror, on a control-plane node, at one of that node's addresses;
// anything else says why, and gets no URL to send to.
func TestTargetsProveThePod(t *testing.T) {
	sg := map[string]string{"app.kubernetes.io/name": "skewgate"}
	args := []string{"run", "--secure-admin-address=$(NODE_IP):16444"}
	good := pod("skewgate-a", "kube-system", "node-a", "198.18.0.1", sg, args...)
	foreign := pod("skewgate-b", "kube-system", "node-b", "198.18.0.2", sg, args...)
	foreign.OwnerReferences[0].UID = "another-daemonset"
	orphan := pod("skewgate-c", "kube-system", "node-c", "198.18.0.3", sg, args...)
	orphan.OwnerReferences = nil
	mirrorOn := func(name, node, ip string) *corev1.Pod {
		p := pod(name, "kube-system", node, ip, sg, args...)
		yes := true
		p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: "n", Controller: &yes}}
		return p
	}
	static := mirrorOn("skewgate-static-node-d", "node-d", "198.18.0.4")
	worker := mirrorOn("skewgate-w1", "worker-1", "198.18.0.9")
	elsewhere := pod("skewgate-e", "kube-system", "node-e", "198.18.0.99", sg, args...)
	workerNode := controlPlane("worker-1", "198.18.0.9")
	workerNode.Labels = map[string]string{"node-role.kubernetes.io/worker": ""}
	cs := fake.NewClientset(good, foreign, orphan, static, worker, elsewhere, daemonSet(),
		controlPlane("node-a", "198.18.0.1"), controlPlane("node-b", "198.18.0.2"), controlPlane("node-c", "198.18.0.3"),
		controlPlane("node-d", "198.18.0.4"), controlPlane("node-e", "198.18.0.5"), workerNode)
	got, err := Targets(context.Background(), cs, DefaultNamespace, DefaultSelector, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"skewgate-a":             "",
		"skewgate-b":             "neither the DaemonSet",
		"skewgate-c":             "neither the DaemonSet",
		"skewgate-static-node-d": "",
		"skewgate-w1":            "not a control-plane node",
		"skewgate-e":             "none of node node-e's addresses",
	}
	for _, g := range got {
		w, ok := want[g.Pod]
		if !ok {
			t.Errorf("unexpected target %+v", g)
			continue
		}
		switch {
		case w == "" && (g.Err != nil || g.URL == ""):
			t.Errorf("%s: %+v, want a target", g.Pod, g)
		case w != "" && (g.Err == nil || !strings.Contains(g.Err.Error(), w) || g.URL != ""):
			t.Errorf("%s: %+v, want refused (%s) without a URL", g.Pod, g, w)
		}
	}

	// Without the DaemonSet (the static-pod form) only mirror pods pass.
	cs = fake.NewClientset(good, static, controlPlane("node-a", "198.18.0.1"), controlPlane("node-d", "198.18.0.4"))
	got, err = Targets(context.Background(), cs, DefaultNamespace, DefaultSelector, 0)
	if err != nil || len(got) != 2 || got[0].Err == nil || got[1].Err != nil {
		t.Errorf("no DaemonSet: %+v %v; want the DaemonSet's pod refused, the static pod's mirror a target", got, err)
	}
}
