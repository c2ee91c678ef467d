package dashboard

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	sdk "github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// topHeight is the height of the top row's panels: its four lines of
// panels fit one screen (24 grid units, 720 px at Grafana's 30 px a unit).
const topHeight = 6

type row struct {
	title  string
	panels []cog.Builder[sdk.Panel]
}

// rows are the dashboard top to bottom: what an operator asks first during
// an upgrade comes first. The top row answers "is skewgate helping,
// hurting, or idle, and why" on one screen: the window and why, the mode
// and steering, what skewgate prevented, what it answered itself, the
// grace, and what it did to connections.
func rows() []row {
	return []row{
		{"Upgrade window: helping, hurting or idle", []cog.Builder[sdk.Panel]{
			window(), windowBounds(), steeringModeAndState(),
			routedToPeers(), ownAnswers(),
			rollbackGrace(), handOverAndBack(),
			directInWindow(), heldLookups(), shedding()}},
		{"Routing", []cog.Builder[sdk.Panel]{routeMix(), latencyByServer(), peerRTT()}},
		{"Servers", []cog.Builder[sdk.Panel]{serverHealth(), probeLatency(), discoveryAge(), serverVersions(), unevenGroupVersions()}},
		{"Steering and forwarding", []cog.Builder[sdk.Panel]{steeringLease(), forwardErrors()}},
		{"TCP per hop", tcpHeatmaps()},
		{"Build", []cog.Builder[sdk.Panel]{buildInfo()}},
	}
}

func routeMix() cog.Builder[sdk.Panel] {
	return timeSeries("Route mix", "Requests answered per second by route: local, peer (sent to a peer that serves it), merged (discovery answered by skewgate), unavailable (503), rejected (401/400 from skewgate).", "reqps").
		Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).
		FillOpacity(30).
		WithTarget(rangeQuery(`sum by (route) (rate(skewgate_requests_total{`+onNode+`}[$__rate_interval]))`, "{{route}}"))
}

func routedToPeers() cog.Builder[sdk.Panel] {
	return timeSeries("Requests routed to peers (false 404s prevented)", "Requests for resources the local apiserver does not serve, answered by a peer that does (routing rule 4): each would have been a false 404 without skewgate. Requests moved to a peer because the local apiserver was away (rule 3a: a restart, a drain) are shown apart: they would have failed, not been 404s.", "reqps").
		Height(topHeight).
		WithTarget(rangeQuery(`sum by (group, version, resource) (rate(skewgate_requests_total{`+onNode+`, route="peer", rule="4"}[$__rate_interval]))`, "{{group}}/{{version}} {{resource}}")).
		WithTarget(rangeQuery(`sum(rate(skewgate_requests_total{`+onNode+`, route="peer", rule="3a"}[$__rate_interval]))`, "moved: the local apiserver away (3a)"))
}

func ownAnswers() cog.Builder[sdk.Panel] {
	return timeSeries("skewgate's own 429s and 503s", "Answers skewgate gave itself instead of an apiserver, by code. 503: only unhealthy or departed peers serve the resource, a rollback grace holds it (rule 5: not a 404), or a member's discovery is not known yet; 429: the server chosen has as many requests in flight as skewgate sends it, or no apiserver could judge a token; 502: a connection broke after the request was sent. Hurting when it lasts past a node's restart.", "reqps").
		Height(topHeight).
		ColorScheme(sdk.NewFieldColorBuilder().Mode(sdk.FieldColorModeIdPaletteClassic)).
		WithTarget(rangeQuery(`sum by (instance, code) (rate(skewgate_requests_total{`+onNode+`, route="unavailable"}[$__rate_interval]))`, "{{instance}} {{code}}"))
}

func latencyByServer() cog.Builder[sdk.Panel] {
	return timeSeries("Request latency by server", "99th and 50th percentile time to answer, by the server that answered (skewgate: answered by skewgate itself). Watches and upgrades are not counted.", "s").
		WithTarget(rangeQuery(`histogram_quantile(0.99, sum by (le, server) (rate(skewgate_request_duration_seconds_bucket{`+onNode+`}[$__rate_interval])))`, "p99 {{server}}")).
		WithTarget(rangeQuery(`histogram_quantile(0.5, sum by (le, server) (rate(skewgate_request_duration_seconds_bucket{`+onNode+`}[$__rate_interval])))`, "p50 {{server}}"))
}

func peerRTT() cog.Builder[sdk.Panel] {
	return timeSeries("Peer RTT by server", "Median smoothed TCP round trip to each peer apiserver over open connections, from the kernel: the slow peer stands out.", "s").
		WithTarget(rangeQuery(`histogram_quantile(0.5, sum by (le, server) (rate(skewgate_tcp_srtt_seconds_bucket{`+onNode+`, hop="proxy_to_peer"}[$__rate_interval])))`, "{{server}}"))
}

func serverHealth() cog.Builder[sdk.Panel] {
	return statetimeline.NewPanelBuilder().
		Title("Server health").
		Description("Whether each skewgate routes to each apiserver: two failed /readyz probes (or one failed connection) take it out, two passing ones bring it back.").
		Datasource(datasource).Height(8).Span(12).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeSingle).Sort(common.SortOrderNone)).
		Mappings([]sdk.ValueMapping{valueText("0", "down", "red"), valueText("1", "healthy", "green")}).
		WithTarget(rangeQuery(`skewgate_server_healthy{`+onNodeServer+`}`, "{{instance}} → {{server}}"))
}

func probeLatency() cog.Builder[sdk.Panel] {
	return timeSeries("Probe latency", "Moving average of each apiserver's /readyz round trip; peers with less are preferred.", "s").
		WithTarget(rangeQuery(`skewgate_server_probe_latency_seconds{`+onNodeServer+`}`, "{{instance}} → {{server}}"))
}

func discoveryAge() cog.Builder[sdk.Panel] {
	return timeSeries("Discovery age", "Time since each apiserver's discovery was last confirmed; re-read every 10s by default. Over 120s for 2 minutes alerts (SkewgateDiscoveryStale).", "s").
		Thresholds(thresholds(120)).
		ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeLine)).
		WithTarget(rangeQuery(`skewgate_server_discovery_age_seconds{`+onNodeServer+`}`, "{{instance}} → {{server}}"))
}

func serverVersions() cog.Builder[sdk.Panel] {
	return tablePanel("Version of each server", "The kube-apiserver version each server reports, as skewgate sees it.",
		[]string{"Time", "Value"}, nil).
		WithTarget(tableQuery(`max by (server, version) (skewgate_server_info{` + onNodeServer + `})`))
}

func unevenGroupVersions() cog.Builder[sdk.Panel] {
	return tablePanel("Group/versions not served by every member", "Group/versions fewer servers serve than there are members: requests for them may be routed to a peer, or answered 503 while those peers are down. Empty once every server runs one version.",
		[]string{"Time", "__name__", "job"}, map[string]string{"Value": "servers serving it"}).
		WithTarget(tableQuery(`skewgate_group_version_servers{` + onNode + `} < on (instance) group_left skewgate_members{` + onNode + `}`))
}

func steeringModeAndState() cog.Builder[sdk.Panel] {
	return statetimeline.NewPanelBuilder().
		Title("Steering: mode and state").
		Description("The mode in force on each node (always: armed, by --steering-mode or the cluster's kube-system/skewgate ConfigMap; auto: steer in a skew window; off) and its steering state: steering (connections to the node's address reach skewgate), standby (not wanted: mode auto outside a window, or off), lapsed (lease expired: they reach the apiserver directly), off (kill switch), disabled (not configured). Idle: auto and standby outside a window.").
		Datasource(datasource).Height(topHeight).Span(6).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeSingle).Sort(common.SortOrderNone)).
		Mappings([]sdk.ValueMapping{valueText("1", " ", "text")}).
		OverrideByRegexp(".* mode always$", fixedColor("blue")).
		OverrideByRegexp(".* mode auto$", fixedColor("green")).
		OverrideByRegexp(".* mode off$", fixedColor("orange")).
		OverrideByRegexp(".* steering$", fixedColor("green")).
		OverrideByRegexp(".* standby$", fixedColor("gray")).
		OverrideByRegexp(".* lapsed$", fixedColor("red")).
		OverrideByRegexp(".* state off$", fixedColor("orange")).
		OverrideByRegexp(".* disabled$", fixedColor("gray")).
		WithTarget(rangeQuery(`skewgate_steering_mode{`+onNode+`} == 1`, "{{instance}} mode {{mode}}")).
		WithTarget(rangeQuery(`skewgate_steering_state{`+onNode+`} == 1`, "{{instance}} state {{state}}"))
}

func window() cog.Builder[sdk.Panel] {
	return statetimeline.NewPanelBuilder().
		Title("Window").
		Description("The skew window on each node (open during an upgrade or a rollback, and the hold time after; mode auto steers only then) and why it is open: upgrade_signal (a node's apiserver upgrade has begun), versions (the members' versions differ), built_in_types (what their binaries serve differs), hold (the hold after the last of those), grace (a rollback grace outlasting the hold). Closed everywhere, with mode auto: skewgate is idle, by design.").
		Datasource(datasource).Height(topHeight).Span(12).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeSingle).Sort(common.SortOrderNone)).
		Mappings([]sdk.ValueMapping{valueText("0", "closed", "transparent"), valueText("1", "open", "orange")}).
		OverrideByRegexp("^why: .*", []sdk.DynamicConfigValue{{Id: "mappings", Value: []sdk.ValueMapping{valueText("0", " ", "transparent"), valueText("1", "yes", "yellow")}}}).
		WithTarget(rangeQuery(`skewgate_skew_window{`+onNode+`}`, "{{instance}}")).
		WithTarget(rangeQuery(`max by (cause) (skewgate_skew_window_cause{`+onNode+`})`, "why: {{cause}}"))
}

func windowBounds() cog.Builder[sdk.Panel] {
	return stat.NewPanelBuilder().
		Title("Window since and until").
		Description("When each node's open window opened, and when it closes if the members keep agreeing (the hold's end, or a rollback grace's). Empty while it is closed; no until while the members differ.").
		Datasource(datasource).Height(topHeight).Span(6).
		Unit("dateTimeFromNow").
		NoValue("closed").
		TextMode(common.BigValueTextModeValueAndName).
		ColorMode(common.BigValueColorModeNone).
		GraphMode(common.BigValueGraphModeNone).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false)).
		WithTarget(rangeQuery(`skewgate_skew_window_opened_timestamp_seconds{`+onNode+`} * 1000 > 0`, "{{instance}} opened")).
		WithTarget(rangeQuery(`skewgate_skew_window_until_timestamp_seconds{`+onNode+`} * 1000 > 0`, "{{instance}} closes"))
}

func rollbackGrace() cog.Builder[sdk.Panel] {
	return tablePanel("Rollback grace: end per type", "Resource types a rollback grace holds and when it ends: until then rule 5 answers them 503 with Retry-After, not the rolled-back server's 404, so garbage collection and namespace deletion wait; merged discovery drops them one discovery settle (60 s) earlier. The cluster's rollback-grace-until (kube-system/skewgate) ends every grace that began before it. Empty: no grace. End it with the runbook's last step.",
		[]string{"Time"}, map[string]string{"Value": "grace ends"}).
		Height(topHeight).
		Unit("dateTimeAsIso").
		WithTarget(tableQuery(`max by (group, version, resource) (skewgate_rollback_grace_end_timestamp_seconds{` + onNode + `}) * 1000`))
}

func handOverAndBack() cog.Builder[sdk.Panel] {
	return timeSeries("Hand-over and hand-back", "Connections skewgate moved: reset (direct connections to the apiserver ended when steering engaged, so their clients come back through skewgate; nothing in flight on them), handed back (steered connections asked to leave once steering was no longer wanted: Connection: close, GOAWAY, a watch ended cleanly), and still steered (client connections open to skewgate now; they fall to 0 after a window closes).", "short").
		Height(topHeight).
		WithTarget(rangeQuery(`sum by (instance) (increase(skewgate_steering_reset_connections_total{`+onNode+`}[$__rate_interval]))`, "{{instance}} reset")).
		WithTarget(rangeQuery(`sum by (instance, how) (increase(skewgate_handback_connections_total{`+onNode+`}[$__rate_interval]))`, "{{instance}} handed back: {{how}}")).
		WithTarget(rangeQuery(`skewgate_client_connections{`+onNode+`}`, "{{instance}} still steered"))
}

func directInWindow() cog.Builder[sdk.Panel] {
	return timeSeries("Direct connections in a window", "Established connections the node's apiserver accepted itself, not through skewgate, while the window is open: steered=\"false\", an address skewgate does not steer (every client there bypasses it: SkewgateUnsteeredAddressInUse); steered=\"true\", made while steering did not take them (their clients see the local server's 404s until they reconnect). Outside a window direct connections are the point and are not shown.", "short").
		Height(topHeight).
		Span(8).
		WithTarget(rangeQuery(`sum by (instance, address, steered) (skewgate_direct_connections{`+onNode+`}) and on (instance) (skewgate_skew_window{`+onNode+`} == 1)`, "{{instance}} {{address}} steered={{steered}}"))
}

func heldLookups() cog.Builder[sdk.Panel] {
	return timeSeries("Held lookups (the hold)", "New connections the kernel refused because skewgate was gone inside a rollback grace (sk_lookup reason held): their clients retry until a restarted skewgate takes them, instead of meeting the rolled-back server's 404. Any other time this stays at 0; refusals that last mean skewgate is not coming back: end the grace (runbook step 6).", "reqps").
		Height(topHeight).
		Span(8).
		WithTarget(rangeQuery(`sum by (instance) (rate(skewgate_steering_lookups_total{`+onNode+`, reason="held"}[$__rate_interval]))`, "{{instance}} held"))
}

func shedding() cog.Builder[sdk.Panel] {
	return timeSeries("Shedding", "1 while skewgate sheds load by failing open, near --max-connections or its soft memory limit: steering withdrawn, steered connections handed back, clients on the apiserver directly (SkewgateShedding). Episodes counts each start, also those shorter than a scrape.", "short").
		Height(topHeight).
		Span(8).
		WithTarget(rangeQuery(`skewgate_shedding{`+onNode+`}`, "{{instance}} shedding")).
		WithTarget(rangeQuery(`sum by (instance) (increase(skewgate_shedding_episodes_total{`+onNode+`}[$__rate_interval]))`, "{{instance}} episodes"))
}

func steeringLease() cog.Builder[sdk.Panel] {
	return timeSeries("Steering lease remaining", "Time left on each node's steering lease (2s, renewed every 500ms while skewgate's probe passes); 0 when lapsed.", "s").
		WithTarget(rangeQuery(`skewgate_steering_lease_remaining_seconds{`+onNode+`}`, "{{instance}}"))
}

func forwardErrors() cog.Builder[sdk.Panel] {
	return timeSeries("Forward errors by kind", "Failed exchanges with apiservers: connect (no connection, nothing sent; idempotent requests fail over) or request (broke after bytes were sent; never retried).", "short").
		WithTarget(rangeQuery(`sum by (instance, server, kind) (rate(skewgate_forward_errors_total{`+onNodeServer+`}[$__rate_interval]))`, "{{instance}} → {{server}} {{kind}}"))
}

// hops are the connstat hops, in the order a request crosses them.
var hops = []string{"client_to_proxy", "proxy_to_local", "proxy_to_peer"}

func tcpHeatmaps() []cog.Builder[sdk.Panel] {
	var panels []cog.Builder[sdk.Panel]
	for _, m := range []struct{ metric, title, what string }{
		{"skewgate_tcp_handshake_seconds", "TCP handshake", "Time from SYN to established"},
		{"skewgate_tcp_min_rtt_seconds", "TCP min RTT", "Lowest round trip the kernel measured per connection, at its close"},
		{"skewgate_tcp_srtt_seconds", "TCP smoothed RTT (open)", "Smoothed round trip of open connections, sampled once a second each (long-lived HTTP/2 connections to peers show here while open; delayed ACKs inflate it)"},
	} {
		for _, hop := range hops {
			panels = append(panels, heatmap.NewPanelBuilder().
				Title(m.title+": "+hop).
				Description(m.what+" on the "+hop+" hop, from the kernel (sock_ops), in log2 buckets.").
				Datasource(datasource).Height(8).Span(8).
				Calculate(false).
				Tooltip(heatmap.NewHeatmapTooltipBuilder().Mode(common.TooltipDisplayModeSingle).YHistogram(true)).
				YAxis(heatmap.NewYAxisConfigBuilder().Unit("s")).
				Color(heatmap.NewHeatmapColorOptionsBuilder().Mode(heatmap.HeatmapColorModeScheme).Scheme("Oranges").Scale(heatmap.HeatmapColorScaleExponential).Exponent(0.5).Steps(64)).
				WithTarget(prometheus.NewDataqueryBuilder().
					Datasource(datasource).
					Expr(`sum by (le) (rate(`+m.metric+`_bucket{`+onNode+`, hop="`+hop+`"}[$__rate_interval]))`).
					Format(prometheus.PromQueryFormatHeatmap).
					LegendFormat("{{le}}")))
		}
	}
	return panels
}

func buildInfo() cog.Builder[sdk.Panel] {
	return tablePanel("Build", "The skewgate build each node runs.", []string{"Time", "Value", "__name__", "job"}, nil).
		Span(24).
		WithTarget(tableQuery(`skewgate_build_info{` + onNode + `}`))
}

func timeSeries(title, description, unit string) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource).
		Height(8).Span(12).
		Unit(unit).
		Min(0).
		Legend(common.NewVizLegendOptionsBuilder().DisplayMode(common.LegendDisplayModeTable).Placement(common.LegendPlacementBottom).ShowLegend(true).Calcs([]string{"lastNotNull", "max"})).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
}

// tablePanel shows an instant query's labels as columns, without the
// columns hide names and with those rename names renamed.
func tablePanel(title, description string, hide []string, rename map[string]string) *table.PanelBuilder {
	excluded := map[string]bool{}
	for _, h := range hide {
		excluded[h] = true
	}
	if rename == nil {
		rename = map[string]string{}
	}
	return table.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource).
		Height(8).Span(12).
		Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{})).
		WithTransformation(sdk.DataTransformerConfig{Id: "organize", Options: map[string]any{"excludeByName": excluded, "renameByName": rename}})
}

func rangeQuery(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(datasource).Expr(expr).LegendFormat(legend).Range()
}

func tableQuery(expr string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(datasource).Expr(expr).Format(prometheus.PromQueryFormatTable).Instant()
}

func valueText(value, text, color string) sdk.ValueMapping {
	return sdk.ValueMapping{ValueMap: &sdk.ValueMap{
		Type:    sdk.MappingTypeValueToText,
		Options: map[string]sdk.ValueMappingResult{value: {Text: ptr(text), Color: ptr(color)}},
	}}
}

func fixedColor(color string) []sdk.DynamicConfigValue {
	return []sdk.DynamicConfigValue{{Id: "color", Value: map[string]string{"mode": "fixed", "fixedColor": color}}}
}

func thresholds(red float64) *sdk.ThresholdsConfigBuilder {
	return sdk.NewThresholdsConfigBuilder().Mode(sdk.ThresholdsModeAbsolute).Steps([]sdk.Threshold{
		{Value: nil, Color: "green"},
		{Value: ptr(red), Color: "red"},
	})
}
