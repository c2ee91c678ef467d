package proxy

import (
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skewgate/skewgate/docs"
	"github.com/skewgate/skewgate/proxy/membership"
)

// describeOnly describes c's metrics and collects none: the certificates'
// collector reads files a test does not have.
type describeOnly struct{ prometheus.Collector }

func (describeOnly) Collect(chan<- prometheus.Metric) {}

// registered is every metric the proxy registers, by register, as New
// calls it, gathered from a real registry.
func registered(t *testing.T, pkg string, keep func(prometheus.Collector) bool) []docs.Metric {
	t.Helper()
	local, _ := url.Parse("https://127.0.0.1:6443")
	members, err := membership.New(membership.Config{Local: local})
	if err != nil {
		t.Fatal(err)
	}
	reg := docs.NewRecorder()
	l := &Load{}
	m := register(reg, members, describeOnly{&Certs{}}, l, NewAdmission(l), &SteeringSwitch{})
	// One series each, so that the registry gathers the vectors' types.
	m.requests.WithLabelValues("local", "3", "get", "", "v1", "pods", "200")
	m.duration.WithLabelValues("local", "127.0.0.1:6443")
	m.fwdErrors.WithLabelValues("127.0.0.1:6443", "connect")
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var cs []prometheus.Collector
	for _, c := range reg.Collectors {
		if keep(c) {
			cs = append(cs, c)
		}
	}
	ms, err := docs.Described(pkg, cs, fams)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// Issue 44: metrics were registered in two files and documented in three
// tables. Every metric the proxy registers has its row in docs/metrics.md,
// with its type and labels, and every row under proxy or proxy/membership
// a metric.
func TestMetricsDocumented(t *testing.T) {
	isMembers := func(c prometheus.Collector) bool { _, ok := c.(*membership.Members); return ok }
	for pkg, keep := range map[string]func(prometheus.Collector) bool{
		"proxy":            func(c prometheus.Collector) bool { return !isMembers(c) },
		"proxy/membership": isMembers,
	} {
		problems, err := docs.Undocumented(pkg, registered(t, pkg, keep))
		if err != nil {
			t.Fatal(err)
		}
		if len(problems) > 0 {
			t.Errorf("docs/metrics.md and %s disagree:\n%s", pkg, strings.Join(problems, "\n"))
		}
	}
}
