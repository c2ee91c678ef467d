// Package e2e proves skewgate against the lab: real kube-apiservers of two
// versions, brought up once for the whole package.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/skewgate/skewgate/internal/testenv"
	"github.com/skewgate/skewgate/lab"
)

var plane *lab.Plane

func TestMain(m *testing.M) {
	lab.RunReaper()
	if os.Geteuid() != 0 {
		if testenv.InCI() {
			fmt.Fprintln(os.Stderr, "e2e: needs root to run the lab, and CI=true forbids skipping")
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "e2e: skipped, needs root to run the lab (runs in CI)")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "skewgate-e2e-lab-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	// A panicking test or `go test -timeout` ends this process without
	// running deferred calls: the reaper then takes the lab down.
	stopReaper, err := lab.StartReaper(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer stopReaper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	p, err := lab.Up(ctx, lab.Options{Dir: dir, CacheDir: lab.DefaultCacheDir(), Spec: lab.DefaultSpec(), Progress: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: lab up:", err)
		return 1
	}
	plane = p
	defer func() {
		if err := lab.Down(dir); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: lab down:", err)
			return
		}
		// Only the skewgate binary built for this run is left.
		os.RemoveAll(dir)
	}()
	if err := startSkewgate(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return m.Run()
}

// skewgateBin is the skewgate binary built for this run.
var skewgateBin string

// startSkewgate builds skewgate and runs it inside node-a's namespace in
// front of node-a (v1.35.4). It finds its peer node-b (v1.36.3) in the
// cluster's default/kubernetes EndpointSlices (--kubeconfig), so every test
// of this package also proves that membership.
func startSkewgate(ctx context.Context, dir string) error {
	skewgateBin = filepath.Join(dir, "skewgate")
	build := exec.CommandContext(ctx, "go", "build", "-o", skewgateBin, "github.com/skewgate/skewgate/cmd/skewgate")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build skewgate: %v\n%s", err, out)
	}
	a, _ := plane.Node("node-a")
	_, err := plane.StartSkewgate(ctx, a.Name, skewgateBin, lab.SkewgateMode{Kubeconfig: true}, 30*time.Second)
	return err
}
