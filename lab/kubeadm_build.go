package lab

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

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
	sorted := sortedVersions(versions)
	for _, v := range sorted {
		build(b.Kubeadm, "kubeadm", v)
		build(b.ControllerManager, "kube-controller-manager", v)
		build(b.Scheduler, "kube-scheduler", v)
		if err != nil {
			break
		}
		kubelet, kerr := ensure(ctx, cacheDir, kubernetesRecipe("kubelet", v), out)
		switch {
		case kerr == nil:
			b.Kubelets[v] = kubelet
		case v != sorted[0] && moduleRefused(kerr):
			// kubelet v1.38.0-beta.0 imports sigs.k8s.io/iptables-wrappers,
			// which the module proxy refuses (403). Nodes upgraded to v
			// keep their kubelet (SetKubelet to v then says none was
			// built); kubeadm's skew policy allows a kubelet 3 minors older.
			fmt.Fprintf(out, "lab: kubelet %s not built, nodes upgraded to it keep their older kubelet: %v\n", v, kerr)
		default:
			err = kerr
		}
	}
	if err == nil {
		b.Kubectl, err = ensure(ctx, cacheDir, kubernetesRecipe("kubectl", KubectlVersion), out)
	}
	return b, err
}

// moduleRefused says whether a build failed because the Go module proxy
// refused a module the package imports ("403 Forbidden ... This module
// version is not available"): no retry fixes that.
func moduleRefused(err error) bool {
	return strings.Contains(err.Error(), "403 Forbidden")
}

func sortedVersions(vs []string) []string {
	s := slices.Clone(vs)
	slices.SortFunc(s, semver.Compare)
	return slices.Compact(s)
}
