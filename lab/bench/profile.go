package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// profile starts fetching a CPU profile of skewgate for d while p is under
// load, into cfg.ProfileDir/skewgate-<load>-<route>.pprof; wait returns
// once it is written.
func profile(ctx context.Context, cfg Config, load string, p Path, d time.Duration) (wait func() error) {
	done := make(chan error, 1)
	go func() {
		url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", cfg.Admin, int(d.Seconds()))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			done <- err
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- fmt.Errorf("profile: %w", err)
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- fmt.Errorf("profile: %s (is skewgate run with --profiling?)", resp.Status)
			return
		}
		f, err := os.Create(filepath.Join(cfg.ProfileDir, "skewgate-"+load+"-"+strings.ReplaceAll(p.Route, "/", "-")+".pprof"))
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		done <- err
	}()
	return func() error { return <-done }
}
