package rules

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
)

const ruleFile = `# About this file, not the rules.

groups:
  - name: example
    rules:
      # Why this alert exists.
      - alert: Example
        expr: up == 0
        for: 1m
        labels:
          severity: warning
        annotations:
          description: >-
            Folded text
            over two lines.
`

func TestPrometheusRule(t *testing.T) {
	out, err := PrometheusRule([]byte(ruleFile))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name      string `yaml:"name"`
			Namespace string `yaml:"namespace"`
		} `yaml:"metadata"`
		Spec any `yaml:"spec"`
	}
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, out)
	}
	if got.APIVersion != "monitoring.coreos.com/v1" || got.Kind != "PrometheusRule" {
		t.Errorf("apiVersion %q, kind %q", got.APIVersion, got.Kind)
	}
	if got.Metadata.Name != "skewgate" || got.Metadata.Namespace != "kube-system" {
		t.Errorf("metadata %+v, want kube-system/skewgate", got.Metadata)
	}
	var want any
	if err := yaml.Unmarshal([]byte(ruleFile), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Spec, want) {
		t.Errorf("spec is not the rule file:\n got %v\nwant %v", got.Spec, want)
	}
	text := string(out)
	if !strings.HasPrefix(text, "# Code generated ") || !strings.Contains(text, "DO NOT EDIT.") {
		t.Errorf("no generated-code header:\n%s", out)
	}
	if !strings.Contains(text, "# Why this alert exists.") {
		t.Errorf("a rule's comment was lost:\n%s", out)
	}
	if strings.Contains(text, "About this file") {
		t.Errorf("the rule file's own header was carried over:\n%s", out)
	}
}

func TestPrometheusRuleRejects(t *testing.T) {
	for name, in := range map[string]string{
		"not YAML":          "groups: [",
		"empty":             "",
		"a list":            "- name: example\n",
		"no groups":         "rules: []\n",
		"groups not a list": "groups: {name: example}\n",
		"two documents":     "groups: []\n---\ngroups: []\n",
		"trailing garbage":  "groups: []\n---\n[\n",
	} {
		t.Run(name, func(t *testing.T) {
			out, err := PrometheusRule([]byte(in))
			if err == nil {
				t.Fatalf("no error; wrote\n%s", out)
			}
			if name != "not YAML" && !errors.Is(err, ErrNotRuleFile) {
				t.Errorf("error %v does not wrap ErrNotRuleFile", err)
			}
		})
	}
}

// TestMultilineExprReadsBack: an expr folded over lines more indented than
// its first reads back as the rule file's value through the PrometheusRule,
// by kubectl's parser (sigs.k8s.io/yaml) and by this package's
// (go.yaml.in/yaml/v3, as kustomize's kyaml). Folded, the encoder's output
// read back with two or three line breaks where the file had one.
func TestMultilineExprReadsBack(t *testing.T) {
	const src = `groups:
  - name: example
    rules:
      - alert: Example
        expr: >-
          (
            sum(rate(a[5m]))
          )
          > 0.05
`
	const want = "(\n  sum(rate(a[5m]))\n) > 0.05"
	out, err := PrometheusRule([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	type rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Expr string `json:"expr" yaml:"expr"`
				} `json:"rules" yaml:"rules"`
			} `json:"groups" yaml:"groups"`
		} `json:"spec" yaml:"spec"`
	}
	var v3, sigs rule
	if err := yaml.Unmarshal(out, &v3); err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(out, &sigs); err != nil {
		t.Fatal(err)
	}
	for parser, r := range map[string]rule{"yaml/v3": v3, "sigs.k8s.io/yaml": sigs} {
		if got := r.Spec.Groups[0].Rules[0].Expr; got != want {
			t.Errorf("%s reads expr %q, want %q; PrometheusRule:\n%s", parser, got, want, out)
		}
	}
}
