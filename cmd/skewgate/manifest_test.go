package main

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/deploy/kubernetes"
)

// TestStaticPodDefaultImage: `skewgate manifest static-pod` without
// --image names skewgate's published repository at this binary's version,
// never a bare name a kubelet would pull from docker.io/library.
func TestStaticPodDefaultImage(t *testing.T) {
	cmd := newStaticPodCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(out.Bytes(), &pod); err != nil {
		t.Fatal(err)
	}
	img := pod.Spec.Containers[0].Image
	if err := kubernetes.CheckPublished(img); err != nil {
		t.Error(err)
	}
	if want := kubernetes.DefaultImage(buildVersion().Version); img != want {
		t.Errorf("image %s, want %s", img, want)
	}
}
