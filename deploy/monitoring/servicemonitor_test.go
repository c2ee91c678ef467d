package monitoring

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The shipped objects Prometheus Operator turns into a scrape job.
const (
	serviceMonitorFile = "../kubernetes/monitoring/servicemonitor.yaml"
	serviceFile        = "../kubernetes/monitoring/service.yaml"
	daemonSetFile      = "../kubernetes/base/daemonset.yaml"
)

type serviceMonitor struct {
	Spec struct {
		JobLabel  string `yaml:"jobLabel"`
		Endpoints []struct {
			Port        string `yaml:"port"`
			Relabelings []struct {
				SourceLabels []string `yaml:"sourceLabels"`
				TargetLabel  string   `yaml:"targetLabel"`
				Action       string   `yaml:"action"`
			} `yaml:"relabelings"`
		} `yaml:"endpoints"`
	} `yaml:"spec"`
}

type objectMeta struct {
	Metadata struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
}

type daemonSet struct {
	objectMeta `yaml:",inline"`
	Spec       struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Name  string `yaml:"name"`
					Ports []struct {
						Name string `yaml:"name"`
					} `yaml:"ports"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// targetLabels are the labels Prometheus Operator gives every target of
// the shipped ServiceMonitor, by its documented target labelling
// (Documentation/api.md, ServiceMonitorSpec.jobLabel: "If the value of
// this field is empty or if the label doesn't exist for the given Service,
// the job label of the metrics defaults to the name of the associated
// Kubernetes Service"; its generator pkg/prometheus/promcfg.go relabels
// namespace, service, pod and container from the endpoint's meta labels
// and sets endpoint to the port's name), then the endpoint's relabelings.
// The pod label is a pattern: the DaemonSet's name and a suffix.
func targetLabels(t *testing.T) map[string]*regexp.Regexp {
	t.Helper()
	var sm serviceMonitor
	var svc objectMeta
	var ds daemonSet
	for file, v := range map[string]any{serviceMonitorFile: &sm, serviceFile: &svc, daemonSetFile: &ds} {
		if err := yaml.Unmarshal(readFile(t, file), v); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("%s: %d endpoints, want 1", serviceMonitorFile, len(sm.Spec.Endpoints))
	}
	ep := sm.Spec.Endpoints[0]
	job := svc.Metadata.Name
	if v := svc.Metadata.Labels[sm.Spec.JobLabel]; sm.Spec.JobLabel != "" && v != "" {
		job = v
	}
	var container string
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == ep.Port {
				container = c.Name
			}
		}
	}
	exact := func(s string) *regexp.Regexp { return regexp.MustCompile("^" + regexp.QuoteMeta(s) + "$") }
	labels := map[string]*regexp.Regexp{
		"job":       exact(job),
		"namespace": exact(svc.Metadata.Namespace),
		"service":   exact(svc.Metadata.Name),
		"endpoint":  exact(ep.Port),
		"container": exact(container),
		"pod":       regexp.MustCompile("^" + regexp.QuoteMeta(ds.Metadata.Name) + "-[a-z0-9]{5}$"),
		// Without relabeling: the target's address, the pod's IP and port.
		"instance": regexp.MustCompile(`^[0-9.]+:[0-9]+$`),
	}
	meta := map[string]*regexp.Regexp{
		// A node's name: a DNS subdomain, no port.
		"__meta_kubernetes_pod_node_name": regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`),
	}
	for _, r := range ep.Relabelings {
		if (r.Action != "" && r.Action != "replace") || len(r.SourceLabels) != 1 || meta[r.SourceLabels[0]] == nil {
			t.Fatalf("%s: relabeling %+v: this test knows only replace from %v", serviceMonitorFile, r, slices.Collect(maps.Keys(meta)))
		}
		labels[r.TargetLabel] = meta[r.SourceLabels[0]]
	}
	return labels
}

var (
	seriesSelector = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}$`)
	labelMatcher   = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"`)
	jobMatcher     = regexp.MustCompile(`\bjob\s*(=~?|!=)\s*"([^"]*)"`)
	// apiserverSelector is a selector of kube-apiserver's series with the
	// job kube-prometheus-stack and kube-prometheus give them.
	apiserverSelector = regexp.MustCompile(`\bapiserver_[a-z_]+\{job="apiserver"[^}]*\}`)
)

// TestSeriesAsScraped: the promtool cases in alerts_test.yaml feed the
// series the shipped ServiceMonitor really produces (every target label,
// with its value), and every job matcher in alerts.yaml is the job it
// gives. A ServiceMonitor whose jobLabel or relabeling changes fails here,
// not in a cluster where the alerts silently cannot fire.
func TestSeriesAsScraped(t *testing.T) {
	want := targetLabels(t)
	var tests struct {
		Tests []struct {
			Name        string `yaml:"name"`
			InputSeries []struct {
				Series string `yaml:"series"`
			} `yaml:"input_series"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(readFile(t, "alerts_test.yaml"), &tests); err != nil {
		t.Fatal(err)
	}
	var checked int
	for _, tc := range tests.Tests {
		for _, in := range tc.InputSeries {
			m := seriesSelector.FindStringSubmatch(in.Series)
			if m == nil {
				t.Errorf("%s: series %q: want name{labels}", tc.Name, in.Series)
				continue
			}
			got := map[string]string{}
			for _, l := range labelMatcher.FindAllStringSubmatch(m[2], -1) {
				got[l[1]] = l[2]
			}
			if !strings.HasPrefix(m[1], "skewgate_") && !want["job"].MatchString(got["job"]) {
				continue // another job's series, e.g. node-exporter's up
			}
			checked++
			for name, re := range want {
				if !re.MatchString(got[name]) {
					t.Errorf("%s: series %s: %s=%q, the ServiceMonitor's targets have %s matching %s", tc.Name, in.Series, name, got[name], name, re)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no skewgate series in alerts_test.yaml")
	}
	t.Logf("%d series checked against the ServiceMonitor's target labels %v", checked, want)

	var rf ruleFile
	decodeYAML(t, "alerts.yaml", &rf)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			// kube-apiserver's own series are compared against, as the
			// job kube-prometheus(-stack) scrapes them as.
			expr := apiserverSelector.ReplaceAllString(r.Expr, "")
			for _, m := range jobMatcher.FindAllStringSubmatch(expr, -1) {
				if m[1] != "=" || !want["job"].MatchString(m[2]) {
					t.Errorf("%s: matches job%s%q; the ServiceMonitor's targets have job matching %s", r.Alert, m[1], m[2], want["job"])
				}
			}
		}
	}
}
