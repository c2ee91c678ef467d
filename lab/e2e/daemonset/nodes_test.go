package daemonset

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skewgate/skewgate/lab"
)

// TestNodesAreControlPlanes: every lab node registered through its real
// kubelet, Ready, with kubeadm's control-plane label and taint.
func TestNodesAreControlPlanes(t *testing.T) {
	c, err := plane.AdminClient(plane.Spec.Nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range plane.Spec.Nodes {
		node, err := c.CoreV1().Nodes().Get(context.Background(), n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := node.Labels[lab.ControlPlaneLabel]; !ok {
			t.Errorf("%s: no %s label: %v", n.Name, lab.ControlPlaneLabel, node.Labels)
		}
		if len(node.Spec.Taints) == 0 || node.Spec.Taints[0].Key != lab.ControlPlaneLabel {
			t.Errorf("%s: taints %v", n.Name, node.Spec.Taints)
		}
		if got := node.Status.NodeInfo.KubeletVersion; got != n.Version {
			t.Errorf("%s: kubelet %s, want %s", n.Name, got, n.Version)
		}
	}
}
