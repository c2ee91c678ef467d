// Package next runs the next upgrade's pair, v1.36.3 and v1.37.2, each
// with its default configuration (no runtime-config): the types a 1.37
// server serves and a 1.36 one does not are a false 404 on the 1.36
// server's address without skewgate, and the 1.37 server's answer
// through it — steering mode auto opens its window on the versions alone.
package next

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/labtest"
)

const oldV, newV = "v1.36.3", "v1.37.2"

var (
	plane *lab.Plane
	bin   string
)

func TestMain(m *testing.M) {
	spec, err := lab.ParseNodes("node-a=" + oldV + ",node-b=" + newV)
	if err != nil {
		panic(err)
	}
	os.Exit(labtest.Main(m, "next", spec, func(_ context.Context, env *labtest.Env) error {
		plane, bin = env.Plane, env.Skewgate
		return nil
	}))
}

// newTypes are what a default v1.37.2 serves and a default v1.36.3 does
// not (proxy/discovery's recorded fixtures).
var newTypes = []string{
	"/apis/storagemigration.k8s.io/v1/storageversionmigrations",
	"/apis/certificates.k8s.io/v1/namespaces/default/podcertificaterequests",
	"/apis/certificates.k8s.io/v1/clustertrustbundles",
	"/apis/resource.k8s.io/v1/devicetaintrules",
}

// get asks node name's address for path on a new connection and returns
// the status and the route skewgate took ("" when it did not answer).
func get(t *testing.T, name, path string) (int, string) {
	t.Helper()
	n, _ := plane.Node(name)
	code, route, err := labtest.Get(labtest.FreshClient(t, plane), n.URL()+path)
	if err != nil {
		t.Fatalf("GET %s on %s: %v", path, name, err)
	}
	return code, route
}

func TestNextUpgrade(t *testing.T) {
	for _, p := range newTypes {
		if code, route := get(t, "node-a", p); code != http.StatusNotFound || route != "" {
			t.Fatalf("without skewgate, %s on the %s server: %d (skewgate route %q), want its false 404", p, oldV, code, route)
		}
		if code, _ := get(t, "node-b", p); code != http.StatusOK {
			t.Fatalf("%s on the %s server: %d, want 200", p, newV, code)
		}
	}
	proc, err := plane.StartSkewgate(context.Background(), "node-a", bin, lab.SkewgateMode{Steering: true, Kubeconfig: true}, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Stop(5 * time.Second)
	start := time.Now()
	for _, p := range newTypes {
		for {
			code, route := get(t, "node-a", p)
			if code == http.StatusOK && route == "peer" {
				break
			}
			if code == http.StatusNotFound && route != "" {
				t.Fatalf("skewgate answered %s with a 404 (route %s)", p, route)
			}
			if time.Since(start) > 60*time.Second {
				t.Fatalf("%s through node-a's address: %d (route %q), want 200 from the %s peer", p, code, route, newV)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("every %s-only type answered through the %s server's address by the %s peer, %s after skewgate started (mode auto: the window opened on the versions)",
		newV, oldV, newV, time.Since(start).Round(time.Millisecond))
}
