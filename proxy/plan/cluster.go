package plan

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// Cluster is the cluster as the operator's kubeconfig reaches it.
type Cluster struct {
	Kube     kubernetes.Interface
	Dynamic  dynamic.Interface
	Metadata metadata.Interface
	// HTTP and Host read discovery as a client does (the merged view
	// when skewgate answers).
	HTTP *http.Client
	Host string
	// Admin reaches skewgate's admin listeners: the operator's
	// credentials, the cluster's CA, the apiserver's certificate (which
	// the secure admin listener serves) verified for "kubernetes" unless
	// the kubeconfig names another server name.
	Admin *http.Client
}

// Connect builds a Cluster from a client config.
func Connect(rc *rest.Config) (*Cluster, error) {
	c := &Cluster{Host: strings.TrimSuffix(rc.Host, "/")}
	var err error
	if c.HTTP, err = rest.HTTPClientFor(rc); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if c.Kube, err = kubernetes.NewForConfigAndClient(rc, c.HTTP); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if c.Dynamic, err = dynamic.NewForConfigAndClient(rc, c.HTTP); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if c.Metadata, err = metadata.NewForConfigAndClient(rc, c.HTTP); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	ac := rest.CopyConfig(rc)
	if ac.TLSClientConfig.ServerName == "" {
		ac.TLSClientConfig.ServerName = "kubernetes"
	}
	if c.Admin, err = rest.HTTPClientFor(ac); err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	return c, nil
}

// get reads url with the client; a non-200 answer is an error with the
// start of its body, so the operator sees what the other side said.
func get(ctx context.Context, c *http.Client, url string, header http.Header) ([]byte, http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		return nil, nil, fmt.Errorf("%s: %s: %s", url, resp.Status, msg)
	}
	return body, resp.Header, nil
}
