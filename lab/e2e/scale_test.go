package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/bench"
)

// scaleConfig is a scale run's size, from the environment (make scale).
type scaleConfig struct {
	watches     int           // SCALE_WATCHES: client-go watches per side
	rate        int           // SCALE_RATE: requests a second per side
	clients     int           // SCALE_CLIENTS: clients (connections) per side for the watches
	phase       time.Duration // SCALE_PHASE: steady time before, between and after the restarts
	sides       []string      // SCALE_SIDES: skewgate,direct
	memoryLimit int64         // SCALE_MEMORY_LIMIT: skewgate's container limit (default: the DaemonSet's)
	docs        string        // SCALE_DOCS: docs directory to write the report into
}

func scaleConfigFromEnv(b *testing.B) scaleConfig {
	c := scaleConfig{watches: envInt("SCALE_WATCHES", 10000), rate: envInt("SCALE_RATE", 200), phase: 40 * time.Second,
		sides: strings.Split(envOr("SCALE_SIDES", "skewgate,direct"), ","), docs: os.Getenv("SCALE_DOCS")}
	c.clients = envInt("SCALE_CLIENTS", max(c.watches/50, 1))
	if d, err := time.ParseDuration(os.Getenv("SCALE_PHASE")); err == nil {
		c.phase = d
	}
	c.memoryLimit = shippedMemoryLimit(b)
	if v := os.Getenv("SCALE_MEMORY_LIMIT"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatalf("SCALE_MEMORY_LIMIT=%q: want bytes", v)
		}
		c.memoryLimit = n
	}
	return c
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envInt(k string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(k)); err == nil && n > 0 {
		return n
	}
	return def
}

// shippedMemoryLimit is the memory limit of the DaemonSet's container.
func shippedMemoryLimit(b testing.TB) int64 {
	data, err := os.ReadFile("../../deploy/kubernetes/base/daemonset.yaml")
	if err != nil {
		b.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(data, &ds); err != nil {
		b.Fatal(err)
	}
	return ds.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().Value()
}

// scaleEvent is one restart of node-a's apiserver in the run.
type scaleEvent struct {
	kind string // graceful, crash
	// at is when the stop began, stopped when it returned (for a crash:
	// the process is dead), ready when node-a was ready again.
	at, stopped, ready time.Time
	readyAfter         time.Duration
}

// BenchmarkScale is `make scale` (issue 23): SCALE_WATCHES real client-go
// watches (default 10,000) and SCALE_RATE requests a second (default 200)
// reach node-a through its skewgate — run as the DaemonSet runs it, with
// SKEWGATE_MEMORY_LIMIT the DaemonSet's memory limit — and, side by side,
// the same load directly, while node-a's own apiserver restarts gracefully
// twice and crashes once. It reports failed requests, watches lost, p99,
// skewgate's RSS peak against the limit and its CPU per request, and with
// SCALE_DOCS set writes them into benchmarks.md there. Run it alone:
// -run '^$' -bench Scale -benchtime 1x.
func BenchmarkScale(b *testing.B) {
	cfg := scaleConfigFromEnv(b)
	klog.LogToStderr(false) // 10,000 reflectors' warnings, direct to node-a while it is away
	klog.SetOutput(io.Discard)
	sg := skewgateWithLimit(b, cfg.memoryLimit)
	load0 := loadAvg()
	oracle := scaleClient(b, node(b, "node-b").URL(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var sides []*scalePath
	objects := max(cfg.watches/10, 1) // ten watches per object: each update is ten events
	loadClients := max(cfg.rate/25, 2)
	for _, s := range cfg.sides {
		switch s {
		case "skewgate":
			sides = append(sides, newScalePath(b, "skewgate", via(b), "scale-sg", objects, loadClients))
		case "direct":
			sides = append(sides, newScalePath(b, "direct", node(b, "node-a").URL(), "scale-direct", objects, loadClients))
		}
	}
	for _, p := range sides {
		if err := p.createObjects(ctx, oracle); err != nil {
			b.Fatal(err)
		}
	}
	idle := vitalsOf(b, sg.PID)
	cpuIdle := procCPU(b, sg.PID)
	rampStart := time.Now()
	rampErr := startWatches(ctx, b, sides, cfg)
	ramp := time.Since(rampStart)
	afterRamp := vitalsOf(b, sg.PID)
	cpuRamp := procCPU(b, sg.PID) - cpuIdle
	fmt.Printf("scale: %d watches per side established in %s (%v); skewgate RSS %.0f MiB\n", cfg.watches, ramp.Round(time.Second), rampErr, afterRamp.rss/(1<<20))

	b.ResetTimer()
	vctx, vstop := context.WithCancel(ctx)
	peakc := sampleScaleVitals(vctx, b, sg.PID)
	cpu0 := procCPU(b, sg.PID)
	lctx, lstop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, p := range sides {
		wg.Add(1)
		go func() { defer wg.Done(); p.run(lctx, cfg.rate, oracle, &wg) }()
	}
	loadStart := time.Now()
	events := restartNodeA(b, cfg.phase)
	lstop()
	wg.Wait()
	loadTime := time.Since(loadStart)
	cpu := procCPU(b, sg.PID) - cpu0
	b.StopTimer()
	time.Sleep(15 * time.Second) // the last updates reach every watch
	vstop()
	peak := <-peakc
	hwm := procStatusKiB(b, sg.PID, "VmHWM") << 10

	answers := skewgateAnswers(b)
	keepLog(sg)
	r := scaleReport{answers: answers, cfg: cfg, events: events, ramp: ramp, rampErr: rampErr, loadTime: loadTime, idle: idle, afterRamp: afterRamp,
		peak: peak, hwm: float64(hwm), cpu: cpu, cpuRamp: cpuRamp, load0: load0, load1: loadAvg()}
	for _, p := range sides {
		r.sides = append(r.sides, summarize(ctx, b, p, oracle, events))
	}
	out := r.markdown()
	fmt.Println(out)
	if cfg.docs != "" {
		if err := bench.WriteScaleSection(cfg.docs, out); err != nil {
			b.Error(err)
		}
	}
	b.ReportMetric(peak.rss/(1<<20), "peak-RSS-MiB")
	for _, s := range r.sides {
		b.ReportMetric(float64(s.failedOutside), s.name+"-failed")
		b.ReportMetric(float64(s.lost), s.name+"-watches-lost")
	}
}

// skewgateWithLimit restarts node-a's skewgate as the DaemonSet runs it:
// SKEWGATE_MEMORY_LIMIT set to the container's memory limit.
func skewgateWithLimit(b *testing.B, limit int64) lab.Proc {
	if err := skewgateA.Stop(10 * time.Second); err != nil {
		b.Fatal(err)
	}
	p, err := plane.StartSkewgate(context.Background(), "node-a", skewgateBin,
		lab.SkewgateMode{Kubeconfig: true, Env: []string{fmt.Sprintf("SKEWGATE_MEMORY_LIMIT=%d", limit)}}, 60*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	skewgateA = p
	return p
}

// startWatches starts every side's watches, interleaved and at most 400 a
// second in all, each side's spread over its clients, and waits until
// every reflector has listed.
func startWatches(ctx context.Context, b *testing.B, sides []*scalePath, cfg scaleConfig) error {
	clients := make([][]*kubernetes.Clientset, len(sides))
	for i, p := range sides {
		for range cfg.clients {
			clients[i] = append(clients[i], scaleClient(b, p.url, nil))
		}
	}
	tick := time.NewTicker(time.Second / 400)
	defer tick.Stop()
	for j := range cfg.watches {
		for i, p := range sides {
			<-tick.C
			w := &scaleWatch{obj: j % p.objects, last: -1}
			p.watches = append(p.watches, w)
			go w.run(ctx, clients[i][j%cfg.clients], p.objName(w.obj))
		}
	}
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		synced := 0
		for _, p := range sides {
			for _, w := range p.watches {
				if w.synced.Load() {
					synced++
				}
			}
		}
		if synced == len(sides)*cfg.watches {
			return nil
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("not every watch listed within 5 minutes")
}

// restartNodeA runs the restarts: phase, a graceful restart, phase, another,
// phase, a crash (SIGKILL), phase.
func restartNodeA(b *testing.B, phase time.Duration) []scaleEvent {
	var events []scaleEvent
	for _, kind := range []string{"graceful", "graceful", "crash"} {
		time.Sleep(phase)
		e := scaleEvent{kind: kind, at: time.Now()}
		stop := plane.StopNode
		if kind == "crash" {
			stop = plane.KillNode
		}
		if err := stop("node-a"); err != nil {
			b.Fatal(err)
		}
		e.stopped = time.Now()
		if err := plane.StartNode(context.Background(), "node-a", 120*time.Second); err != nil {
			b.Fatal(err)
		}
		e.ready = time.Now()
		e.readyAfter = e.ready.Sub(e.at)
		events = append(events, e)
		fmt.Printf("scale: %s restart of node-a, ready again after %s\n", kind, e.readyAfter.Round(100*time.Millisecond))
	}
	time.Sleep(phase)
	return events
}

// scaleVitals are skewgate's figures at one moment, or their peaks.
type scaleVitals struct {
	rss, goroutines, conns float64
	shedding               bool
}

var scaleMetricRE = regexp.MustCompile(`(?m)^(go_goroutines|skewgate_client_connections|skewgate_shedding) (\S+)$`)

func vitalsOf(b testing.TB, pid int) scaleVitals {
	v := scaleVitals{rss: float64(procStatusKiB(b, pid, "VmRSS") << 10)}
	resp, err := http.Get(lab.SkewgateAdminURL(node(b, "node-a")) + "/metrics")
	if err != nil {
		return v
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, m := range scaleMetricRE.FindAllStringSubmatch(string(body), -1) {
		f, _ := strconv.ParseFloat(m[2], 64)
		switch m[1] {
		case "go_goroutines":
			v.goroutines = f
		case "skewgate_client_connections":
			v.conns = f
		case "skewgate_shedding":
			v.shedding = f > 0
		}
	}
	return v
}

// sampleScaleVitals samples every second until ctx ends, then sends the
// peaks.
func sampleScaleVitals(ctx context.Context, b testing.TB, pid int) <-chan scaleVitals {
	c := make(chan scaleVitals, 1)
	go func() {
		var peak scaleVitals
		for sleep(ctx, time.Second) {
			v := vitalsOf(b, pid)
			peak.rss, peak.goroutines, peak.conns = max(peak.rss, v.rss), max(peak.goroutines, v.goroutines), max(peak.conns, v.conns)
			peak.shedding = peak.shedding || v.shedding
		}
		c <- peak
	}()
	return c
}

// procCPU is pid's user and system CPU time (/proc/<pid>/stat fields 14
// and 15, in clock ticks of 10 ms).
func procCPU(b testing.TB, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// procStatusKiB reads a "kB" line of /proc/<pid>/status.
func procStatusKiB(b testing.TB, pid int, key string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	b.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}

func loadAvg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// scaleSide is one side's outcome.
type scaleSide struct {
	name                                         string
	sent, failed, failedCrash, failedOutside     int
	retried                                      int64
	lost, relisted, gapped, stale, reestablished int
	p50, p99, steadyP99                          time.Duration
	firstFailures                                []string
}

// summarize counts a side's outcome: a failure in flight at the crash
// (sent before the killed process was dead, answered after the SIGKILL)
// is counted apart; a watch
// is lost when its reflector listed again, missed a version, or does not
// hold the object's last version once the load has ended.
func summarize(ctx context.Context, b testing.TB, p *scalePath, oracle *kubernetes.Clientset, events []scaleEvent) scaleSide {
	s := scaleSide{name: p.name, retried: p.retried.Load()}
	var all, steady []time.Duration
	for _, r := range p.requests() {
		s.sent++
		if r.err != nil {
			s.failed++
			// Sent before the process was dead, answered after the kill
			// began: a request the crash may have taken.
			if slices.ContainsFunc(events, func(e scaleEvent) bool { return e.kind == "crash" && r.start.Before(e.stopped) && r.end.After(e.at) }) {
				s.failedCrash++
			} else if len(s.firstFailures) < 5 {
				s.firstFailures = append(s.firstFailures, fmt.Sprintf("%s at %s: %v", r.kind, r.start.Format("15:04:05.000"), r.err))
			}
			continue
		}
		d := r.end.Sub(r.start)
		all = append(all, d)
		if !slices.ContainsFunc(events, func(e scaleEvent) bool { return r.end.After(e.at) && r.start.Before(e.ready.Add(5*time.Second)) }) {
			steady = append(steady, d)
		}
	}
	s.failedOutside = s.failed - s.failedCrash
	s.p50, s.p99, s.steadyP99 = quantile(all, 0.5), quantile(all, 0.99), quantile(steady, 0.99)
	final, err := p.finalValues(ctx, oracle)
	if err != nil {
		b.Error(err)
	}
	for _, w := range p.watches {
		last, relists, gaps := w.state()
		stale := last < final[p.objName(w.obj)]
		s.reestablished += int(max(w.watchCalls.Load()-1, 0))
		if relists > 0 {
			s.relisted++
		}
		if gaps > 0 {
			s.gapped++
		}
		if stale {
			s.stale++
		}
		if relists > 0 || gaps > 0 || stale {
			s.lost++
		}
	}
	return s
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(int(math.Ceil(q*float64(len(d))))-1, len(d)-1)]
}

// skewgateAnswers sums node-a's skewgate_requests_total by route, verb
// and code: which answers the load got from skewgate, and from whom.
func skewgateAnswers(b testing.TB) string {
	resp, err := http.Get(lab.SkewgateAdminURL(node(b, "node-a")) + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	sums := map[string]float64{}
	label := func(line, k string) string {
		_, v, _ := strings.Cut(line, k+`="`)
		v, _, _ = strings.Cut(v, `"`)
		return v
	}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "skewgate_requests_total{") {
			continue
		}
		f, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		sums[label(line, "route")+" "+label(line, "verb")+" "+label(line, "code")] += f
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(sums)) {
		parts = append(parts, fmt.Sprintf("%s: %.0f", k, sums[k]))
	}
	return strings.Join(parts, "; ")
}

// keepLog copies skewgate's log out of the lab directory, which tear-down
// removes, and says where.
func keepLog(p lab.Proc) {
	data, err := os.ReadFile(p.Log)
	if err != nil {
		return
	}
	path := fmt.Sprintf("%s/skewgate-scale-%d.log", os.TempDir(), time.Now().Unix())
	if os.WriteFile(path, data, 0o644) == nil {
		fmt.Println("scale: skewgate's log kept in", path)
	}
}

// scaleReport is the run's figures.
type scaleReport struct {
	answers               string
	cfg                   scaleConfig
	sides                 []scaleSide
	events                []scaleEvent
	ramp, loadTime        time.Duration
	rampErr               error
	idle, afterRamp, peak scaleVitals
	hwm                   float64
	cpu, cpuRamp          time.Duration
	load0, load1          string
}

func commit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=12").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func (r scaleReport) markdown() string {
	var w strings.Builder
	mib := func(v float64) string { return fmt.Sprintf("%.0f", v/(1<<20)) }
	fmt.Fprintf(&w, "%s\n\n", bench.ScaleHeading)
	fmt.Fprintf(&w, "Written by `make scale SCALE_WATCHES=%d SCALE_RATE=%d` (lab/e2e BenchmarkScale) on %s at commit %s. "+
		"**Machine.** %s Load average %s at the start, %s at the end: other engineers' labs share these 2 cores.\n\n",
		r.cfg.watches, r.cfg.rate, time.Now().Format("2006-01-02"), commit(), bench.Machine(), r.load0, r.load1)
	fmt.Fprintf(&w, "**Load.** Each side: %d client-go reflectors (real watches: list, then watch from the resource version, re-watch on a clean end) "+
		"over %d clients with their own connections, each watching one of %d ConfigMaps by name; and %d requests a second from %d more clients "+
		"(5 in 10 a GET, 2 a list of 50, 2 an update numbering the object's next version, 1 a create then a delete). "+
		"`skewgate`: every client reaches node-a (v1.35.4) through node-a's skewgate, run as the DaemonSet runs it "+
		"(SKEWGATE_MEMORY_LIMIT=%d, the shipped limit: soft limit 3/4 of it); `direct`: the same load to node-a's apiserver. "+
		"Both at once, so both see the same restarts: node-a's apiserver restarts gracefully (SIGTERM), again, then crashes (SIGKILL), "+
		"%s apart; node-b (v1.36.3) stays up and serves ConfigMaps too.\n\n",
		r.cfg.watches, r.cfg.clients, max(r.cfg.watches/10, 1), r.cfg.rate, max(r.cfg.rate/25, 2), r.cfg.memoryLimit, r.cfg.phase)
	fmt.Fprintf(&w, "| | ")
	for _, s := range r.sides {
		fmt.Fprintf(&w, "%s | ", s.name)
	}
	fmt.Fprintf(&w, "\n|---|")
	for range r.sides {
		fmt.Fprintf(&w, "--:|")
	}
	row := func(name string, f func(s scaleSide) string) {
		fmt.Fprintf(&w, "\n| %s | ", name)
		for _, s := range r.sides {
			fmt.Fprintf(&w, "%s | ", f(s))
		}
	}
	row("requests sent", func(s scaleSide) string { return strconv.Itoa(s.sent) })
	row("failed, outside the crash", func(s scaleSide) string { return strconv.Itoa(s.failedOutside) })
	row("failed, in flight at the crash", func(s scaleSide) string { return strconv.Itoa(s.failedCrash) })
	row("429/503 answers client-go retried", func(s scaleSide) string { return strconv.FormatInt(s.retried, 10) })
	row("watches lost (relisted, missed a version, or stale at the end)", func(s scaleSide) string { return strconv.Itoa(s.lost) })
	row("… relisted / missed a version / stale", func(s scaleSide) string { return fmt.Sprintf("%d / %d / %d", s.relisted, s.gapped, s.stale) })
	row("watches re-established (not lost)", func(s scaleSide) string { return strconv.Itoa(s.reestablished) })
	row("p50 ms", func(s scaleSide) string { return fmt.Sprintf("%.1f", ms(s.p50)) })
	row("p99 ms", func(s scaleSide) string { return fmt.Sprintf("%.1f", ms(s.p99)) })
	row("p99 ms outside the restarts", func(s scaleSide) string { return fmt.Sprintf("%.1f", ms(s.steadyP99)) })
	fmt.Fprintf(&w, "\n\n")
	var sgSent int
	for _, s := range r.sides {
		if s.name == "skewgate" {
			sgSent = s.sent
		}
	}
	perReq := "—"
	if sgSent > 0 {
		perReq = fmt.Sprintf("%.0f", float64(r.cpu.Microseconds())/float64(sgSent))
	}
	fmt.Fprintf(&w, "**skewgate.** RSS %s MiB idle, %s MiB with the watches open, peak %s MiB (VmHWM %s MiB) against the limit of %s MiB; "+
		"goroutines peak %.0f, client connections peak %.0f; shedding seen: %t. CPU: %.1f s to establish the watches, "+
		"%.1f s over the %s of load (%s requests and everything the watches carried): %s µs per request.\n\n",
		mib(r.idle.rss), mib(r.afterRamp.rss), mib(r.peak.rss), mib(r.hwm), mib(float64(r.cfg.memoryLimit)),
		r.peak.goroutines, r.peak.conns, r.peak.shedding, r.cpuRamp.Seconds(), r.cpu.Seconds(), r.loadTime.Round(time.Second), strconv.Itoa(sgSent), perReq)
	fmt.Fprintf(&w, "**skewgate's answers** (route, verb, code): %s.\n\n", r.answers)
	fmt.Fprintf(&w, "**Timeline.** Watches established in %s", r.ramp.Round(time.Second))
	if r.rampErr != nil {
		fmt.Fprintf(&w, " (%v)", r.rampErr)
	}
	for _, e := range r.events {
		fmt.Fprintf(&w, "; %s restart, node-a ready again after %s", e.kind, e.readyAfter.Round(100*time.Millisecond))
	}
	fmt.Fprintf(&w, ".\n")
	for _, s := range r.sides {
		if len(s.firstFailures) > 0 {
			fmt.Fprintf(&w, "\nFirst failures, %s: %s.\n", s.name, strings.Join(s.firstFailures, "; "))
		}
	}
	return w.String()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
