package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ChartFile is the latency chart's name under the docs directory.
const ChartFile = "bench/latency.png"

// WriteDocs writes docs/benchmarks.md and the latency chart into docsDir.
func WriteDocs(docsDir string, r *Report) error {
	if err := os.MkdirAll(filepath.Join(docsDir, filepath.Dir(ChartFile)), 0o755); err != nil {
		return err
	}
	if err := WriteChart(filepath.Join(docsDir, ChartFile), r); err != nil {
		return err
	}
	var b bytes.Buffer
	r.writeDoc(&b)
	path := filepath.Join(docsDir, "benchmarks.md")
	// make scale's section and its notes, if there are any, stay.
	doc := b.String()
	if old, err := os.ReadFile(path); err == nil {
		for _, h := range []string{ScaleHeading, ScaleNotesHeading} {
			if sec := Section(string(old), h); sec != "" {
				doc = ReplaceSection(doc, h, sec)
			}
		}
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

func (r *Report) writeDoc(b *bytes.Buffer) {
	c := r.Config
	fmt.Fprintf(b, `# Benchmarks

Written by `+"`make bench`"+` (lab/bench) on %s; the run took %s. Every figure
below comes from that one run: the paths are measured side by side,
interleaved, so the ratios hold even where the machine is noisy. Between runs
on this machine the ratios still move by several hundredths: compare runs
before drawing conclusions.

**Machine.** %s

**Plane.** The lab: node-a runs kube-apiserver v1.35.4 with the in-tree Mixed
Version Proxy on (the UnknownVersionInteroperabilityProxy alpha gate), node-b
v1.36.3; skewgate on node-a steers node-a's IP:6443 into itself (sk_lookup,
connstat on, --steering-mode=always). The client runs in the root namespace with the admin's client
certificate, over HTTP/2 with reused connections, as client-go does; its
direct connections come from an address exempt from steering.

**Paths.** local: a list of default/configmaps, which node-a serves — direct
to node-a, through HAProxy (Debian's, TCP mode, in front of node-a), through
go-proxy (the floor of any Go L7 hop: the standard library's reverse proxy
over the same TLS and HTTP/2, verifying the client certificate and passing
the identity on as front-proxy headers, as skewgate does, and nothing else;
lab/bench BareProxy), and through skewgate (routed locally). peer: a list of
scheduling.k8s.io/v1alpha2 workloads, which only node-b serves — direct to
node-b, through node-a's in-tree proxy, and through skewgate (routed to
node-b), skewgate steering always (an armed cluster, or mode auto in a skew
window). standby: a list of default/configmaps on node-b, whose skewgate is
installed but not steering — what the default mode auto is outside a skew
window (this plane is always in one, so node-b's skewgate runs in mode off,
whose kernel path is the same: the lease withdrawn, sk_lookup passes the
connection to the apiserver) — direct (an exempt source) and from a source
that would be steered.

**Method.** %d sequential GETs per path, round-robin over the paths (p50, p90,
p99, and their ratio to the route's direct path); then %d clients per path for
%s in all, in %d interleaved rounds (saturation throughput, and the CPU time
the proxy process and node-a's apiserver spent per request, from
/proc/<pid>/stat). In-tree's proxy CPU is node-a's apiserver's.

## Latency and throughput

`, r.Started.UTC().Format(time.DateOnly), r.Took.Round(time.Second), machine(),
		c.Sequential, c.Concurrency, c.Saturation, c.Rounds)
	r.WriteTable(b)
	fmt.Fprintf(b, "\n![latency distributions](%s)\n\n", ChartFile)
	fmt.Fprintf(b, "## Watch-heavy\n\n%d watches of default/configmaps open, and %d GETs a second beside them for %s, on the local direct, go-proxy and skewgate paths (each its own watches and GETs, one path after the other).\n\n",
		c.Watch.Watches, c.Watch.RPS, c.Watch.Duration)
	r.WriteWatch(b)
	fmt.Fprintf(b, "\nskewgate's resident set: %.0f MiB idle, %.0f MiB after saturation.\n\n", mib(r.RSSIdle), mib(r.RSSLoaded))
	fmt.Fprintf(b, "## BPF programs\n\nThe kernel's own accounting (bpf stats, which the agent enables when it runs as root on the host, as here) over the whole run, from skewgate's `skewgate_bpf_program_run_seconds_total` and `_runs_total`.\n\n")
	r.WriteBPF(b)
	fmt.Fprintf(b, "\n## Goals\n\n")
	r.WriteGoals(b)
	b.WriteString(docTail)
}

// docTail is the hand-kept part of docs/benchmarks.md, written with every
// run so that the file stays one generated whole.
const docTail = `
## Reading the figures

- The hop's cost is CPU: each request is decrypted, parsed as HTTP/2,
  routed, and encrypted again towards the apiserver, and the answer comes
  back the same way. HAProxy in TCP mode does none of that, which is why it
  is nearly free and why it cannot route by resource. go-proxy does that
  much and nothing more: its CPU per request is what Go's net/http,
  crypto/tls and HTTP/2 cost for one hop, and skewgate's CPU above it is
  skewgate's own work (routing, metrics, failover, the identity checks).
  A goal below go-proxy's figure is one no Go L7 proxy meets on this
  machine.
- Where the hop is paid: skewgate steers, in its default mode auto, only
  inside a skew window (an upgrade's or rollback's minutes); the rest of
  the year it is the standby row: requests do not pass through it, and
  its CPU there is its own background work (membership, probes, metrics)
  spread over them. The local and peer rows are the price of those
  minutes.
- A request's latency through skewgate adds that CPU to the direct path's
  when the machine is idle; at saturation on 2 cores, skewgate's CPU per
  request is taken from the apiserver's and the load generator's, which is
  what the throughput ratio shows.
- Micro-benchmarks that need no lab: ` + "`make bench-micro`" + ` (routing,
  merged discovery, and the in-process hop with its allocations: alone,
  beside 900 watches on its connection, and a watch's events through it).
- Profiles of skewgate under this load: ` + "`make bench PROFILE=<dir>`" + ` writes
  CPU profiles of skewgate's first saturation round on each of its paths and
  of its watch-heavy run into <dir> (the lab runs skewgate with
  --profiling).
`

// machine describes the host: kernel, CPU model, cores, Go.
func machine() string {
	var u unix.Utsname
	kernel := "unknown"
	if unix.Uname(&u) == nil {
		kernel = unix.ByteSliceToString(u.Release[:])
	}
	return fmt.Sprintf("Linux %s, %s, %d cores, %s.", kernel, cpuModel(), runtime.NumCPU(), runtime.Version())
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
