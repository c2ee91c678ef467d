package bench

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// BPFCost is one of skewgate's BPF programs: how often the kernel ran it
// over the whole run and how long a run took on average (bpf stats, which
// the agent enables).
type BPFCost struct {
	Program string
	Runs    float64
	PerRun  time.Duration
}

// bpfCosts reads skewgate_bpf_program_run_seconds_total and _runs_total
// from skewgate's /metrics.
func bpfCosts(ctx context.Context, admin string) ([]BPFCost, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("skewgate metrics: %w", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("skewgate metrics: %w", err)
	}
	seconds, runs := byProgram(fams["skewgate_bpf_program_run_seconds_total"]), byProgram(fams["skewgate_bpf_program_runs_total"])
	if len(runs) == 0 {
		return nil, fmt.Errorf("skewgate metrics: no skewgate_bpf_program_runs_total: is steering on?")
	}
	var out []BPFCost
	for prog, n := range runs {
		c := BPFCost{Program: prog, Runs: n}
		if n > 0 {
			c.PerRun = time.Duration(seconds[prog] / n * float64(time.Second))
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Program < out[j].Program })
	return out, nil
}

// byProgram is a counter family's value by its program label.
func byProgram(f *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "program" {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}
