package status

import (
	"bytes"
	"context"
	"fmt"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The agent's metrics status reads (agent/steering_metrics.go); the proxy
// half cannot import the agent, so cmd/kubectl-skewgate's tests hold the
// names to the agent's descriptors.
const (
	MetricSteeringState = "skewgate_steering_state"
	MetricLookups       = "skewgate_steering_lookups_total"
)

// Lookup outcomes that are not a connection to a target going straight to
// the apiserver: every other outcome (off, lease_expired, exempt,
// no_socket, assign_error, and any added later) is one. held was refused
// (a dead agent's hold): counted apart, in ByReason only.
const (
	reasonSteered   = "steered"
	reasonNotTarget = "not_target"
	reasonHeld      = "held"
)

// kernel is what the agent's metrics say of steering.
type kernel struct {
	state string
	conns *Connections
}

// readMetrics reads the node's /metrics in the text format.
func readMetrics(ctx context.Context, c *http.Client, base string) (kernel, error) {
	body, err := get(ctx, c, base+"/metrics", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	if err != nil {
		return kernel{}, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return kernel{}, fmt.Errorf("%s/metrics: %w", base, err)
	}
	return kernelFrom(fams), nil
}

// kernelFrom picks the steering state (the label of the series at 1) and
// the lookup counts; both are absent where steering never installed.
func kernelFrom(fams map[string]*dto.MetricFamily) kernel {
	var k kernel
	for _, m := range fams[MetricSteeringState].GetMetric() {
		if m.GetGauge().GetValue() == 1 {
			k.state = label(m, "state")
		}
	}
	lookups := fams[MetricLookups].GetMetric()
	if len(lookups) == 0 {
		return k
	}
	k.conns = &Connections{ByReason: map[string]uint64{}}
	for _, m := range lookups {
		reason, n := label(m, "reason"), uint64(m.GetCounter().GetValue())
		switch reason {
		case reasonNotTarget:
			continue
		case reasonSteered:
			k.conns.Steered += n
		case reasonHeld:
		default:
			k.conns.Direct += n
		}
		k.conns.ByReason[reason] = n
	}
	return k
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
