package docs

import (
	_ "embed"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// MetricsTable is metrics.md: every metric skewgate registers, in one
// table. Each package that registers metrics holds its rows to its code
// (TestMetricsDocumented in agent, proxy and cmd/skewgate).
//
//go:embed metrics.md
var MetricsTable string

// Metric is one row of metrics.md.
type Metric struct {
	Name    string
	Type    string   // counter, gauge or histogram
	Labels  []string // in the order the code declares them
	Meaning string
	// Package is the package that registers it, relative to the
	// module's root: agent, proxy, proxy/membership, cmd/skewgate.
	Package string
}

var metricRow = regexp.MustCompile("(?m)^\\| `(skewgate_[a-z0-9_]+)` \\| (counter|gauge|histogram) \\| ([^|]*) \\| (.+) \\| `([a-z/]+)` \\|$")

// Metrics parses metrics.md's rows. An error names a row that starts like
// a metric's but does not parse.
func Metrics() ([]Metric, error) {
	var out []Metric
	for _, line := range strings.Split(MetricsTable, "\n") {
		if !strings.HasPrefix(line, "| `skewgate_") {
			continue
		}
		m := metricRow.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("metrics.md: row does not parse (| `name` | type | `label`, … or – | meaning | `package` |): %s", line)
		}
		var labels []string
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" && l != "–" {
				labels = append(labels, l)
			}
		}
		out = append(out, Metric{Name: m[1], Type: m[2], Labels: labels, Meaning: m[4], Package: m[5]})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("metrics.md: no metric rows")
	}
	return out, nil
}

// Row is how metrics.md writes m: a test that finds a metric undocumented
// says which row to add.
func (m Metric) Row() string {
	labels := "–"
	if len(m.Labels) > 0 {
		labels = "`" + strings.Join(m.Labels, "`, `") + "`"
	}
	typ := m.Type
	if typ == "" {
		typ = "counter|gauge|histogram"
	}
	return fmt.Sprintf("| `%s` | %s | %s | %s | `%s` |", m.Name, typ, labels, m.Meaning, m.Package)
}

var descString = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", help: ("(?:[^"\\]|\\.)*"), unit: "[^"]*", constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)

// Described lists the skewgate_ metrics cs describe (not Go's or the
// process's), registered by pkg, each once,
// with its type as gathered: a collector's Describe does not say it, so a
// family with no series yet has no type ("").
func Described(pkg string, cs []prometheus.Collector, gathered []*dto.MetricFamily) ([]Metric, error) {
	types := map[string]string{}
	for _, f := range gathered {
		types[f.GetName()] = strings.ToLower(f.GetType().String())
	}
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	var out []Metric
	var err error
	seen := map[string]bool{}
	for d := range ch {
		m := descString.FindStringSubmatch(d.String())
		if m == nil {
			err = fmt.Errorf("cannot read %s", d)
			continue
		}
		if seen[m[1]] || !strings.HasPrefix(m[1], "skewgate_") {
			continue
		}
		seen[m[1]] = true
		help, _ := strconv.Unquote(m[2])
		var labels []string
		for _, kv := range strings.Split(m[3], ",") {
			if name, _, ok := strings.Cut(kv, "="); ok {
				labels = append(labels, name)
			}
		}
		for _, l := range strings.Split(m[4], ",") {
			if l != "" {
				labels = append(labels, l)
			}
		}
		out = append(out, Metric{Name: m[1], Type: types[m[1]], Labels: labels, Meaning: help, Package: pkg})
	}
	return out, err
}

// Undocumented compares what pkg registers (code) with metrics.md's rows
// for pkg, and says what to add, change or remove, row by row.
func Undocumented(pkg string, code []Metric) ([]string, error) {
	rows, err := Metrics()
	if err != nil {
		return nil, err
	}
	doc := map[string]Metric{}
	for _, r := range rows {
		doc[r.Name] = r
	}
	var problems []string
	registered := map[string]bool{}
	for _, m := range code {
		registered[m.Name] = true
		r, ok := doc[m.Name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s is registered by %s but not in docs/metrics.md: add the row (say what it means in words an operator uses)\n%s", m.Name, pkg, m.Row()))
		case r.Package != pkg:
			problems = append(problems, fmt.Sprintf("%s: docs/metrics.md says package %s registers it; %s does", m.Name, r.Package, pkg))
		case m.Type != "" && r.Type != m.Type:
			problems = append(problems, fmt.Sprintf("%s: docs/metrics.md says %s; it is a %s", m.Name, r.Type, m.Type))
		case !slices.Equal(r.Labels, m.Labels):
			problems = append(problems, fmt.Sprintf("%s: docs/metrics.md lists labels %q; the code declares %q", m.Name, r.Labels, m.Labels))
		}
	}
	for _, r := range rows {
		if r.Package == pkg && !registered[r.Name] {
			problems = append(problems, fmt.Sprintf("%s: docs/metrics.md has its row under %s, which no longer registers it: remove the row\n%s", r.Name, pkg, r.Row()))
		}
	}
	return problems, nil
}

// Recorder is a registry that remembers the collectors registered with
// it, for Described: a test builds its package's metrics the way the
// program does, with a Recorder as their registry.
type Recorder struct {
	*prometheus.Registry
	Collectors []prometheus.Collector
}

// NewRecorder returns a Recorder over a pedantic registry, which also
// checks that every metric collected was described.
func NewRecorder() *Recorder { return &Recorder{Registry: prometheus.NewPedanticRegistry()} }

// Register implements prometheus.Registerer.
func (r *Recorder) Register(c prometheus.Collector) error {
	r.Collectors = append(r.Collectors, c)
	return r.Registry.Register(c)
}

// MustRegister implements prometheus.Registerer.
func (r *Recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}
