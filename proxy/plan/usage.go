package plan

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// requestsMetric is skewgate's request counter (proxy/metrics.go), labelled
// by route, verb, group, version, resource and code.
const requestsMetric = "skewgate_requests_total"

// requestCounts sums requests by type and verb.
type requestCounts struct {
	byType map[schema.GroupVersionResource]map[string]float64
	source string
}

func (r *requestCounts) Source() string { return r.source }

// Requests returns gvr's figures; a type nobody requested has none (0 is
// known: skewgate counts every request it answers).
func (r *requestCounts) Requests(gvr schema.GroupVersionResource) map[string]float64 {
	if v := r.byType[gvr]; v != nil {
		return v
	}
	return map[string]float64{}
}

func (r *requestCounts) add(gvr schema.GroupVersionResource, verb string, v float64) {
	if r.byType[gvr] == nil {
		r.byType[gvr] = map[string]float64{}
	}
	r.byType[gvr][verb] += v
}

// ScrapeUsage reads skewgate_requests_total from every node's /metrics:
// requests since each skewgate started, summed. It returns nil (unknown)
// when no node answers; errs lists the nodes that did not.
func ScrapeUsage(ctx context.Context, c *Cluster, nodes []Node) (u Usage, errs []error) {
	r := &requestCounts{byType: map[schema.GroupVersionResource]map[string]float64{}}
	read := 0
	for _, n := range nodes {
		body, _, err := get(ctx, c.Admin, n.Admin+"/metrics", http.Header{"Accept": {"text/plain;version=0.0.4"}})
		if err == nil {
			err = r.addText(body)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.Name(), err))
			continue
		}
		read++
	}
	if read == 0 {
		return nil, errs
	}
	r.source = fmt.Sprintf("%s from %d of %d nodes' skewgate /metrics: requests since each skewgate started", requestsMetric, read, len(nodes))
	return r, errs
}

func (r *requestCounts) addText(body []byte) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("parse metrics: %w", err)
	}
	fam := fams[requestsMetric]
	if fam == nil {
		return nil
	}
	for _, m := range fam.GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		if l["resource"] == "" {
			continue
		}
		gvr := schema.GroupVersionResource{Group: l["group"], Version: l["version"], Resource: l["resource"]}
		r.add(gvr, l["verb"], m.GetCounter().GetValue())
	}
	return nil
}

// usageWindow is how far back "still used" looks in Prometheus.
const usageWindow = "15m"

// PrometheusUsage asks Prometheus at base for each type's request rate
// over the last 15 minutes, summed over the nodes; c nil is
// http.DefaultClient.
func PrometheusUsage(ctx context.Context, c *http.Client, base string) (Usage, error) {
	if c == nil {
		c = http.DefaultClient
	}
	q := fmt.Sprintf("sum by (group, version, resource, verb) (rate(%s[%s]))", requestsMetric, usageWindow)
	samples, err := promQuery(ctx, c, base, q)
	if err != nil {
		return nil, err
	}
	r := &requestCounts{byType: map[schema.GroupVersionResource]map[string]float64{},
		source: fmt.Sprintf("Prometheus %s: requests per second over the last %s", base, usageWindow)}
	for _, s := range samples {
		if s.Metric["resource"] == "" {
			continue
		}
		gvr := schema.GroupVersionResource{Group: s.Metric["group"], Version: s.Metric["version"], Resource: s.Metric["resource"]}
		r.add(gvr, s.Metric["verb"], s.Value)
	}
	return r, nil
}

// promSample is one element of an instant vector.
type promSample struct {
	Metric map[string]string
	Value  float64
}

// promQuery runs an instant query through Prometheus's HTTP API.
func promQuery(ctx context.Context, c *http.Client, base, query string) ([]promSample, error) {
	body, _, err := get(ctx, c, base+"/api/v1/query?"+url.Values{"query": {query}}.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("prometheus: %w", err)
	}
	var resp struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("prometheus: %w", err)
	}
	if resp.Status != "success" || resp.Data.ResultType != "vector" {
		return nil, fmt.Errorf("prometheus: query %q: %s %s (result %q)", query, resp.Status, resp.Error, resp.Data.ResultType)
	}
	out := make([]promSample, 0, len(resp.Data.Result))
	for _, r := range resp.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("prometheus: value %q: %w", s, err)
		}
		out = append(out, promSample{Metric: r.Metric, Value: v})
	}
	return out, nil
}
