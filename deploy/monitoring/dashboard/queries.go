package dashboard

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// Query is one PromQL expression of a panel, as Grafana sends it before
// interpolation: it holds the placeholders $cluster, $node, $server (label regexes;
// ".*" is "All") and $__rate_interval (a range, at least four scrape
// intervals), which a caller replaces before evaluating it.
type Query struct {
	Panel string // the panel's title
	RefID string // the query's id within the panel: A, B, ...
	Expr  string
	// Instant is true for table panels, which Grafana evaluates once at the
	// end of the time range rather than over it.
	Instant bool
}

// Queries returns every panel's PromQL queries, top to bottom, read back
// from the built dashboard so that none can be missed. It fails when Build
// does, or when a panel holds a query that is not Prometheus's.
func Queries() ([]Query, error) {
	d, err := Build()
	if err != nil {
		return nil, err
	}
	var qs []Query
	for _, p := range d.Panels {
		if p.Panel == nil {
			continue // a row; rows are expanded, their panels follow them
		}
		title := deref(p.Panel.Title)
		for i, t := range p.Panel.Targets {
			q, ok := t.(prometheus.Dataquery)
			if !ok {
				return nil, fmt.Errorf("panel %q: query %d is %T, not Prometheus", title, i, t)
			}
			qs = append(qs, Query{Panel: title, RefID: deref(q.RefId), Expr: q.Expr, Instant: deref(q.Instant)})
		}
	}
	return qs, nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
