package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// sequential sends n GETs on every path, one at a time, round-robin over
// the paths so that drift in the machine's load hits all alike. The
// latencies come back sorted, by path key.
func sequential(ctx context.Context, paths []Path, n int) (map[string][]time.Duration, error) {
	out := map[string][]time.Duration{}
	for range n {
		for _, p := range paths {
			d, err := get(ctx, p)
			if err != nil {
				return nil, err
			}
			out[p.Key()] = append(out[p.Key()], d)
		}
	}
	for _, l := range out {
		slices.Sort(l)
	}
	return out, nil
}

// Load is a path's saturation figures.
type Load struct {
	Requests int
	Elapsed  time.Duration
	// ProxyCPU and ServerCPU are the CPU time the path's proxy and the
	// local apiserver spent meanwhile.
	ProxyCPU, ServerCPU time.Duration
}

// Throughput is requests per second.
func (l Load) Throughput() float64 { return float64(l.Requests) / l.Elapsed.Seconds() }

// PerRequest is cpu divided by the requests.
func (l Load) PerRequest(cpu time.Duration) time.Duration {
	if l.Requests == 0 {
		return 0
	}
	return cpu / time.Duration(l.Requests)
}

// saturate runs cfg.Concurrency clients on each path in turn, in
// cfg.Rounds rounds, and sums each path's figures.
func saturate(ctx context.Context, cfg Config) (map[string]Load, error) {
	out := map[string]Load{}
	slice := cfg.Saturation / time.Duration(cfg.Rounds)
	for round := range cfg.Rounds {
		for _, p := range cfg.Paths {
			profiled := func() error { return nil }
			if round == 0 && p.Proxy == cfg.Skewgate && cfg.ProfileDir != "" {
				profiled = profile(ctx, cfg, "saturation", p, slice-time.Second)
			}
			l, err := burst(ctx, p, cfg.Concurrency, slice, cfg.Server)
			if perr := profiled(); err == nil {
				err = perr
			}
			if err != nil {
				return nil, err
			}
			sum := out[p.Key()]
			sum.Requests += l.Requests
			sum.Elapsed += l.Elapsed
			sum.ProxyCPU += l.ProxyCPU
			sum.ServerCPU += l.ServerCPU
			out[p.Key()] = sum
		}
	}
	return out, nil
}

// burst is c clients sending GETs on p for d. Any failed request fails the
// run: a saturation figure with errors in it would flatter the path.
func burst(ctx context.Context, p Path, c int, d time.Duration, server int) (Load, error) {
	proxy0, server0 := cpuTime(p.Proxy), cpuTime(server)
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, c)
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := get(ctx, p); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	l := Load{Requests: int(n.Load()), Elapsed: time.Since(start),
		ProxyCPU: cpuTime(p.Proxy) - proxy0, ServerCPU: cpuTime(server) - server0}
	close(errs)
	if err := <-errs; err != nil {
		return l, err
	}
	return l, nil
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's CPU times.
const clockTick = 10 * time.Millisecond

// cpuTime is the user and system CPU time pid has used (0 for pid 0).
func cpuTime(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis: utime is the 12th
	// and stime the 13th of them (fields 14 and 15 of the line).
	rest := string(data[strings.LastIndexByte(string(data), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * clockTick
}

// rss is pid's resident set in bytes.
func rss(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("rss: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("rss: no VmRSS for pid %d", pid)
}
