package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/skewgate/skewgate/lab"
)

// workloads is the peer-only resource of the lab: scheduling.k8s.io/v1alpha2
// exists only on v1.36 servers.
const workloadsPath = "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads"

func workloadJSON(name string) []byte {
	return []byte(`{"apiVersion":"scheduling.k8s.io/v1alpha2","kind":"Workload",` +
		`"metadata":{"name":"` + name + `","namespace":"default"},` +
		`"spec":{"podGroupTemplates":[{"name":"workers","schedulingPolicy":{"basic":{}}}]}}`)
}

// response is what a test needs of one HTTP exchange.
type response struct {
	Code   int
	Header http.Header
	Body   []byte
}

func do(t testing.TB, c *http.Client, method, url string, body []byte, hdr ...string) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if http.CanonicalHeaderKey(hdr[i]) == "Content-Type" {
			req.Header.Del("Content-Type")
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return response{Code: resp.StatusCode, Header: resp.Header, Body: data}
}

func client(t testing.TB, kp lab.KeyPair) *http.Client {
	t.Helper()
	c, err := plane.PKI.HTTPClient(kp)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func node(t testing.TB, name string) lab.Node {
	t.Helper()
	n, ok := plane.Node(name)
	if !ok {
		t.Fatalf("no node %s in the lab", name)
	}
	return n
}
