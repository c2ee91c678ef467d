package lab

import (
	"context"
	"io"
	"slices"

	"golang.org/x/mod/semver"
)

// KubeadmBinaries are the kubeadm mode's executables. The control-plane
// components run in containers, from images the lab builds of the same
// binaries the other modes run (Binaries.APIServers, Binaries.Etcd).
type KubeadmBinaries struct {
	Kubeadm           map[string]string // by version
	Kubelets          map[string]string // by version
	ControllerManager map[string]string // by version
	Scheduler         map[string]string // by version
	Kubectl           string
}

// EnsureKubeadmBinaries builds, for every version, kubeadm, the
// controller-manager and the scheduler (their images) and the kubelet
// (the operator upgrades it after kubeadm), plus kubectl, from the Go
// module proxy into cacheDir (cached afterwards).
func EnsureKubeadmBinaries(ctx context.Context, cacheDir string, versions []string, out io.Writer) (KubeadmBinaries, error) {
	b := KubeadmBinaries{
		Kubeadm: map[string]string{}, Kubelets: map[string]string{},
		ControllerManager: map[string]string{}, Scheduler: map[string]string{},
	}
	var err error
	build := func(into map[string]string, name, v string) {
		if err != nil {
			return
		}
		into[v], err = ensure(ctx, cacheDir, kubernetesRecipe(name, v), out)
	}
	for _, v := range sortedVersions(versions) {
		build(b.Kubeadm, "kubeadm", v)
		build(b.ControllerManager, "kube-controller-manager", v)
		build(b.Scheduler, "kube-scheduler", v)
		build(b.Kubelets, "kubelet", v)
	}
	if err == nil {
		b.Kubectl, err = ensure(ctx, cacheDir, kubernetesRecipe("kubectl", KubectlVersion), out)
	}
	return b, err
}

func sortedVersions(vs []string) []string {
	s := slices.Clone(vs)
	slices.SortFunc(s, semver.Compare)
	return slices.Compact(s)
}
