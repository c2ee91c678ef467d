package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// WatchLoad is many open watches with a steady rate of GETs beside them, as
// a control plane carries all day: kubelets' and controllers' watches, and
// their reads.
type WatchLoad struct {
	Watches  int
	RPS      int
	Duration time.Duration
}

// WatchResult is one path's figures under the watch load.
type WatchResult struct {
	Latency  []time.Duration // of the GETs, sorted
	ProxyCPU time.Duration
	// RSSPeak is the proxy's largest resident set meanwhile (sampled
	// every second; 0 on the direct path).
	RSSPeak int64
}

// watchHeavy runs the watch load on the local direct, go-proxy and
// skewgate paths.
func watchHeavy(ctx context.Context, cfg Config) (map[string]WatchResult, error) {
	out := map[string]WatchResult{}
	for _, p := range cfg.Paths {
		if p.Route != "local" || p.Name != "direct" && p.Name != "go-proxy" && p.Name != "skewgate" {
			continue
		}
		res, err := watchPath(ctx, p, cfg)
		if err != nil {
			return nil, err
		}
		out[p.Key()] = res
	}
	return out, nil
}

func watchPath(ctx context.Context, p Path, cfg Config) (WatchResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopWatches, err := openWatches(ctx, p, cfg.Watch.Watches)
	if err != nil {
		return WatchResult{}, err
	}
	defer stopWatches()
	var res WatchResult
	cpu0 := cpuTime(p.Proxy)
	sampler := sampleRSS(ctx, p.Proxy, &res.RSSPeak)
	profiled := func() error { return nil }
	if p.Proxy == cfg.Skewgate && cfg.ProfileDir != "" {
		profiled = profile(ctx, cfg, "watch", p, cfg.Watch.Duration-time.Second)
	}
	lat, err := paced(ctx, p, cfg.Watch.RPS, cfg.Watch.Duration)
	sampler()
	if perr := profiled(); err == nil {
		err = perr
	}
	res.Latency, res.ProxyCPU = lat, cpuTime(p.Proxy)-cpu0
	return res, err
}

// openWatches opens n watches on p's list and returns once every one has
// its answer's headers; stop ends them and waits.
func openWatches(ctx context.Context, p Path, n int) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	opened := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"?watch=true&allowWatchBookmarks=true", nil)
			resp, err := p.Client.Do(req)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s: watch: %s", p.Key(), resp.Status)
			}
			opened <- err
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	stop = func() { cancel(); wg.Wait() }
	for range n {
		if err := <-opened; err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

// paced sends rps GETs a second on p for d, each on its own goroutine, and
// returns their sorted latencies.
func paced(ctx context.Context, p Path, rps int, d time.Duration) ([]time.Duration, error) {
	tick := time.NewTicker(time.Second / time.Duration(rps))
	defer tick.Stop()
	end := time.After(d)
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	for loop := true; loop; {
		select {
		case <-end:
			loop = false
		case <-tick.C:
			wg.Add(1)
			go func() {
				defer wg.Done()
				took, err := get(ctx, p)
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				lat = append(lat, took)
			}()
		}
	}
	wg.Wait()
	slices.Sort(lat)
	return lat, firstErr
}

// sampleRSS records pid's largest resident set into peak every second
// until the returned stop is called (nothing for pid 0).
func sampleRSS(ctx context.Context, pid int, peak *int64) (stop func()) {
	if pid == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			if v, err := rss(pid); err == nil && v > *peak {
				*peak = v
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}
