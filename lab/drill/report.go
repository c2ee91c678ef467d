package drill

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/skewgate/skewgate/lab"
)

// Tally is what one phase (or a whole run) of one mode answered.
type Tally struct {
	Requests, OK, False404, Grace404, Unavailable, Errors int
	// Causes counts the 503s by cause (Cause*).
	Causes map[string]int
	// Pinned counts the pinned clients' requests, and those that failed:
	// anything but OK, except a 503 for a type no live server served at
	// that moment (nothing could have answered it).
	Pinned, PinnedFailed int
	// UnavailableFor spans the first to the last 503 of the phase.
	UnavailableFor time.Duration
	Routes         map[string]int
	P50, P99       time.Duration
	// Gaps are discovery answers that lacked a group/version a present
	// server serves.
	Gaps int
}

// tally counts events; latencies of requests other than watches.
func tally(events []event, gaps int) Tally {
	t := Tally{Routes: map[string]int{}, Causes: map[string]int{}, Gaps: gaps}
	var lat []time.Duration
	var first503, last503 time.Time
	for _, e := range events {
		t.Requests++
		if e.pinned != "" {
			t.Pinned++
			if failed(e) {
				t.PinnedFailed++
			}
		}
		switch e.outcome {
		case OK:
			t.OK++
		case False404:
			t.False404++
		case Grace404:
			t.Grace404++
		case Unavailable:
			t.Unavailable++
			t.Causes[e.cause]++
			if first503.IsZero() {
				first503 = e.at
			}
			last503 = e.at
		default:
			t.Errors++
		}
		r := e.route
		if r == "" {
			r = "-"
		}
		t.Routes[r]++
		if e.kind != "watch" && e.code != 0 {
			lat = append(lat, e.latency)
		}
	}
	if !first503.IsZero() {
		t.UnavailableFor = last503.Sub(first503)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		t.P50, t.P99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return t
}

// Phases returns the tally of each phase, in order.
func (r *Result) PhaseTallies() []Tally {
	out := make([]Tally, len(r.Phases))
	for i, p := range r.Phases {
		var evs []event
		for _, e := range r.events {
			if e.phase == p.Name {
				evs = append(evs, e)
			}
		}
		out[i] = tally(evs, r.gaps[p.Name])
	}
	return out
}

// Total is the tally of the whole run.
func (r *Result) Total() Tally {
	gaps := 0
	for _, g := range r.gaps {
		gaps += g
	}
	return tally(r.events, gaps)
}

// writeAnswer opens the report with what an operator asks first: in each
// mode, did clients get false 404s, did requests fail, did the garbage
// collector delete anything. The definitions and the detail follow.
func writeAnswer(w io.Writer, p Pair, results []*Result) {
	fmt.Fprintf(w, "## The answer\n\n| pair | mode | false 404s | 404s in the grace | discovery gaps | other errors | pinned clients failed | lost to the GC |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		t := r.Total()
		lost := "not counted"
		if l := r.Loss; l != nil && l.Err == "" {
			lost = fmt.Sprint(len(l.GCDeleted))
		}
		fmt.Fprintf(w, "| %s → %s | %s | **%d** | %d | %d | %d | %d of %d | %s |\n", p.From, p.To, r.Mode, t.False404, t.Grace404, t.Gaps, t.Errors, t.PinnedFailed, t.Pinned, lost)
	}
	fmt.Fprintf(w, "\nWhat each column counts, and how the drill ran, below.\n\n")
}

// WriteReport writes the drill's report as markdown.
func WriteReport(w io.Writer, results []*Result, o Options, command string, images []string) {
	o.defaults()
	if o.pair.From == "" {
		o.pair, _ = PairOf(o.From, o.To)
	}
	p := o.pair
	fmt.Fprintf(w, "# Upgrade drill: %s → %s → %s\n\n", p.From, p.To, p.From)
	writeAnswer(w, p, results)
	if o.Kubeadm {
		kept := slices.ContainsFunc(results, func(r *Result) bool { return r.KubeletKept })
		writeKubeadmIntro(w, o, command, kept)
	} else {
		writeSwapIntro(w, o, command)
	}
	fmt.Fprintf(w, "A **false 404** is a type-not-found 404 (`the server could not find the requested resource`, or the plain `404 page not found` of a group the server does not serve) "+
		"for a resource type a live, ready server served at that moment. A **404 in the grace** is one for a type that only a server that left within %s served: "+
		"after a rollback takes the type away, it is gone for good once the grace ends, so whether such a 404 is false is a matter of definition; skewgate answers 503 then. "+
		"A **discovery gap** is a discovery answer (a client's refresh, or the namespace deletion's) that lacks a group/version a live server, or one within the grace, serves: "+
		"the client then acts as on a false 404. **503s by cause**: the local server away, a capable server away or not yet known, the rollback grace, "+
		"a peer's in-flight limit or breaker, a server unreachable, other (the in-tree proxy's and the apiservers' own). **Other errors** are failed requests: transport errors, resets, 5xx but 503. "+
		"A **pinned client's failed request** is anything but a success or a genuine 4xx, except a 503 for a type no live server served at that moment (every server of it away or rolled back: nothing could have answered it). "+
		"Modes: `%s` steers always (`--steering-mode=always`), `%s` is the default, not armed, `%s` is auto armed before the upgrade through the cluster's switch (the ConfigMap `kube-system/skewgate`, `steering: always`). "+
		"`%s` is kube-apiserver's Mixed Version Proxy switched on as users switch it on: %s; skewgate is not running then.\n\n",
		grace, ModeSkewgate, ModeSkewgateAuto, ModeSkewgateArmed, ModeInTree, inTreeSetting(p, o.Kubeadm))
	writeOtherPairs(w, p)
	fmt.Fprintf(w, "## Totals\n\n| mode | duration | requests | false 404s | 404s in the grace | discovery gaps | 503s (by cause) | 503s lasted | other errors | pinned clients failed | p50 | p99 |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		t := r.Total()
		fmt.Fprintf(w, "| %s | %s | %d | **%d** | %d | %d | %s | %s | %d | %d of %d | %s | %s |\n", r.Mode, r.End.Sub(r.Start).Round(time.Second),
			t.Requests, t.False404, t.Grace404, t.Gaps, causes(t), t.UnavailableFor.Round(100*time.Millisecond), t.Errors, t.PinnedFailed, t.Pinned, ms(t.P50), ms(t.P99))
	}
	writeLosses(w, o, results)
	writeHandOffs(w, results)
	writeComparison(w, results)
	for _, img := range images {
		fmt.Fprintf(w, "\n![%s](%s)\n", img, img)
	}
	for _, r := range results {
		fmt.Fprintf(w, "\n## %s, per phase\n\n| phase | took | requests | false 404s | 404s in the grace | discovery gaps | 503s by cause (lasted) | other errors | pinned failed | routes | p50 | p99 |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n", r.Mode)
		for i, t := range r.PhaseTallies() {
			p := r.Phases[i]
			fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %d | %s (%s) | %d | %d of %d | %s | %s | %s |\n", p.Name, p.End.Sub(p.Start).Round(100*time.Millisecond),
				t.Requests, t.False404, t.Grace404, t.Gaps, causes(t), t.UnavailableFor.Round(100*time.Millisecond), t.Errors, t.PinnedFailed, t.Pinned, routes(t.Routes), ms(t.P50), ms(t.P99))
		}
		writeSamples(w, r)
		writeFailures(w, r)
		if r.Monitor != nil {
			writeMonitoring(w, r.Monitor)
		}
	}
}

// writeOtherPairs links the other pairs' reports, where the drill writes
// them by default (beside this one).
func writeOtherPairs(w io.Writer, p Pair) {
	var links []string
	for _, o := range Pairs {
		if o.String() != p.String() {
			report, _ := o.Docs()
			links = append(links, fmt.Sprintf("[%s](%s)", o, filepath.Base(report)))
		}
	}
	if len(links) > 0 {
		fmt.Fprintf(w, "The drill of the other upgrades: %s.\n\n", strings.Join(links, ", "))
	}
}

// writeSwapIntro says what the drill on the binary-swap lab did.
func writeSwapIntro(w io.Writer, o Options, command string) {
	writtenBy(w, o, command)
	p := o.pair
	fmt.Fprintf(w, "Three nodes start at %s and are upgraded one at a time to %s, each after the previous is ready, then rolled back one at a time. "+
		"node-b's apiserver is held down %s in its upgrade (a slow image pull). A load balancer spreads the workload's connections over the nodes whose `/readyz` passes: "+
		"informers (list + watch) on configmaps, %s "+
		"(%s), creates/updates/deletes, lists and gets, "+
		"discovery refreshes as kubectl does them, and a namespace deleted as the namespace controller does (discovery, then deletecollection of every namespaced resource). "+
		"Beside them, one **pinned client per node** talks to that node's own address on one kept connection, as kube-controller-manager, kube-scheduler and "+
		"kubeadm's local-mode kubelets do: lists, creates and deletes of configmaps and lists of %s, ten a second, through the node's own restart.\n\n",
		p.From, p.To, o.Hold, p.newTypes(), p.onlyTo(), p.Owned.GVR.Resource)
}

// newTypes names the pair's new types, as the reports do.
func (p Pair) newTypes() string {
	if p.Cluster.Empty() {
		return fmt.Sprintf("`%s` %s", p.Owned.GVR.GroupVersion(), p.Owned.GVR.Resource)
	}
	return fmt.Sprintf("`%s` %s and `%s` %s", p.Owned.GVR.GroupVersion(), p.Owned.GVR.Resource, p.Cluster.GroupVersion(), p.Cluster.Resource)
}

// onlyTo says where the new types are served, and how.
func (p Pair) onlyTo() string {
	both := "both only"
	if p.Cluster.Empty() {
		both = "only"
	}
	return fmt.Sprintf("%s on %s, with %s; diffing the two versions' discovery finds nothing only on %s", both, p.To, p.Config, p.From)
}

// inTreeSetting says how the in-tree proxy mode switches the proxy on,
// for the pair's versions (lab.APIServerArgs, the kubeadm configuration).
func inTreeSetting(p Pair, kubeadm bool) string {
	where := "the apiserver's flags (beside `--peer-advertise-ip` and `--peer-advertise-port`, the node's own address)"
	if kubeadm {
		where = "`apiServer.extraArgs` of kubeadm's ClusterConfiguration, as kubeadm does not set it"
	}
	gate := "the `UnknownVersionInteroperabilityProxy` gate at its default (beta, on, from 1.36)"
	if (lab.Node{Version: p.From}).Minor() < 36 {
		gate = "the `UnknownVersionInteroperabilityProxy` gate set to true (alpha, off by default, on 1.35; beta and on by default from 1.36)"
	}
	return fmt.Sprintf("%s and `--peer-ca-file` the cluster's CA through %s", gate, where)
}

// writtenBy opens a report's introduction: what wrote it, of which
// build, when, where.
func writtenBy(w io.Writer, o Options, command string) {
	build := ""
	if o.Build != "" {
		build = " with " + o.Build
	}
	if len(o.SkewgateArgs) > 0 {
		build += ", skewgate run with `" + strings.Join(o.SkewgateArgs, " ") + "`"
	}
	if o.GoawayChance > 0 {
		build += fmt.Sprintf(", every apiserver with `--goaway-chance=%g`", o.GoawayChance)
	}
	fmt.Fprintf(w, "Written by `%s`%s on %s (%s/%s, %d CPUs); regenerate it by running that again. ",
		command, build, time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
}

// causes renders a tally's 503s by cause.
func causes(t Tally) string {
	if t.Unavailable == 0 {
		return "0"
	}
	return fmt.Sprintf("%d: %s", t.Unavailable, routes(t.Causes))
}

// upgradePhase reports whether a phase moves a node (an upgrade or a
// rollback), as opposed to a steady one.
func upgradePhase(name string) bool {
	return strings.HasPrefix(name, "upgrade ") || strings.HasPrefix(name, "rollback ")
}

// writeComparison says, column by column over the phases that move a
// node, where each skewgate mode is worse than another mode, plainly.
func writeComparison(w io.Writer, results []*Result) {
	type column struct {
		name string
		of   func(Tally) int
	}
	cols := []column{
		{"false 404s", func(t Tally) int { return t.False404 }},
		{"404s in the grace", func(t Tally) int { return t.Grace404 }},
		{"discovery gaps", func(t Tally) int { return t.Gaps }},
		{"503s", func(t Tally) int { return t.Unavailable }},
		{"other errors", func(t Tally) int { return t.Errors }},
		{"pinned clients' failed requests", func(t Tally) int { return t.PinnedFailed }},
	}
	sums := map[string]map[string]int{}
	for _, r := range results {
		sums[r.Mode] = map[string]int{}
		for i, t := range r.PhaseTallies() {
			if upgradePhase(r.Phases[i].Name) {
				for _, c := range cols {
					sums[r.Mode][c.name] += c.of(t)
				}
			}
		}
	}
	fmt.Fprintf(w, "\nIn the phases that move a node (upgrades and rollbacks):\n\n")
	for _, r := range results {
		if _, ok := skewgateModes[r.Mode]; !ok {
			continue
		}
		var worse []string
		for _, o := range results {
			if o.Mode == r.Mode {
				continue
			}
			for _, c := range cols {
				if a, b := sums[r.Mode][c.name], sums[o.Mode][c.name]; a > b {
					worse = append(worse, fmt.Sprintf("%s: %d against %d with %s", c.name, a, b, o.Mode))
				}
			}
		}
		if len(worse) == 0 {
			fmt.Fprintf(w, "- **%s** is at least as good as every other mode in every column.\n", r.Mode)
			continue
		}
		fmt.Fprintf(w, "- **%s** is worse in: %s.\n", r.Mode, strings.Join(worse, "; "))
	}
	fmt.Fprintf(w, "\nWhy, where skewgate is worse: %s\n", whyWorse)
}

// whyWorse explains the columns where a skewgate mode can count more than
// another mode, by design or by the mode's nature.
const whyWorse = "a **503** is skewgate's answer (with `Retry-After`) where a server that serves the type is away or not yet known, " +
	"or within the grace after a rollback took the type away (rule 5): the other modes answered a false 404 or a 404 in the grace there, " +
	"or — the in-tree proxy — passed the request to a server that then answered it. " +
	"In `skewgate auto`, **pinned clients' failures and other errors** include the connections made before the skew window opened: " +
	"they go to the apiserver directly, as without skewgate, until skewgate ends them once their client is quiet " +
	"(`--steering-reset-direct`, the default: no request in flight is cut, so a busy client is never ended), " +
	"the apiserver's GOAWAY moves them (`--goaway-chance`) or they reconnect; " +
	"arming the cluster before the upgrade (`skewgate`, mode always) steers them from the start."

func writeMonitoring(w io.Writer, m *Monitoring) {
	fmt.Fprintf(w, "\n### Prometheus during the window\n\nA real Prometheus scraped every node's skewgate every 2 s with this generated configuration and the shipped alert rules:\n\n```yaml\n%s```\n", m.Config)
	fmt.Fprintf(w, "\n| alert (provoked) | fired | first firing | resolved |\n|---|---|---|---|\n")
	for _, a := range m.Alerts {
		fmt.Fprintf(w, "| %s | %t | %s | %t |\n", a.Name, a.Fired, clock(a.FiredAt), a.Resolved)
	}
	if len(m.Panels) > 0 {
		fmt.Fprintf(w, "\nEvery dashboard query, evaluated over the window:\n\n| panel | query | series |\n|---|---|---|\n")
		for _, p := range m.Panels {
			n := fmt.Sprint(p.Series)
			if p.Err != "" {
				n = "error: " + p.Err
			}
			fmt.Fprintf(w, "| %s | `%s` | %s |\n", p.Panel, strings.ReplaceAll(p.Expr, "|", `\|`), n)
		}
	}
}

func routes(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("15:04:05")
}

// WriteAll writes the report at path and its images under o.OutDir, named
// relative to the report.
func WriteAll(path string, o Options, results []*Result, command string) error {
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return err
	}
	timeline := filepath.Join(o.OutDir, "timeline.png")
	if err := WriteTimeline(timeline, results); err != nil {
		return err
	}
	images := []string{timeline}
	// One dashboard picture: the default mode's where it ran, since that
	// is what operators see.
	var shown *Result
	for _, r := range results {
		if r.Monitor != nil && len(r.Monitor.Panels) > 0 && (shown == nil || r.Mode == ModeSkewgateAuto) {
			shown = r
		}
	}
	if shown != nil {
		panels := filepath.Join(o.OutDir, "dashboard.png")
		if err := WritePanels(panels, shown); err != nil {
			return err
		}
		images = append(images, panels)
	}
	for i, img := range images {
		if rel, err := filepath.Rel(filepath.Dir(path), img); err == nil {
			images[i] = rel
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	WriteReport(f, results, o, command, images)
	return f.Close()
}

// writeSamples lists the first false 404s and 404s in the grace of a
// run, so a reader can see which requests got them.
func writeSamples(w io.Writer, r *Result) {
	n := map[string]int{}
	for _, e := range r.events {
		if e.outcome != False404 && e.outcome != Grace404 || n[e.outcome] == 5 {
			continue
		}
		if n[False404]+n[Grace404] == 0 {
			fmt.Fprintf(w, "\nThe first false 404s and 404s in the grace:\n\n| at | phase | answer | client | request | resource | route |\n|---|---|---|---|---|---|---|\n")
		}
		n[e.outcome]++
		route := e.route
		if route == "" {
			route = "-"
		} else {
			route += " (" + e.server + ")"
		}
		who := "load-balanced"
		if e.pinned != "" {
			who = "pinned to " + e.pinned
		}
		fmt.Fprintf(w, "| +%.1fs | %s | %s | %s | %s | %s | %s |\n", e.at.Sub(r.Start).Seconds(), e.phase, e.outcome, who, e.kind, gvrString(e.gvr), route)
	}
}

// writeFailures lists the first failed requests of each client kind
// (other errors: transport errors, 5xx but 503), with why.
func writeFailures(w io.Writer, r *Result) {
	seen := map[string]int{}
	header := false
	for _, e := range r.events {
		if e.outcome != Error {
			continue
		}
		who := "load-balanced"
		if e.pinned != "" {
			who = "pinned to " + e.pinned
		}
		if seen[who]++; seen[who] > 3 {
			continue
		}
		if !header {
			fmt.Fprintf(w, "\nThe first failed requests (other errors), by client:\n\n| at | phase | client | request | resource | why |\n|---|---|---|---|---|---|\n")
			header = true
		}
		fmt.Fprintf(w, "| +%.1fs | %s | %s | %s | %s | %s |\n", e.at.Sub(r.Start).Seconds(), e.phase, who, e.kind, gvrString(e.gvr),
			strings.NewReplacer("|", `\|`, "\n", " ").Replace(e.detail))
	}
}

func gvrString(g schema.GroupVersionResource) string {
	s := g.Version + "/" + g.Resource
	if g.Group != "" {
		s = g.Group + "/" + s
	}
	return s
}
