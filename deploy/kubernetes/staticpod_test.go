package kubernetes_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/skewgate/skewgate/deploy/kubernetes"
)

// TestStaticPod: the static pod is the base DaemonSet's pod with a
// kubeconfig file for its ServiceAccount: only the pki files it reads,
// no API object referenced, the operator's image and flags.
func TestStaticPod(t *testing.T) {
	pod, err := kubernetes.StaticPod{Image: "registry.example/skewgate:v9", Args: []string{
		"--steer-address=10.0.0.1:6443", "--local-apiserver=https://127.0.0.1:7443"}}.Pod()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations(pod.Spec) {
		t.Error(v)
	}
	ds := podSpecs(t)["base: DaemonSet skewgate"]
	c, dc := pod.Spec.Containers[0], ds.Containers[0]
	if pod.Kind != "Pod" || pod.Namespace != "kube-system" || c.Image != "registry.example/skewgate:v9" {
		t.Errorf("static pod %s %s/%s image %s", pod.Kind, pod.Namespace, pod.Name, c.Image)
	}
	if pod.Spec.ServiceAccountName != "" || pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("static pod: service account %q, automount %v: a kubelet runs static pods without API objects", pod.Spec.ServiceAccountName, pod.Spec.AutomountServiceAccountToken)
	}
	if !pod.Spec.HostNetwork || !pod.Spec.HostPID || !slices.Equal(c.SecurityContext.Capabilities.Add, dc.SecurityContext.Capabilities.Add) {
		t.Errorf("static pod: hostNetwork %t, hostPID %t, capabilities %v: want the DaemonSet's", pod.Spec.HostNetwork, pod.Spec.HostPID, c.SecurityContext.Capabilities.Add)
	}
	// The soft memory limit follows the container's limit in both forms.
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "SKEWGATE_MEMORY_LIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory"
	}) {
		t.Errorf("static pod env %v: no SKEWGATE_MEMORY_LIMIT from limits.memory", c.Env)
	}
	for _, want := range []string{"--kubeconfig=/etc/kubernetes/skewgate.conf", "--steer-address=10.0.0.1:6443", "--local-apiserver=https://127.0.0.1:7443", "--steering"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("static pod args %v: no %s", c.Args, want)
		}
	}
	if slices.Contains(c.Args, "--local-apiserver=https://127.0.0.1:6443") {
		t.Errorf("static pod args %v: the DaemonSet's --local-apiserver kept beside the operator's", c.Args)
	}
	mounted := map[string]bool{}
	for _, m := range hostMounts(pod.Spec, c) {
		mounted[m.host+" "+m.typ] = m.readOnly
	}
	if ro, ok := mounted["/etc/kubernetes/skewgate.conf File"]; !ok || !ro {
		t.Errorf("static pod mounts %v: want /etc/kubernetes/skewgate.conf, a read-only File", mounted)
	}
	if len(mounted) != len(hostMounts(ds, dc))+1 {
		t.Errorf("static pod mounts %v: want the DaemonSet's and the kubeconfig", mounted)
	}
}

// TestStaticPodPKIDir: another pki directory moves every host path, mount
// and flag that named kubeadm's.
func TestStaticPodPKIDir(t *testing.T) {
	pod, err := kubernetes.StaticPod{Image: "skewgate:v9", PKIDir: "/srv/pki/"}.Pod()
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	var files int
	for _, m := range hostMounts(pod.Spec, c) {
		if strings.HasPrefix(m.host, "/srv/pki/") {
			files++
			if m.pod != m.host || m.typ != string(corev1.HostPathFile) {
				t.Errorf("mount %+v: want the moved file at the same path", m)
			}
		}
	}
	if files != 6 {
		t.Errorf("%d host files under /srv/pki, want the six", files)
	}
	for _, a := range c.Args {
		if strings.Contains(a, kubernetes.PKIDir) {
			t.Errorf("arg %s still names %s", a, kubernetes.PKIDir)
		}
	}
	if !slices.Contains(c.Args, "--tls-cert-file=/srv/pki/apiserver.crt") {
		t.Errorf("args %v: no --tls-cert-file=/srv/pki/apiserver.crt", c.Args)
	}
}

func TestStaticPodNeedsImage(t *testing.T) {
	if _, err := (kubernetes.StaticPod{}).Pod(); !errors.Is(err, kubernetes.ErrNoImage) {
		t.Errorf("no image: %v, want ErrNoImage", err)
	}
}

// The base (and with it the static pod and the chart's default) names no
// --local-apiserver: skewgate takes the port from the apiserver's manifest,
// which it mounts, so kubeadm's bindPort 6444 behind an on-node HAProxy on
// 6443 works as kubeadm's default 6443 does.
func TestBaseFollowsTheAPIServerManifest(t *testing.T) {
	ds := podSpecs(t)["base: DaemonSet skewgate"]
	c := ds.Containers[0]
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--local-apiserver=") }) {
		t.Errorf("base args %v: a fixed --local-apiserver would take an HAProxy on 6443 for the apiserver", c.Args)
	}
	if !slices.Contains(c.Args, "--apiserver-manifest=/etc/kubernetes/manifests/kube-apiserver.yaml") ||
		!slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/etc/kubernetes/manifests" }) {
		t.Errorf("base: the apiserver's manifest not read (args %v)", c.Args)
	}
}
