// Command dashboard writes skewgate's Grafana dashboard JSON and the
// ConfigMap that ships it for Grafana's sidecar (go generate
// ./deploy/monitoring).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/skewgate/skewgate/deploy/monitoring/dashboard"
)

func main() {
	out := flag.String("out", "skewgate-dashboard.json", "dashboard JSON to write")
	cm := flag.String("configmap", "", "the ConfigMap to write (empty: none)")
	flag.Parse()
	if err := run(*out, *cm); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}

func run(out, cm string) error {
	b, err := dashboard.JSON()
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		return err
	}
	if cm == "" {
		return nil
	}
	y, err := dashboard.ConfigMapYAML()
	if err != nil {
		return err
	}
	return os.WriteFile(cm, y, 0o644)
}
