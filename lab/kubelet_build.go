package lab

import (
	"context"
	"io"
	"slices"

	"golang.org/x/mod/semver"
)

// KubectlVersion is the kubectl the kubelet mode builds (kubectl may be
// one minor newer or older than the servers it talks to).
const KubectlVersion = NewVersion

// KubeletBinaries are the paths of the kubelet mode's executables.
type KubeletBinaries struct {
	Kubelets map[string]string // by version: each node's kubelet is its apiserver's version
	// ControllerManager and Scheduler run once per plane, at the oldest
	// node version: they must not be newer than any apiserver they reach.
	ControlVersion    string
	ControllerManager string
	Scheduler         string
	Kubectl           string
}

// EnsureKubeletBinaries builds a kubelet per node version, the
// controller-manager and scheduler at the oldest of them, and kubectl, from
// the Go module proxy into cacheDir, as EnsureBinaries builds the
// apiservers (cached afterwards).
func EnsureKubeletBinaries(ctx context.Context, cacheDir string, versions []string, out io.Writer) (KubeletBinaries, error) {
	sorted := slices.Clone(versions)
	slices.SortFunc(sorted, semver.Compare)
	b := KubeletBinaries{Kubelets: map[string]string{}, ControlVersion: sorted[0]}
	var err error
	build := func(name, v string) string {
		if err != nil {
			return ""
		}
		var path string
		path, err = ensure(ctx, cacheDir, kubernetesRecipe(name, v), out)
		return path
	}
	b.Scheduler = build("kube-scheduler", b.ControlVersion)
	b.Kubectl = build("kubectl", KubectlVersion)
	b.ControllerManager = build("kube-controller-manager", b.ControlVersion)
	for _, v := range slices.Compact(sorted) {
		b.Kubelets[v] = build("kubelet", v)
	}
	return b, err
}
