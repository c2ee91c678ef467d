package lab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/version"
)

// readyCheck reports whether a process is ready, and if not, why.
type readyCheck func(ctx context.Context) (ready bool, detail string)

// waitReady polls check until it passes, proc dies or timeout passes. The
// error carries the last detail and the tail of proc's log.
func waitReady(ctx context.Context, proc Proc, timeout time.Duration, check readyCheck) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	detail := "no answer yet"
	for {
		var ok bool
		if ok, detail = check(ctx); ok {
			return nil
		}
		if !proc.Alive() {
			return fmt.Errorf("%s exited before it was ready: %s\n--- %s (tail) ---\n%s", proc.Name, detail, proc.Log, logTail(proc.Log, 30))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %s\n--- %s (tail) ---\n%s", proc.Name, timeout, detail, proc.Log, logTail(proc.Log, 30))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func etcdHealthy(ctx context.Context) (bool, string) {
	code, body, err := get(ctx, http.DefaultClient, EtcdURL()+"/health")
	if err != nil {
		return false, err.Error()
	}
	return code == http.StatusOK && strings.Contains(body, `"health":"true"`), body
}

// apiserverReady asks n's /readyz?verbose as the admin; the detail lists the
// failing checks.
func (p *Plane) apiserverReady(n Node) readyCheck {
	var client *http.Client
	return func(ctx context.Context) (bool, string) {
		if client == nil {
			c, err := p.AdminHTTPClient()
			if err != nil {
				return false, err.Error()
			}
			client = c
		}
		code, body, err := get(ctx, client, n.URL()+"/readyz?verbose")
		if err != nil {
			return false, err.Error()
		}
		if code == http.StatusOK {
			return true, ""
		}
		return false, fmt.Sprintf("/readyz %d, failing: %s", code, failingChecks(body))
	}
}

// failingChecks picks the "[-]name failed: reason" lines of a verbose
// /readyz body.
func failingChecks(body string) string {
	var failed []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "[-]") {
			failed = append(failed, strings.TrimPrefix(line, "[-]"))
		}
	}
	if len(failed) == 0 {
		return strings.TrimSpace(body)
	}
	return strings.Join(failed, "; ")
}

func get(ctx context.Context, c *http.Client, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(body), err
}

// ServerVersion is the gitVersion node n's apiserver reports on /version.
func ServerVersion(ctx context.Context, c *http.Client, n Node) (string, error) {
	code, body, err := get(ctx, c, n.URL()+"/version")
	if err != nil {
		return "", err
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("%s/version: %d %s", n.URL(), code, body)
	}
	var v version.Info
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		return "", fmt.Errorf("%s/version: %w", n.URL(), err)
	}
	return v.GitVersion, nil
}

// AdminHTTPClient is an HTTP client that trusts the lab CA and presents the
// admin (system:masters) certificate.
func (p *Plane) AdminHTTPClient() (*http.Client, error) {
	return p.PKI.HTTPClient(p.PKI.Admin)
}

// HTTPClient is an HTTP client that trusts the lab CA and presents kp (no
// client certificate when kp is empty).
func (pki *PKI) HTTPClient(kp KeyPair) (*http.Client, error) {
	caPEM, err := os.ReadFile(pki.CAFile)
	if err != nil {
		return nil, fmt.Errorf("read lab CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", pki.CAFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if kp.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(kp.CertFile, kp.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load %s: %w", kp.CertFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 30 * time.Second}, nil
}
