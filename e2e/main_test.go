// Package e2e proves skewgate against the lab: real kube-apiservers of two
// versions, brought up once for the whole package.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/skewgate/skewgate/internal/testenv"
	"github.com/skewgate/skewgate/lab"
)

var plane *lab.Plane

func TestMain(m *testing.M) {
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
		}
	}()
	return m.Run()
}
