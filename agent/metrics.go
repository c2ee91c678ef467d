package agent

import (
	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics shared by the steering and connstat collectors. Each collector
// sets the const label "program" so both can be registered side by side.
var (
	descProgRunSeconds = func(program string) *prometheus.Desc {
		return prometheus.NewDesc("skewgate_bpf_program_run_seconds_total",
			"Time the kernel spent running the BPF program (bpf stats; enabled by the agent).",
			nil, prometheus.Labels{"program": program})
	}
	descProgRuns = func(program string) *prometheus.Desc {
		return prometheus.NewDesc("skewgate_bpf_program_runs_total",
			"Times the kernel ran the BPF program (bpf stats; enabled by the agent).",
			nil, prometheus.Labels{"program": program})
	}
	descCollectionErrors = func(program string) *prometheus.Desc {
		return prometheus.NewDesc("skewgate_bpf_collection_errors_total",
			"Errors reading BPF maps or program stats at scrape time.",
			nil, prometheus.Labels{"program": program})
	}
)

// progStats emits run time and run count of prog. Both stay 0 while no
// process holds bpf stats enabled (ebpf.EnableStats).
func progStats(ch chan<- prometheus.Metric, prog *ebpf.Program, runSeconds, runs *prometheus.Desc) error {
	st, err := prog.Stats()
	if err != nil {
		return err
	}
	ch <- prometheus.MustNewConstMetric(runSeconds, prometheus.CounterValue, st.Runtime.Seconds())
	ch <- prometheus.MustNewConstMetric(runs, prometheus.CounterValue, float64(st.RunCount))
	return nil
}
