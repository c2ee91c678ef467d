package kubernetes_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/skewgate/skewgate/proxy/removal"
)

// TestUninstallJobRunsAsTheTools: the Job an operator renders and applies
// by hand (uninstall/job.yaml) runs as the Job `kubectl skewgate
// uninstall` creates (proxy/removal.Job), which the DaemonSet lab runs on
// nodes without a pod network: in the node's network namespace, with the
// same DNS policy, tolerations, priority, securityContext and no token.
// Without hostNetwork its pod waits for a sandbox no CNI will make
// (FailedCreatePodSandBox) on a control plane whose CNI is gone or not
// there yet, and the pins stay.
func TestUninstallJobRunsAsTheTools(t *testing.T) {
	const where = "uninstall: Job skewgate-uninstall-NODE"
	got, ok := podSpecs(t)[where]
	if !ok {
		t.Fatalf("no %s", where)
	}
	want := removal.Job(removal.Defaults(), "NODE").Spec.Template.Spec
	if !got.HostNetwork {
		t.Errorf("%s: not in the node's network namespace (hostNetwork: true): on a node without a pod network it never starts", where)
	}
	if len(got.Containers) != 1 || len(want.Containers) != 1 {
		t.Fatalf("%s: %d containers, the tool's Job %d: want one each", where, len(got.Containers), len(want.Containers))
	}
	for _, c := range []struct {
		field     string
		got, want any
	}{
		{"hostNetwork", got.HostNetwork, want.HostNetwork},
		{"dnsPolicy", got.DNSPolicy, want.DNSPolicy},
		{"tolerations", got.Tolerations, want.Tolerations},
		{"priorityClassName", got.PriorityClassName, want.PriorityClassName},
		{"restartPolicy", got.RestartPolicy, want.RestartPolicy},
		{"automountServiceAccountToken", got.AutomountServiceAccountToken, want.AutomountServiceAccountToken},
		{"securityContext", got.SecurityContext, want.SecurityContext},
		{"container securityContext", got.Containers[0].SecurityContext, want.Containers[0].SecurityContext},
		{"pin path", pinMount(got), pinMount(want)},
	} {
		if !apiequality.Semantic.DeepEqual(c.got, c.want) {
			t.Errorf("%s: %s %+v, the tool's Job has %+v", where, c.field, c.got, c.want)
		}
	}
}

// pinMount is where the bpffs is mounted in the container.
func pinMount(s corev1.PodSpec) string {
	for _, m := range s.Containers[0].VolumeMounts {
		if m.Name == "bpffs" {
			return m.MountPath
		}
	}
	return ""
}
