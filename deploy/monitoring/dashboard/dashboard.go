// Package dashboard builds skewgate's Grafana dashboard for an upgrade
// window with the Grafana Foundation SDK: what skewgate routes where, which
// servers are healthy and what they serve, whether steering holds, and the
// kernel's view of each hop. Queries lists every panel's PromQL so a test
// can run them against a real Prometheus.
package dashboard

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/common"
	sdk "github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// UID is the dashboard's Grafana UID: links to it survive re-imports.
const UID = "skewgate-upgrade"

// The label matchers every query narrows with, from the dashboard's
// variables: $cluster selects a cluster where one Prometheus (Thanos,
// Mimir) holds several, by the `cluster` label kubernetes-mixin's
// dashboards use; $node selects skewgate instances, $server the apiservers
// they front. "All" is ".*", so a node or server that appears later is
// included, and series without a cluster label (one cluster per
// Prometheus) match.
const (
	onNode       = `cluster=~"$cluster", instance=~"$node"`
	onNodeServer = onNode + `, server=~"$server"`
)

// datasource is the dashboard's Prometheus, chosen by the datasource
// variable so the JSON imports into any Grafana.
var datasource = common.DataSourceRef{Type: ptr("prometheus"), Uid: ptr("${datasource}")}

// Build returns the dashboard. An error means a panel or variable the SDK
// refuses, a bug here rather than anything at run time.
func Build() (sdk.Dashboard, error) {
	b := sdk.NewDashboardBuilder("skewgate: upgrade window").
		Uid(UID).
		Description("Routing, server health, steering and per-hop TCP of skewgate while kube-apiservers of two versions serve side by side.").
		Tags([]string{"skewgate", "kubernetes", "apiserver"}).
		Editable().
		Tooltip(sdk.DashboardCursorSyncCrosshair).
		Refresh("30s").
		Time("now-3h", "now").
		Timezone(common.TimeZoneBrowser).
		WithVariable(sdk.NewDatasourceVariableBuilder("datasource").Label("Prometheus").Type("prometheus")).
		WithVariable(labelVariable("cluster", "Cluster", "label_values(skewgate_build_info, cluster)")).
		WithVariable(labelVariable("node", "Node", `label_values(skewgate_build_info{cluster=~"$cluster"}, instance)`)).
		WithVariable(labelVariable("server", "Server", `label_values(skewgate_server_healthy{cluster=~"$cluster"}, server)`))
	for _, r := range rows() {
		b.WithRow(sdk.NewRowBuilder(r.title))
		for _, p := range r.panels {
			b.WithPanel(p)
		}
	}
	d, err := b.Build()
	if err != nil {
		return sdk.Dashboard{}, fmt.Errorf("build dashboard: %w", err)
	}
	numberPanels(&d)
	return d, nil
}

// JSON returns the dashboard as skewgate-dashboard.json holds it.
func JSON() ([]byte, error) {
	d, err := Build()
	if err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode dashboard: %w", err)
	}
	return append(out, '\n'), nil
}

// labelVariable is a multi-value variable over a label's values, "All"
// matching any value.
func labelVariable(name, label, query string) *sdk.QueryVariableBuilder {
	return sdk.NewQueryVariableBuilder(name).
		Label(label).
		Datasource(datasource).
		Query(sdk.StringOrMap{String: ptr(query)}).
		Definition(query).
		Refresh(sdk.VariableRefreshOnTimeRangeChanged).
		Sort(sdk.VariableSortNaturalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".*")
}

// numberPanels gives every panel and row an id, and every query a refId,
// in order: Grafana needs them unique, stable panel ids keep links to a
// panel (viewPanel=) working, and refIds name a query in errors and tests.
func numberPanels(d *sdk.Dashboard) {
	var id uint32
	for _, p := range d.Panels {
		id++
		if p.RowPanel != nil {
			p.RowPanel.Id = id
			continue
		}
		p.Panel.Id = ptr(id)
		for i, t := range p.Panel.Targets {
			if q, ok := t.(prometheus.Dataquery); ok {
				q.RefId = ptr(string(rune('A' + i)))
				p.Panel.Targets[i] = q
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }
