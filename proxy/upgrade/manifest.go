package upgrade

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"
)

// apiserverContainer is the container kubeadm names in its kube-apiserver
// static pod (kubeadm's constants.KubeAPIServer).
const apiserverContainer = "kube-apiserver"

// ErrNoVersion means the manifest's kube-apiserver image names no
// Kubernetes version (a digest only, "latest", a custom tag): a change of
// it cannot be told from any other edit, so it signals nothing.
var ErrNoVersion = errors.New("image tag is not a Kubernetes version")

// ManifestImage returns the image of the kube-apiserver container of a
// static-pod manifest (a Pod, as kubeadm writes it), or an error if the
// manifest does not parse or has no such container.
func ManifestImage(data []byte) (string, error) {
	var pod corev1.Pod
	// Not strict: a kubelet reads manifests leniently too, and a field
	// newer than k8s.io/api here must not hide the image.
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return "", fmt.Errorf("parse manifest: %w", err)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == apiserverContainer {
			if c.Image == "" {
				return "", fmt.Errorf("container %s has no image", apiserverContainer)
			}
			return c.Image, nil
		}
	}
	return "", fmt.Errorf("no container %s in pod %s/%s", apiserverContainer, pod.Namespace, pod.Name)
}

// ImageTag is the tag of an image reference, "" when it has none:
// [registry[:port]/]path[:tag][@digest]. A registry's port is not a tag
// (its colon precedes the last slash), and a digest does not replace the
// tag it pins (kubeadm writes tags; an operator may pin both).
func ImageTag(image string) string {
	ref, _, _ := strings.Cut(image, "@")
	i := strings.LastIndexByte(ref, ':')
	if i < 0 || i < strings.LastIndexByte(ref, '/') {
		return ""
	}
	return ref[i+1:]
}

// TagVersion is the Kubernetes version an image tag names. Image tags
// cannot hold "+", so Kubernetes' images spell build metadata with "_"
// (kubeadm's KubernetesVersionToImageTag): it is turned back here.
func TagVersion(tag string) (*version.Version, error) {
	v, err := version.ParseSemantic(strings.ReplaceAll(tag, "_", "+"))
	if err != nil {
		return nil, fmt.Errorf("tag %q: %w", tag, ErrNoVersion)
	}
	return v, nil
}
