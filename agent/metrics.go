package agent

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics shared by the steering and connstat collectors. Each collector
// sets the const label "program" so both can be registered side by side.
var (
	descProgRunSeconds = func(program string) *prometheus.Desc {
		return prometheus.NewDesc("skewgate_bpf_program_run_seconds_total",
			"Time the kernel spent running the BPF program (bpf stats: enabled by the agent when it has CAP_SYS_ADMIN, else by sysctl kernel.bpf_stats_enabled=1; 0 otherwise).",
			nil, prometheus.Labels{"program": program})
	}
	descProgRuns = func(program string) *prometheus.Desc {
		return prometheus.NewDesc("skewgate_bpf_program_runs_total",
			"Times the kernel ran the BPF program (bpf stats: enabled by the agent when it has CAP_SYS_ADMIN, else by sysctl kernel.bpf_stats_enabled=1; 0 otherwise).",
			nil, prometheus.Labels{"program": program})
	}
	descCollectionErrors = func(program string) *prometheus.Desc {
		return prometheus.NewDesc("skewgate_bpf_collection_errors_total",
			"Errors reading BPF maps or program stats at scrape time.",
			nil, prometheus.Labels{"program": program})
	}
	descMapEntries = prometheus.NewDesc("skewgate_bpf_map_entries",
		"Entries in a BPF hash map that grows with traffic; when it is full, new keys go uncounted.",
		[]string{"map"}, nil)
	descMapMaxEntries = prometheus.NewDesc("skewgate_bpf_map_max_entries",
		"Capacity of the BPF map.", []string{"map"}, nil)
)

// mapPressure emits how full m is, counting its keys (the maps it is used
// for hold at most a few thousand).
func mapPressure(ch chan<- prometheus.Metric, name string, m *ebpf.Map) error {
	n := 0
	var key any // nil: the first key
	for n <= int(m.MaxEntries()) {
		next, err := m.NextKeyBytes(key)
		if err != nil {
			return fmt.Errorf("count %s: %w", name, err)
		}
		if next == nil {
			break
		}
		key, n = next, n+1
	}
	ch <- prometheus.MustNewConstMetric(descMapEntries, prometheus.GaugeValue, float64(n), name)
	ch <- prometheus.MustNewConstMetric(descMapMaxEntries, prometheus.GaugeValue, float64(m.MaxEntries()), name)
	return nil
}

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
