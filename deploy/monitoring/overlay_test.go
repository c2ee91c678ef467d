package monitoring

import (
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestMonitoringOverlay renders deploy/kubernetes/monitoring as kubectl
// apply -k would, for kube-prometheus-stack as installed by default: its
// Prometheus selects ServiceMonitors and PrometheusRules by one label,
// release, which both carry with one value (set once, in the overlay); the
// PrometheusRule is the generated one; and the Prometheus ServiceAccount
// is bound to a ClusterRole that allows get on /metrics, which the secure
// admin listener's SubjectAccessReview asks about.
func TestMonitoringOverlay(t *testing.T) {
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "../kubernetes/monitoring")
	if err != nil {
		t.Fatalf("kustomize build deploy/kubernetes/monitoring: %v", err)
	}
	byKind := map[string][]*resource.Resource{}
	for _, r := range rm.Resources() {
		byKind[r.GetKind()] = append(byKind[r.GetKind()], r)
	}
	for _, kind := range []string{"DaemonSet", "ServiceMonitor", "PrometheusRule", "ClusterRoleBinding"} {
		if len(byKind[kind]) == 0 {
			t.Fatalf("no %s in the overlay", kind)
		}
	}

	release := byKind["ServiceMonitor"][0].GetLabels()["release"]
	if release == "" {
		t.Fatal("the ServiceMonitor has no release label: kube-prometheus-stack's default serviceMonitorSelector would not pick it up")
	}
	if got := byKind["PrometheusRule"][0].GetLabels()["release"]; got != release {
		t.Errorf("PrometheusRule release label %q, ServiceMonitor's %q: kube-prometheus-stack's ruleSelector and serviceMonitorSelector name one release", got, release)
	}

	var rule struct {
		Spec ruleFile `yaml:"spec"`
	}
	if err := unmarshal(byKind["PrometheusRule"][0], &rule); err != nil {
		t.Fatal(err)
	}
	var source ruleFile
	decodeYAML(t, "alerts.yaml", &source)
	if len(rule.Spec.Groups) != 1 || len(rule.Spec.Groups[0].Rules) != len(source.Groups[0].Rules) {
		t.Errorf("the overlay's PrometheusRule is not alerts.yaml's %d rules", len(source.Groups[0].Rules))
	}

	var role struct {
		Rules []struct {
			NonResourceURLs []string `yaml:"nonResourceURLs"`
			Verbs           []string `yaml:"verbs"`
		} `yaml:"rules"`
	}
	for _, r := range byKind["ClusterRole"] {
		if r.GetName() == "skewgate-metrics" {
			if err := unmarshal(r, &role); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].NonResourceURLs, []string{"/metrics"}) || !slices.Equal(role.Rules[0].Verbs, []string{"get"}) {
		t.Errorf("ClusterRole skewgate-metrics: %+v, want get on /metrics and nothing else", role.Rules)
	}
	var binding struct {
		RoleRef  struct{ Kind, Name string } `yaml:"roleRef"`
		Subjects []struct{ Kind, Name, Namespace string }
	}
	for _, r := range byKind["ClusterRoleBinding"] {
		if r.GetName() == "skewgate-metrics" {
			if err := unmarshal(r, &binding); err != nil {
				t.Fatal(err)
			}
		}
	}
	// kube-prometheus-stack's Prometheus runs as <fullname>-prometheus,
	// fullname being the release when it contains the chart's name.
	want := release + "-prometheus"
	if binding.RoleRef.Kind != "ClusterRole" || binding.RoleRef.Name != "skewgate-metrics" ||
		len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "ServiceAccount" || binding.Subjects[0].Name != want || binding.Subjects[0].Namespace == "" {
		t.Errorf("ClusterRoleBinding skewgate-metrics: %+v, want ClusterRole skewgate-metrics bound to the ServiceAccount %s", binding, want)
	}
}

func unmarshal(r *resource.Resource, v any) error {
	b, err := r.AsYAML()
	if err != nil {
		return err
	}
	return yaml.Unmarshal(b, v)
}
