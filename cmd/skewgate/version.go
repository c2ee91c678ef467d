package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// Set by `make build` with -ldflags "-X main.version=… -X main.commit=…
// -X main.buildDate=…"; a plain go build falls back to the VCS stamp.
var (
	version   = ""
	commit    = ""
	buildDate = ""
)

// buildInfo is what `skewgate version` prints and skewgate_build_info says.
type buildInfo struct {
	Version, Commit, GoVersion, BuildDate string
}

func buildVersion() buildInfo {
	b := buildInfo{Version: version, Commit: commit, GoVersion: runtime.Version(), BuildDate: buildDate}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && b.Commit == "":
				b.Commit = s.Value
			case s.Key == "vcs.time" && b.BuildDate == "":
				b.BuildDate = s.Value
			}
		}
	}
	for _, f := range []*string{&b.Version, &b.Commit, &b.BuildDate} {
		if *f == "" {
			*f = "unknown"
		}
	}
	if b.Version == "unknown" {
		b.Version = "v0.0.0-dev"
	}
	return b
}

func versionText() string {
	b := buildVersion()
	return fmt.Sprintf("skewgate %s\n  commit:     %s\n  go:         %s\n  build date: %s\n  platform:   %s/%s\n",
		b.Version, b.Commit, b.GoVersion, b.BuildDate, runtime.GOOS, runtime.GOARCH)
}

// userAgent names skewgate and its version in its own requests.
func userAgent() string {
	b := buildVersion()
	c := b.Commit
	if len(c) > 7 {
		c = c[:7]
	}
	return fmt.Sprintf("skewgate/%s (%s/%s) %s", b.Version, runtime.GOOS, runtime.GOARCH, c)
}

// buildInfoGauge is skewgate_build_info: 1, labelled with the build.
func buildInfoGauge() prometheus.Collector {
	b := buildVersion()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "skewgate_build_info",
		Help:        "Always 1; the labels say which skewgate build runs.",
		ConstLabels: prometheus.Labels{"version": b.Version, "commit": b.Commit, "go_version": b.GoVersion, "build_date": b.BuildDate},
	})
	g.Set(1)
	return g
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print skewgate's version, commit, Go version and build date",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(c.OutOrStdout(), versionText())
			return err
		},
	}
}
