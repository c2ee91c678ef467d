// Package e2e proves skewgate against the lab: real kube-apiservers of two
// versions, brought up once for the whole package.
package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/labtest"
)

var (
	plane *lab.Plane
	// skewgateBin is the skewgate binary built for this run.
	skewgateBin string
	// skewgateA is the skewgate in front of node-a that via reaches.
	skewgateA lab.Proc
)

func TestMain(m *testing.M) {
	os.Exit(labtest.Main(m, "e2e", lab.DefaultSpec(), startSkewgate))
}

// startSkewgate runs skewgate inside node-a's namespace in front of node-a
// (v1.35.4). It finds its peer node-b (v1.36.3) in the cluster's
// default/kubernetes EndpointSlices (--kubeconfig), so every test of this
// package also proves that membership.
func startSkewgate(ctx context.Context, env *labtest.Env) error {
	plane, skewgateBin = env.Plane, env.Skewgate
	a, _ := plane.Node("node-a")
	var err error
	skewgateA, err = plane.StartSkewgate(ctx, a.Name, skewgateBin, lab.SkewgateMode{Kubeconfig: true}, 30*time.Second)
	return err
}
