// Package daemonset runs skewgate as users run it: the DaemonSet of
// deploy/kubernetes, from the image deploy/image builds, on real kubelets
// (containerd, kubelet, controller-manager, scheduler) on every lab node.
package daemonset

import (
	"context"
	"os"
	"testing"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/labtest"
)

var (
	plane *lab.Plane
	// labDir holds what this package builds (images, kustomize overlays).
	labDir string
)

func TestMain(m *testing.M) {
	spec := lab.DefaultSpec()
	spec.Kubelet = true
	os.Exit(labtest.Main(m, "daemonset", spec, func(ctx context.Context, env *labtest.Env) error {
		plane, labDir = env.Plane, env.Plane.Dir
		return nil
	}))
}
