// Package labtest runs a test package against a lab brought up once for the
// whole package, with skewgate built for it.
package labtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/testenv"
)

// Env is what a package's tests get.
type Env struct {
	Plane *lab.Plane
	// Skewgate is the skewgate binary built for this run.
	Skewgate string
}

// Main is the body of a lab test package's TestMain: it brings up spec,
// builds skewgate, calls setup, runs the tests, and tears the lab down —
// or, if the test binary dies (a panic, -timeout), a reaper does. Without
// root the package is skipped, and fails in CI. Use it as
// os.Exit(labtest.Main(m, pkg, spec, setup)).
func Main(m *testing.M, pkg string, spec lab.Spec, setup func(context.Context, *Env) error) int {
	return Exclusive(m, pkg, func(dir string) int {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		// Relative, as `make lab-up` passes .lab: every path the lab
		// writes must work from any folder (TestLabKubeconfigWorksFromAnyFolder).
		upDir := dir
		if wd, err := os.Getwd(); err == nil {
			if rel, err := filepath.Rel(wd, dir); err == nil {
				upDir = rel
			}
		}
		p, err := lab.Up(ctx, lab.Options{Dir: upDir, CacheDir: lab.DefaultCacheDir(), Spec: spec, Progress: os.Stderr})
		if err != nil {
			fmt.Fprintln(os.Stderr, pkg+": lab up:", err)
			return 1
		}
		defer func() {
			if err := lab.Down(dir); err != nil {
				fmt.Fprintln(os.Stderr, pkg+": lab down:", err)
				return
			}
			// Only the skewgate binary built for this run is left.
			os.RemoveAll(dir)
		}()
		env := &Env{Plane: p}
		if env.Skewgate, err = BuildSkewgate(ctx, dir); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", pkg, err)
			return 1
		}
		if err := setup(ctx, env); err != nil {
			fmt.Fprintln(os.Stderr, pkg+":", err)
			return 1
		}
		return m.Run()
	})
}

// Exclusive is the body of a TestMain whose tests bring labs up themselves
// in dir: it takes the lab lock (packages that use the lab take turns),
// makes dir, and starts a reaper that tears down whatever lab is up in dir
// if the test binary dies (a panic, -timeout). Without root the package is
// skipped, and fails in CI. run's result is the exit status; run removes
// dir once its labs are down (a failed tear-down keeps the logs there).
func Exclusive(m *testing.M, pkg string, run func(dir string) int) int {
	lab.RunReaper()
	if os.Geteuid() != 0 {
		if testenv.InCI() {
			fmt.Fprintln(os.Stderr, pkg+": needs root to run the lab, and CI=true forbids skipping")
			return 1
		}
		fmt.Fprintln(os.Stderr, pkg+": skipped, needs root to run the lab (runs in CI)")
		return 0
	}
	// Every lab uses the same namespaces, bridge and etcd port: packages
	// that go test runs in parallel take turns.
	lock, err := lab.Lock()
	if err != nil {
		fmt.Fprintln(os.Stderr, pkg+":", err)
		return 1
	}
	defer lock.Close()
	dir, err := os.MkdirTemp("", "skewgate-"+pkg+"-lab-")
	if err != nil {
		fmt.Fprintln(os.Stderr, pkg+":", err)
		return 1
	}
	stopReaper, err := lab.StartReaper(dir, lock)
	if err != nil {
		fmt.Fprintln(os.Stderr, pkg+":", err)
		return 1
	}
	defer stopReaper()
	return run(dir)
}

// BuildSkewgate builds skewgate into dir for this run.
func BuildSkewgate(ctx context.Context, dir string) (string, error) {
	return BuildCommand(ctx, dir, "skewgate")
}

// BuildCommand builds skewgate's command name (cmd/<name>) into dir.
func BuildCommand(ctx context.Context, dir, name string) (string, error) {
	bin := filepath.Join(dir, name)
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/skewgate/skewgate/cmd/"+name)
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", name, err, out)
	}
	return bin, nil
}

// FreshClient is the lab admin on a new TCP and TLS connection for every
// request (no session resumption): steering decides per new connection.
func FreshClient(t testing.TB, p *lab.Plane) *http.Client {
	t.Helper()
	c, err := p.AdminHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	tr := c.Transport.(*http.Transport)
	tr.DisableKeepAlives = true
	tr.TLSClientConfig = tr.TLSClientConfig.Clone()
	tr.TLSClientConfig.ClientSessionCache = nil
	tr.TLSClientConfig.SessionTicketsDisabled = true
	return c
}

// Get sends one GET and returns the status and the route skewgate took
// (X-Skewgate-Route, empty when skewgate did not answer).
func Get(c *http.Client, url string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Skewgate-Route"), nil
}

// RunSkewgate runs the host's skewgate (steer, uninstall, manifest) and
// returns its output, failing t when it fails.
func RunSkewgate(t testing.TB, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("skewgate %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
