// Package daemonset runs skewgate as users run it: the DaemonSet of
// deploy/kubernetes, from the image deploy/image builds, on real kubelets
// (containerd, kubelet, controller-manager, scheduler) on every lab node.
package daemonset

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/skewgate/skewgate/deploy/image"
	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/labtest"
)

var (
	plane *lab.Plane
	// skewgateBin is the host's skewgate (steer, uninstall).
	skewgateBin string
	// images are two builds of skewgate, by version: the rollout goes
	// from the first to the second.
	images = []string{"v0.0.1-e2e.1", "v0.0.1-e2e.2"}
)

func TestMain(m *testing.M) {
	spec := lab.DefaultSpec()
	spec.Kubelet = true
	os.Exit(labtest.Main(m, "daemonset", spec, setup))
}

// setup builds skewgate's image twice (two version labels) and imports
// both into every node's containerd.
func setup(ctx context.Context, env *labtest.Env) error {
	plane, skewgateBin = env.Plane, env.Skewgate
	for _, v := range images {
		t0 := time.Now()
		archive, sum, err := buildImage(ctx, v)
		if err != nil {
			return err
		}
		if err := plane.ImportImage(ctx, archive); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "daemonset: image skewgate:%s: %s; built and imported in %s\n", v, sum, time.Since(t0).Round(100*time.Millisecond))
	}
	return nil
}

// buildImage builds skewgate's image as `make image` does, for every
// architecture of image.Arches, and writes the index archive: containerd
// imports the node's platform from it.
func buildImage(ctx context.Context, version string) (string, image.Summary, error) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		return "", image.Summary{}, err
	}
	dir := filepath.Join(plane.Dir, "images")
	b := image.GoBinary{
		Dir: root, Package: "./cmd/skewgate", Out: filepath.Join(dir, "skewgate-"+version),
		LDFlags: "-s -w -X main.version=" + version,
	}
	s := image.Spec{Entrypoint: "/skewgate", Version: version, Revision: "e2e", Created: time.Unix(0, 0).UTC()}
	out := filepath.Join(dir, "skewgate-"+version+".tar")
	m, err := image.BuildMulti(ctx, b, s, image.Arches)
	if err != nil {
		return "", image.Summary{}, err
	}
	if err := image.WriteIndexArchive(m.Index, "skewgate:"+version, s.Created, out); err != nil {
		return "", image.Summary{}, err
	}
	sum, err := image.Summarize(m.Images[runtime.GOARCH], out)
	return out, sum, err
}
