// Package bench measures skewgate's hop against the alternatives on the
// lab, in one run: latency of sequential requests, saturation throughput,
// CPU per request of each proxy, skewgate's memory, a watch-heavy load and
// the kernel's cost of skewgate's BPF programs. `make bench` runs it and
// writes docs/benchmarks.md.
package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Path is one way to reach an apiserver, measured side by side with the
// others of its route.
type Path struct {
	// Name is what the table calls it: direct, haproxy, skewgate, in-tree.
	Name string
	// Route is "local" (the apiserver the client reached serves the
	// request) or "peer" (only another apiserver does).
	Route  string
	URL    string
	Client *http.Client
	// Proxy is the PID whose CPU time is this path's hop (0: none).
	Proxy int
	// Want is the X-Skewgate-Route the answer must carry ("" for none).
	Want string
}

// Key names the path in the table.
func (p Path) Key() string { return p.Route + "/" + p.Name }

// Config is one benchmark run.
type Config struct {
	Paths []Path
	// Sequential GETs per path, interleaved round-robin over the paths.
	Sequential int
	// Concurrency and Saturation: Concurrency clients per path for
	// Saturation in all, split into Rounds interleaved over the paths.
	Concurrency int
	Saturation  time.Duration
	Rounds      int
	// Server is the PID of the apiserver every local path ends at.
	Server int
	// Skewgate is skewgate's PID and Admin its admin listener's URL.
	Skewgate int
	Admin    string
	// Watch is the watch-heavy load, run on the local direct, go-proxy
	// and skewgate paths.
	Watch WatchLoad
	// ProfileDir, if set, receives a CPU profile of skewgate (from its
	// /debug/pprof) for each of its paths' first saturation round, and
	// for its watch-heavy run.
	ProfileDir string
}

// Run measures every path and returns the report.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	r := &Report{Config: cfg, Started: time.Now()}
	if err := checkPaths(ctx, cfg.Paths); err != nil {
		return nil, err
	}
	var err error
	if r.RSSIdle, err = rss(cfg.Skewgate); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "bench: %d sequential GETs per path\n", cfg.Sequential)
	if r.Latency, err = sequential(ctx, cfg.Paths, cfg.Sequential); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "bench: saturation, %d clients, %s per path\n", cfg.Concurrency, cfg.Saturation)
	if r.Load, err = saturate(ctx, cfg); err != nil {
		return nil, err
	}
	if r.RSSLoaded, err = rss(cfg.Skewgate); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "bench: %d watches + %d rps, %s per path\n", cfg.Watch.Watches, cfg.Watch.RPS, cfg.Watch.Duration)
	if r.Watch, err = watchHeavy(ctx, cfg); err != nil {
		return nil, err
	}
	if r.BPF, err = bpfCosts(ctx, cfg.Admin); err != nil {
		return nil, err
	}
	r.Took = time.Since(r.Started)
	return r, nil
}

// checkPaths fails unless every path answers 200 with its route.
func checkPaths(ctx context.Context, paths []Path) error {
	for _, p := range paths {
		if _, err := get(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// get sends one GET on p and checks the answer.
func get(ctx context.Context, p Path) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	resp, err := p.Client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.Key(), err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s: read: %w", p.Key(), err)
	case resp.StatusCode != http.StatusOK:
		return 0, fmt.Errorf("%s: %s", p.Key(), resp.Status)
	case resp.Header.Get("X-Skewgate-Route") != p.Want:
		return 0, fmt.Errorf("%s: route %q, want %q", p.Key(), resp.Header.Get("X-Skewgate-Route"), p.Want)
	}
	return took, nil
}
