package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Report is one run's figures.
type Report struct {
	Config  Config
	Started time.Time
	Took    time.Duration
	// Latency are the sequential GETs' latencies by path key, sorted.
	Latency map[string][]time.Duration
	// Load is the saturation figures by path key.
	Load map[string]Load
	// Watch is the watch-heavy figures by path key.
	Watch map[string]WatchResult
	BPF   []BPFCost
	// RSSIdle and RSSLoaded are skewgate's resident set before any load
	// and after saturation.
	RSSIdle, RSSLoaded int64
}

// quantile of sorted latencies.
func quantile(l []time.Duration, q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[min(len(l)-1, int(q*float64(len(l))))]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// baseline is the direct path of p's route.
func (r *Report) baseline(p Path) string { return p.Route + "/direct" }

// ratio of path key's quantile q to its route's direct path's.
func (r *Report) ratio(p Path, q float64) float64 {
	return micros(quantile(r.Latency[p.Key()], q)) / micros(quantile(r.Latency[r.baseline(p)], q))
}

func (r *Report) throughputRatio(p Path) float64 {
	return r.Load[p.Key()].Throughput() / r.Load[r.baseline(p)].Throughput()
}

// WriteTable writes the main table in Markdown.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintln(w, "| route | path | p50 µs | p90 µs | p99 µs | p50 × | p90 × | p99 × | req/s | req/s × | proxy CPU µs/req | apiserver CPU µs/req |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, p := range r.Config.Paths {
		lat, load := r.Latency[p.Key()], r.Load[p.Key()]
		proxyCPU, serverCPU := "—", "—"
		if p.Proxy != 0 {
			proxyCPU = fmt.Sprintf("%.0f", micros(load.PerRequest(load.ProxyCPU)))
		}
		if p.Route == "local" {
			serverCPU = fmt.Sprintf("%.0f", micros(load.PerRequest(load.ServerCPU)))
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f | %.0f | %.2f | %s | %s |\n",
			p.Route, p.Name, micros(quantile(lat, .5)), micros(quantile(lat, .9)), micros(quantile(lat, .99)),
			r.ratio(p, .5), r.ratio(p, .9), r.ratio(p, .99), load.Throughput(), r.throughputRatio(p), proxyCPU, serverCPU)
	}
}

// WriteWatch writes the watch-heavy table.
func (r *Report) WriteWatch(w io.Writer) {
	fmt.Fprintln(w, "| path | GET p50 µs | GET p99 µs | p50 × | p99 × | GETs | proxy CPU µs/GET | proxy RSS peak MiB |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|")
	base := r.Watch["local/direct"].Latency
	for _, p := range r.Config.Paths {
		res, ok := r.Watch[p.Key()]
		if !ok {
			continue
		}
		cpu, peak := "—", "—"
		if p.Proxy != 0 && len(res.Latency) > 0 {
			cpu = fmt.Sprintf("%.0f", micros(res.ProxyCPU/time.Duration(len(res.Latency))))
			peak = fmt.Sprintf("%.0f", mib(res.RSSPeak))
		}
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.2f | %.2f | %d | %s | %s |\n", p.Key(),
			micros(quantile(res.Latency, .5)), micros(quantile(res.Latency, .99)),
			micros(quantile(res.Latency, .5))/micros(quantile(base, .5)), micros(quantile(res.Latency, .99))/micros(quantile(base, .99)),
			len(res.Latency), cpu, peak)
	}
}

// WriteBPF writes the BPF programs' costs.
func (r *Report) WriteBPF(w io.Writer) {
	fmt.Fprintln(w, "| program | runs | ns per run |")
	fmt.Fprintln(w, "|---|--:|--:|")
	for _, c := range r.BPF {
		fmt.Fprintf(w, "| %s | %.0f | %d |\n", c.Program, c.Runs, c.PerRun.Nanoseconds())
	}
}

// Goal is one target of the performance work and whether this run met it.
type Goal struct {
	What     string
	Measured string
	Met      bool
}

// Goals judges the run against the targets (issue 10).
func (r *Report) Goals() []Goal {
	var goals []Goal
	add := func(what string, v, limit float64, below bool, unit string) {
		met := v <= limit
		if !below {
			met = v >= limit
		}
		goals = append(goals, Goal{What: what, Measured: fmt.Sprintf("%.2f%s", v, unit), Met: met})
	}
	sg := func(route string) Path { return Path{Route: route, Name: "skewgate"} }
	add("local p50 ≤ 1.10 × direct", r.ratio(sg("local"), .5), 1.10, true, "")
	add("local p99 ≤ 1.25 × direct", r.ratio(sg("local"), .99), 1.25, true, "")
	add("local saturation throughput ≥ 0.85 × direct", r.throughputRatio(sg("local")), 0.85, false, "")
	add("peer p50 ≤ 1.20 × direct to the capable server", r.ratio(sg("peer"), .5), 1.20, true, "")
	if len(r.Latency["standby/skewgate"]) > 0 {
		// Mode auto outside a skew window is the direct path.
		add("standby (auto, no window) p50 ≤ 1.05 × direct", r.ratio(sg("standby"), .5), 1.05, true, "")
		add("standby saturation throughput ≥ 0.95 × direct", r.throughputRatio(sg("standby")), 0.95, false, "")
	}
	if in := r.Latency["peer/in-tree"]; len(in) > 0 {
		add("peer p50 ≤ 0.60 × in-tree proxy", micros(quantile(r.Latency["peer/skewgate"], .5))/micros(quantile(in, .5)), 0.60, true, "")
	}
	local := r.Load["local/skewgate"]
	add("local proxy CPU ≤ 80 µs per request", micros(local.PerRequest(local.ProxyCPU)), 80, true, " µs")
	if floor, ok := r.Load["local/go-proxy"]; ok && floor.ProxyCPU > 0 {
		add("local proxy CPU ≤ 1.15 × go-proxy's (the bare Go hop)", float64(local.PerRequest(local.ProxyCPU))/float64(floor.PerRequest(floor.ProxyCPU)), 1.15, true, "")
	}
	add("skewgate RSS idle ≤ 64 MiB", mib(r.RSSIdle), 64, true, " MiB")
	add("skewgate RSS with watches + GETs ≤ 160 MiB", mib(r.Watch["local/skewgate"].RSSPeak), 160, true, " MiB")
	for _, c := range r.BPF {
		add("BPF "+c.Program+" ≤ 200 ns per run", float64(c.PerRun.Nanoseconds()), 200, true, " ns")
	}
	return goals
}

// WriteGoals writes the goals table.
func (r *Report) WriteGoals(w io.Writer) {
	fmt.Fprintln(w, "| goal | measured | met |")
	fmt.Fprintln(w, "|---|--:|:-:|")
	for _, g := range r.Goals() {
		met := "no"
		if g.Met {
			met = "yes"
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", g.What, g.Measured, met)
	}
}

// Summary is the report as printed after a run.
func (r *Report) Summary() string {
	var b strings.Builder
	r.WriteTable(&b)
	fmt.Fprintln(&b)
	r.WriteWatch(&b)
	fmt.Fprintln(&b)
	r.WriteBPF(&b)
	fmt.Fprintf(&b, "\nskewgate RSS: idle %.0f MiB, after saturation %.0f MiB\n\n", mib(r.RSSIdle), mib(r.RSSLoaded))
	r.WriteGoals(&b)
	return b.String()
}
