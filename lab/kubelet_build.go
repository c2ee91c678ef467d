package lab

import (
	"context"
	"io"
)

// KubeletVersion is the kubelet (and controller-manager, scheduler,
// kubectl) the kubelet mode runs: the new version, as a node being
// upgraded would.
const KubeletVersion = NewVersion

// KubeletBinaries are the paths of the kubelet mode's executables.
type KubeletBinaries struct {
	Kubelet           string
	ControllerManager string
	Scheduler         string
	Kubectl           string
}

// EnsureKubeletBinaries builds kubelet, kube-controller-manager,
// kube-scheduler and kubectl at version v from the Go module proxy into
// cacheDir, as EnsureBinaries builds the apiservers (cached afterwards).
func EnsureKubeletBinaries(ctx context.Context, cacheDir, v string, out io.Writer) (KubeletBinaries, error) {
	var b KubeletBinaries
	for _, t := range []struct {
		name string
		path *string
	}{
		{"kube-scheduler", &b.Scheduler},
		{"kubectl", &b.Kubectl},
		{"kube-controller-manager", &b.ControllerManager},
		{"kubelet", &b.Kubelet},
	} {
		path, err := ensure(ctx, cacheDir, kubernetesRecipe(t.name, v), out)
		if err != nil {
			return b, err
		}
		*t.path = path
	}
	return b, nil
}
