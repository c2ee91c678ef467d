package lab

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
)

// EtcdKeys lists the keys under prefix from the first node's stacked
// etcd, through etcd's gRPC gateway with kubeadm's health-check client
// certificate (as `etcdctl get --prefix --keys-only` would): what exists,
// whether or not any apiserver still serves its type.
func (p *Plane) EtcdKeys(ctx context.Context, prefix string) ([]string, error) {
	n := p.Spec.Nodes[0]
	pki := filepath.Join(p.KubeadmDir(n), "pki", "etcd")
	c, err := (&PKI{CAFile: filepath.Join(pki, "ca.crt")}).HTTPClient(KeyPair{
		CertFile: filepath.Join(pki, "healthcheck-client.crt"), KeyFile: filepath.Join(pki, "healthcheck-client.key")})
	if err != nil {
		return nil, err
	}
	end := []byte(prefix)
	end[len(end)-1]++
	body, _ := json.Marshal(map[string]any{"key": base64.StdEncoding.EncodeToString([]byte(prefix)),
		"range_end": base64.StdEncoding.EncodeToString(end), "keys_only": true})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("https://%s:2379/v3/kv/range", n.IP), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("etcd range %s: %w", prefix, err)
	}
	defer resp.Body.Close()
	var r struct {
		Kvs []struct {
			Key string `json:"key"`
		} `json:"kvs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("etcd range %s: %w", prefix, err)
	}
	keys := make([]string, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		k, err := base64.StdEncoding.DecodeString(kv.Key)
		if err != nil {
			return nil, err
		}
		keys = append(keys, string(k))
	}
	return keys, nil
}
