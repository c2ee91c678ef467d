// Command dashboard writes skewgate's Grafana dashboard JSON
// (go generate ./deploy/monitoring).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/skewgate/skewgate/deploy/monitoring/dashboard"
)

func main() {
	out := flag.String("out", "skewgate-dashboard.json", "dashboard JSON to write")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	b, err := dashboard.JSON()
	if err != nil {
		return err
	}
	return os.WriteFile(out, b, 0o644)
}
