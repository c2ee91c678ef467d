// Command prometheusrule writes the prometheus-operator PrometheusRule
// generated from skewgate's alerting rules (go generate ./deploy/monitoring).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/skewgate/skewgate/deploy/monitoring/rules"
)

func main() {
	in := flag.String("in", "alerts.yaml", "Prometheus rule file to read")
	out := flag.String("out", "prometheusrule.yaml", "PrometheusRule manifest to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "prometheusrule:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	ruleFile, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	manifest, err := rules.PrometheusRule(ruleFile)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return os.WriteFile(out, manifest, 0o644)
}
