package lab

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// newAPIsArgs are the kubeadm extraArgs that serve what c serves (what
// APIServerArgs gives the other modes' servers of that minor).
func newAPIsArgs(c newAPIsConfig) []extraArg {
	return []extraArg{{"runtime-config", c.runtimeConfig}, {"feature-gates", strings.Join(c.gates, ",")}}
}

// extraArg is one entry of a v1beta4 extraArgs list.
type extraArg struct{ Name, Value string }

// enableNewAPIs adds version's newAPIsArgs to the apiServer.extraArgs of the
// ClusterConfiguration in kube-system/kubeadm-config, when version serves
// them, as an operator edits it before `kubeadm upgrade apply` (which
// renders the new manifests from it). A feature-gates value joins the
// existing one.
func (p *Plane) enableNewAPIs(ctx context.Context, version string) error {
	na, ok := newAPIsFor(Node{Version: version}.Minor(), p.Spec)
	if !ok {
		return nil
	}
	c, err := p.AdminClient(p.Spec.Nodes[0])
	if err != nil {
		return err
	}
	cm, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeadm-config", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("kubeadm-config: %w", err)
	}
	out, err := addExtraArgs(cm.Data["ClusterConfiguration"], newAPIsArgs(na))
	if err != nil {
		return err
	}
	cm.Data["ClusterConfiguration"] = out
	if _, err := c.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update kubeadm-config: %w", err)
	}
	return nil
}

// addExtraArgs merges args into a ClusterConfiguration's
// apiServer.extraArgs: a feature-gates value is appended to the existing
// one, any other flag set (or replaced).
func addExtraArgs(clusterConfig string, args []extraArg) (string, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(clusterConfig), &cfg); err != nil {
		return "", fmt.Errorf("parse ClusterConfiguration: %w", err)
	}
	api, _ := cfg["apiServer"].(map[string]any)
	if api == nil {
		api = map[string]any{}
		cfg["apiServer"] = api
	}
	list, _ := api["extraArgs"].([]any)
	for _, a := range args {
		found := false
		for _, e := range list {
			m, _ := e.(map[string]any)
			if m == nil || m["name"] != a.Name {
				continue
			}
			found = true
			old, _ := m["value"].(string)
			switch {
			case a.Name == "feature-gates" && old != "" && !strings.Contains(old, a.Value):
				m["value"] = old + "," + a.Value
			case a.Name != "feature-gates":
				m["value"] = a.Value
			}
		}
		if !found {
			list = append(list, map[string]any{"name": a.Name, "value": a.Value})
		}
	}
	api["extraArgs"] = list
	out, err := yaml.Marshal(cfg)
	return string(out), err
}
