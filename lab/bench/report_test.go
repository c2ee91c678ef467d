package bench

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeReport is a run's figures made up so that every ratio is known.
func fakeReport() *Report {
	lat := func(base time.Duration) []time.Duration {
		out := make([]time.Duration, 100)
		for i := range out {
			out[i] = base + time.Duration(i)*time.Microsecond
		}
		return out
	}
	paths := []Path{
		{Route: "local", Name: "direct"}, {Route: "local", Name: "skewgate", Proxy: 1},
		{Route: "peer", Name: "direct"}, {Route: "peer", Name: "in-tree", Proxy: 2}, {Route: "peer", Name: "skewgate", Proxy: 1},
	}
	return &Report{
		Config: Config{Paths: paths, Sequential: 100, Concurrency: 32, Saturation: 10 * time.Second, Rounds: 2},
		Latency: map[string][]time.Duration{
			"local/direct": lat(1000 * time.Microsecond), "local/skewgate": lat(1050 * time.Microsecond),
			"peer/direct": lat(1000 * time.Microsecond), "peer/in-tree": lat(2000 * time.Microsecond), "peer/skewgate": lat(1100 * time.Microsecond),
		},
		Load: map[string]Load{
			"local/direct":   {Requests: 1000, Elapsed: time.Second, ServerCPU: 200 * time.Millisecond},
			"local/skewgate": {Requests: 800, Elapsed: time.Second, ProxyCPU: 80 * time.Millisecond, ServerCPU: 160 * time.Millisecond},
			"peer/direct":    {Requests: 1000, Elapsed: time.Second},
			"peer/in-tree":   {Requests: 500, Elapsed: time.Second},
			"peer/skewgate":  {Requests: 700, Elapsed: time.Second},
		},
		Watch: map[string]WatchResult{
			"local/direct":   {Latency: lat(1000 * time.Microsecond)},
			"local/skewgate": {Latency: lat(1200 * time.Microsecond), ProxyCPU: 10 * time.Millisecond, RSSPeak: 100 << 20},
		},
		BPF:     []BPFCost{{Program: "steer", Runs: 10, PerRun: 150 * time.Nanosecond}, {Program: "connstat", Runs: 10, PerRun: 300 * time.Nanosecond}},
		RSSIdle: 40 << 20,
	}
}

func TestTableRatios(t *testing.T) {
	r := fakeReport()
	var b bytes.Buffer
	r.WriteTable(&b)
	for _, want := range []string{
		// p50 1100 vs 1050 (index 50 of 100), p90 1140 vs 1090, throughput 800/1000, 100 µs
		// of skewgate CPU and 200 µs of the apiserver's per request.
		"| local | skewgate | 1100 | 1140 | 1149 | 1.05 | 1.05 | 1.05 | 800 | 0.80 | 100 | 200 |",
		"| peer | in-tree | 2050 | 2090 | 2099 | 1.95 | 1.92 | 1.91 | 500 | 0.50 | 0 | — |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestGoals(t *testing.T) {
	met := map[string]bool{}
	for _, g := range fakeReport().Goals() {
		met[g.What] = g.Met
	}
	for what, want := range map[string]bool{
		"local p50 ≤ 1.10 × direct":                   true,
		"local saturation throughput ≥ 0.85 × direct": false,
		"peer p50 ≤ 0.60 × in-tree proxy":             true, // 1150/2050
		"BPF steer ≤ 200 ns per run":                  true,
		"BPF connstat ≤ 200 ns per run":               false,
		"skewgate RSS idle ≤ 64 MiB":                  true,
	} {
		if got, ok := met[what]; !ok || got != want {
			t.Errorf("goal %q met = %t (listed %t), want %t", what, got, ok, want)
		}
	}
}

func TestWriteDocs(t *testing.T) {
	dir := t.TempDir()
	if err := WriteDocs(dir, fakeReport()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, ChartFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("chart: %v", err)
	}
	if img.Bounds().Dx() < 600 {
		t.Errorf("chart is %v", img.Bounds())
	}
	md, err := os.ReadFile(filepath.Join(dir, "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"](" + ChartFile + ")", "## Watch-heavy", "| steer | 10 | 150 |", "## Goals"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("benchmarks.md lacks %q", want)
		}
	}
}
