package drill

import (
	"strings"

	"github.com/skewgate/skewgate/deploy/monitoring/dashboard"
)

// DashboardQueries are the shipped dashboard's panel queries with every
// variable set as Grafana sends them for "All": every cluster, node and
// server. One place, so the drill and its test cannot disagree (the
// command's copy missed $cluster once, and no query returned series).
func DashboardQueries() ([]PanelQuery, error) {
	qs, err := dashboard.Queries()
	if err != nil {
		return nil, err
	}
	r := strings.NewReplacer("$cluster", ".*", "$node", ".*", "$server", ".*", "$__rate_interval", "30s")
	out := make([]PanelQuery, 0, len(qs))
	for _, q := range qs {
		out = append(out, PanelQuery{Panel: q.Panel + " " + q.RefID, Expr: r.Replace(q.Expr)})
	}
	return out, nil
}
