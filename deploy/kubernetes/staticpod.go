// Package kubernetes holds the manifests operators apply (base/,
// monitoring/, uninstall/) and builds skewgate's static-pod form from the
// base DaemonSet, so the two never drift apart.
package kubernetes

import (
	_ "embed"
	"errors"
	"fmt"
	"path"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
)

//go:embed base/daemonset.yaml
var daemonSetYAML []byte

// PKIDir is where kubeadm keeps the certificates the DaemonSet mounts.
const PKIDir = "/etc/kubernetes/pki"

// StaticPod are the static pod's settings; empty ones keep the
// DaemonSet's (kubeadm's paths and defaults).
type StaticPod struct {
	// Image is the image reference, e.g. registry/skewgate:v0.1.0.
	Image string
	// PKIDir replaces /etc/kubernetes/pki in every host path and flag.
	PKIDir string
	// Kubeconfig is the host file skewgate reads the cluster with: a
	// static pod has no ServiceAccount.
	Kubeconfig string
	// Args override the DaemonSet's flags of the same name
	// (--steer-address=…, --local-apiserver=…) or add others.
	Args []string
}

// ErrNoImage means StaticPod.Image is empty.
var ErrNoImage = errors.New("no image")

// Pod returns the static pod for /etc/kubernetes/manifests: the base
// DaemonSet's pod template — the same flags, capabilities, probes and
// host files, each pki file on its own — with a kubeconfig file where the
// DaemonSet has its ServiceAccount, and no API objects referenced (a
// kubelet runs a static pod without the API server). It returns
// ErrNoImage without an image, or an error if the embedded DaemonSet does
// not parse.
func (s StaticPod) Pod() (*corev1.Pod, error) {
	if s.Image == "" {
		return nil, ErrNoImage
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(daemonSetYAML, &ds); err != nil {
		return nil, fmt.Errorf("base/daemonset.yaml: %w", err)
	}
	spec := ds.Spec.Template.Spec
	spec.ServiceAccountName = ""
	spec.AutomountServiceAccountToken = ptr(false)
	spec.NodeSelector, spec.Tolerations = nil, nil
	c := &spec.Containers[0]
	c.Image = s.Image
	kubeconfig := s.Kubeconfig
	if kubeconfig == "" {
		kubeconfig = "/etc/kubernetes/skewgate.conf"
	}
	c.Args = setArgs(c.Args, append([]string{"--kubeconfig=" + kubeconfig}, s.Args...))
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: kubeconfig, Type: ptr(corev1.HostPathFile)}}})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "kubeconfig", MountPath: kubeconfig, ReadOnly: true})
	if s.PKIDir != "" && s.PKIDir != PKIDir {
		movePKI(&spec, path.Clean(s.PKIDir))
	}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name, Namespace: ds.Namespace,
			Labels: ds.Spec.Template.Labels},
		Spec: spec,
	}, nil
}

// setArgs replaces each flag of over in args (by name), or appends it.
func setArgs(args, over []string) []string {
	out := append([]string(nil), args...)
	for _, o := range over {
		name, _, _ := strings.Cut(o, "=")
		i := -1
		for j, a := range out {
			if n, _, _ := strings.Cut(a, "="); n == name {
				i = j
			}
		}
		if i < 0 {
			out = append(out, o)
		} else {
			out[i] = o
		}
	}
	return out
}

// movePKI points every host path, mount and flag under PKIDir at dir.
func movePKI(spec *corev1.PodSpec, dir string) {
	move := func(p string) string {
		if rest, ok := strings.CutPrefix(p, PKIDir+"/"); ok {
			return dir + "/" + rest
		}
		return p
	}
	for i := range spec.Volumes {
		if hp := spec.Volumes[i].HostPath; hp != nil {
			hp.Path = move(hp.Path)
		}
	}
	c := &spec.Containers[0]
	for i := range c.VolumeMounts {
		c.VolumeMounts[i].MountPath = move(c.VolumeMounts[i].MountPath)
	}
	for i, a := range c.Args {
		if name, value, ok := strings.Cut(a, "="); ok {
			c.Args[i] = name + "=" + move(value)
		}
	}
}

func ptr[T any](v T) *T { return &v }
