package status

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func pod(name, ns, node, hostIP string, labels map[string]string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, HostNetwork: true, Containers: []corev1.Container{{Name: "skewgate", Args: args}}},
		Status:     corev1.PodStatus{HostIP: hostIP, Phase: corev1.PodRunning},
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
