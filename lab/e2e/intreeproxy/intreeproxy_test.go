// Package intreeproxy runs skewgate on a plane set up the other way some
// installations are: kube-apiserver's own Mixed Version Proxy on
// (UnknownVersionInteroperabilityProxy, with peer-advertise addresses) and
// no endpoint reconciler, so default/kubernetes lists no apiserver. Peers
// are then found only in the apiserver identity leases.
package intreeproxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/labtest"
)

var env *labtest.Env

func TestMain(m *testing.M) {
	spec := lab.DefaultSpec()
	spec.InTreeProxy = true
	spec.NoEndpoints = true
	os.Exit(labtest.Main(m, "intreeproxy", spec, func(ctx context.Context, e *labtest.Env) error {
		env = e
		_, err := e.Plane.StartSkewgate(ctx, "node-a", e.Skewgate, lab.SkewgateMode{Kubeconfig: true}, 30*time.Second)
		return err
	}))
}

const workloads = "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads"

func TestPeerFoundInIdentityLeases(t *testing.T) {
	a, b := node(t, "node-a"), node(t, "node-b")
	admin, err := env.Plane.AdminHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	var slices struct {
		Items []struct {
			Endpoints []struct{ Addresses []string }
		}
	}
	getJSON(t, admin, a.URL()+"/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io/service-name=kubernetes", &slices)
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			t.Errorf("default/kubernetes lists %v: this plane must find peers elsewhere", ep.Addresses)
		}
	}
	var leases struct {
		Items []struct {
			Metadata struct{ Annotations map[string]string }
		}
	}
	getJSON(t, admin, a.URL()+"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases?labelSelector=apiserver.kubernetes.io/identity=kube-apiserver", &leases)
	advertised := map[string]bool{}
	for _, l := range leases.Items {
		advertised[l.Metadata.Annotations["kubernetes.io/peer-advertise-address"]] = true
	}
	peer := b.IP.String() + ":6443"
	if !advertised[peer] {
		t.Fatalf("no identity lease advertises %s: %v", peer, advertised)
	}

	// skewgate in front of node-a knows node-b only from its lease.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, hdr := get(t, admin, lab.SkewgateURL(a)+workloads)
		if code == http.StatusOK && hdr.Get("X-Skewgate-Route") == "peer" && hdr.Get("X-Skewgate-Server") == peer {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workloads through skewgate = %d route=%q server=%q, want 200 from peer %s",
				code, hdr.Get("X-Skewgate-Route"), hdr.Get("X-Skewgate-Server"), peer)
		}
		time.Sleep(200 * time.Millisecond)
	}
	code, _ := get(t, admin, a.URL()+workloads)
	t.Logf("for comparison, node-a (v1.35.4) itself with its in-tree proxy on answers %d", code)
}

func node(t *testing.T, name string) lab.Node {
	t.Helper()
	n, ok := env.Plane.Node(name)
	if !ok {
		t.Fatalf("no node %s", name)
	}
	return n
}

func get(t *testing.T, c *http.Client, url string) (int, http.Header) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header
}

func getJSON(t *testing.T, c *http.Client, url string, into any) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s = %d: %s", url, resp.StatusCode, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestPeerDownComparedWithInTreeProxy takes node-b away, gracefully and by
// a crash: through skewgate, workloads answer a 503 Status (node-b is
// unhealthy, and its lease still names it), never a 404; what node-a's own
// in-tree proxy answers is logged for comparison.
func TestPeerDownComparedWithInTreeProxy(t *testing.T) {
	for name, takeDown := range map[string]func(string) error{"graceful": env.Plane.StopNode, "crash": env.Plane.KillNode} {
		t.Run(name, func(t *testing.T) { peerDown(t, takeDown) })
	}
}

func peerDown(t *testing.T, takeDown func(string) error) {
	a := node(t, "node-a")
	admin, err := env.Plane.AdminHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	if err := takeDown("node-b"); err != nil {
		t.Fatal(err)
	}
	waitCode(t, admin, lab.SkewgateURL(a)+workloads, http.StatusServiceUnavailable, "unavailable", 3*time.Second)
	code, hdr := get(t, admin, a.URL()+workloads)
	t.Logf("node-b down: skewgate answers 503 Status; node-a's in-tree proxy answers %d (Content-Type %q)", code, hdr.Get("Content-Type"))
	if err := env.Plane.StartNode(context.Background(), "node-b", 60*time.Second); err != nil {
		t.Fatalf("restart node-b: %v", err)
	}
	waitCode(t, admin, lab.SkewgateURL(a)+workloads, http.StatusOK, "peer", 15*time.Second)
}

// waitCode polls url until it answers code with X-Skewgate-Route route; a
// 404 on the way fails the test.
func waitCode(t *testing.T, c *http.Client, url string, code int, route string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, hdr := get(t, c, url)
		if got == http.StatusNotFound {
			t.Fatalf("false 404 through skewgate")
		}
		if got == code && hdr.Get("X-Skewgate-Route") == route {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %d route=%q, want %d %s", url, got, hdr.Get("X-Skewgate-Route"), code, route)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
