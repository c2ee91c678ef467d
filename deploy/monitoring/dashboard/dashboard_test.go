package dashboard

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	sdk "github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

func queries(t *testing.T) []Query {
	t.Helper()
	qs, err := Queries()
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) == 0 {
		t.Fatal("no queries")
	}
	return qs
}

// TestUpgradeWindowPanels pins the panels an operator watches an upgrade
// with to the queries that answer them.
func TestUpgradeWindowPanels(t *testing.T) {
	want := map[string][]string{
		"Route mix": {`sum by (route) (rate(skewgate_requests_total{cluster=~"$cluster", instance=~"$node"}[$__rate_interval]))`},
		"Requests routed to peers (false 404s prevented)": {`route="peer", rule="4"`, `rule="3a"`},
		"Window":                                    {`skewgate_skew_window{cluster=~"$cluster", instance=~"$node"}`, `max by (cause) (skewgate_skew_window_cause{`},
		"Window since and until":                    {`skewgate_skew_window_opened_timestamp_seconds{`, `skewgate_skew_window_until_timestamp_seconds{`},
		"Steering: mode and state":                  {`skewgate_steering_mode{cluster=~"$cluster", instance=~"$node"} == 1`, `skewgate_steering_state{cluster=~"$cluster", instance=~"$node"} == 1`},
		"skewgate's own 429s and 503s":              {`sum by (instance, code) (rate(skewgate_requests_total{cluster=~"$cluster", instance=~"$node", route="unavailable"}[$__rate_interval]))`},
		"Rollback grace: end per type":              {`max by (group, version, resource) (skewgate_rollback_grace_end_timestamp_seconds{`},
		"Hand-over and hand-back":                   {`skewgate_steering_reset_connections_total{`, `sum by (instance, how) (increase(skewgate_handback_connections_total{`, `skewgate_client_connections{`},
		"Direct connections in a window":            {`skewgate_direct_connections{cluster=~"$cluster", instance=~"$node"}) and on (instance) (skewgate_skew_window{cluster=~"$cluster", instance=~"$node"} == 1)`},
		"Held lookups (the hold)":                   {`skewgate_steering_lookups_total{cluster=~"$cluster", instance=~"$node", reason="held"}`},
		"Shedding":                                  {`skewgate_shedding{`, `skewgate_shedding_episodes_total{`},
		"Server health":                             {`skewgate_server_healthy{cluster=~"$cluster", instance=~"$node", server=~"$server"}`},
		"Probe latency":                             {`skewgate_server_probe_latency_seconds{`},
		"Discovery age":                             {`skewgate_server_discovery_age_seconds{`},
		"Version of each server":                    {`skewgate_server_info{`},
		"Group/versions not served by every member": {`skewgate_group_version_servers{cluster=~"$cluster", instance=~"$node"} < on (instance) group_left skewgate_members`},
		"Request latency by server": {
			`histogram_quantile(0.99, sum by (le, server) (rate(skewgate_request_duration_seconds_bucket{cluster=~"$cluster", instance=~"$node"}[$__rate_interval])))`,
		},
		"Peer RTT by server":       {`histogram_quantile(0.5, sum by (le, server) (rate(skewgate_tcp_srtt_seconds_bucket{cluster=~"$cluster", instance=~"$node", hop="proxy_to_peer"}[$__rate_interval])))`},
		"Steering lease remaining": {`skewgate_steering_lease_remaining_seconds{`},
		"Forward errors by kind":   {`sum by (instance, server, kind) (rate(skewgate_forward_errors_total{`},
		"Build":                    {`skewgate_build_info{`},
	}
	for _, hop := range []string{"client_to_proxy", "proxy_to_local", "proxy_to_peer"} {
		want["TCP handshake: "+hop] = []string{`sum by (le) (rate(skewgate_tcp_handshake_seconds_bucket{cluster=~"$cluster", instance=~"$node", hop="` + hop + `"}[$__rate_interval]))`}
		want["TCP min RTT: "+hop] = []string{`sum by (le) (rate(skewgate_tcp_min_rtt_seconds_bucket{cluster=~"$cluster", instance=~"$node", hop="` + hop + `"}[$__rate_interval]))`}
		want["TCP smoothed RTT (open): "+hop] = []string{`sum by (le) (rate(skewgate_tcp_srtt_seconds_bucket{cluster=~"$cluster", instance=~"$node", hop="` + hop + `"}[$__rate_interval]))`}
	}
	byPanel := map[string][]string{}
	for _, q := range queries(t) {
		byPanel[q.Panel] = append(byPanel[q.Panel], q.Expr)
	}
	for panel, fragments := range want {
		exprs, ok := byPanel[panel]
		if !ok {
			t.Errorf("no panel %q", panel)
			continue
		}
		for _, f := range fragments {
			if !strings.Contains(strings.Join(exprs, "\n"), f) {
				t.Errorf("panel %q: no query contains %s; queries:\n%s", panel, f, strings.Join(exprs, "\n"))
			}
		}
	}
	for panel := range byPanel {
		if _, ok := want[panel]; !ok {
			t.Errorf("panel %q is not pinned here: add what it must show", panel)
		}
	}
}

// TestTopRowAnswers keeps, in the first row, the panels that answer "is
// skewgate helping, hurting, or idle, and why" during an upgrade (issue
// 44): the operator reads them on one screen, without scrolling.
func TestTopRowAnswers(t *testing.T) {
	d, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"Window", "Window since and until", "Steering: mode and state", // idle, and why
		"Requests routed to peers (false 404s prevented)",              // helping
		"skewgate's own 429s and 503s", "Rollback grace: end per type", // hurting, or holding on purpose
		"Hand-over and hand-back", "Direct connections in a window", "Held lookups (the hold)", "Shedding",
	}
	var got []string
	rows := 0
	for _, p := range d.Panels {
		if p.RowPanel != nil {
			if rows++; rows > 1 {
				break
			}
			continue
		}
		got = append(got, deref(p.Panel.Title))
		// One screen: 24 grid units (720 px at 30 px a unit) under the
		// row's title.
		if pos := p.Panel.GridPos; pos == nil || pos.Y+pos.H > 1+24 {
			t.Errorf("%s at %+v: below the first screen", deref(p.Panel.Title), pos)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("the top row holds %q, want %q", got, want)
	}
}

var placeholder = regexp.MustCompile(`\$\{?\w+`)

// TestQueriesPlaceholders keeps the placeholders to those Query documents,
// which a test against Prometheus replaces, and every selector on $cluster
// and $node.
func TestQueriesPlaceholders(t *testing.T) {
	allowed := map[string]bool{"$cluster": true, "$node": true, "$server": true, "$__rate_interval": true}
	selector := regexp.MustCompile(`\bskewgate_\w+(\{[^}]*\})?`)
	for _, q := range queries(t) {
		for _, p := range placeholder.FindAllString(q.Expr, -1) {
			if !allowed[p] {
				t.Errorf("panel %q query %s: placeholder %s is none of %v", q.Panel, q.RefID, p, allowed)
			}
		}
		for _, m := range selector.FindAllStringSubmatch(q.Expr, -1) {
			if !strings.Contains(m[1], onNode) {
				t.Errorf("panel %q query %s: %s ignores the node variable", q.Panel, q.RefID, m[0])
			}
		}
	}
}

func TestVariables(t *testing.T) {
	d, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"cluster": "label_values(skewgate_build_info, cluster)",
		"node":    `label_values(skewgate_build_info{cluster=~"$cluster"}, instance)`,
		"server":  `label_values(skewgate_server_healthy{cluster=~"$cluster"}, server)`,
	}
	for _, v := range d.Templating.List {
		query, ok := want[v.Name]
		if !ok {
			continue
		}
		delete(want, v.Name)
		if v.Query == nil || v.Query.String == nil || *v.Query.String != query {
			t.Errorf("variable %s: query %+v, want %s", v.Name, v.Query, query)
		}
		if v.AllValue == nil || *v.AllValue != ".*" || v.IncludeAll == nil || !*v.IncludeAll {
			t.Errorf("variable %s: All must be offered and match any value", v.Name)
		}
	}
	for name := range want {
		t.Errorf("no variable %s", name)
	}
}

// TestLayout checks what Grafana would quietly rearrange or refuse:
// overlapping or overflowing panels, repeated ids, queries without refId.
func TestLayout(t *testing.T) {
	d, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	type cell struct{ x, y uint32 }
	taken := map[cell]string{}
	ids := map[uint32]bool{}
	for _, p := range d.Panels {
		var id uint32
		var pos *sdk.GridPos
		var title string
		switch {
		case p.RowPanel != nil:
			id, pos, title = p.RowPanel.Id, p.RowPanel.GridPos, "row "+deref(p.RowPanel.Title)
		case p.Panel != nil:
			id, pos, title = deref(p.Panel.Id), p.Panel.GridPos, deref(p.Panel.Title)
			refIDs := map[string]bool{}
			for i, target := range p.Panel.Targets {
				q, _ := target.(prometheus.Dataquery)
				ref := deref(q.RefId)
				if ref == "" || refIDs[ref] {
					t.Errorf("%s: query %d has refId %q, empty or repeated", title, i, ref)
				}
				refIDs[ref] = true
			}
		}
		if id == 0 || ids[id] {
			t.Errorf("%s: id %d, zero or repeated", title, id)
		}
		ids[id] = true
		if pos == nil || pos.W == 0 || pos.H == 0 || pos.X+pos.W > 24 {
			t.Errorf("%s: grid position %+v is empty or past 24 columns", title, pos)
			continue
		}
		for x := pos.X; x < pos.X+pos.W; x++ {
			for y := pos.Y; y < pos.Y+pos.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Fatalf("%s overlaps %s at %d,%d", title, other, x, y)
				}
				taken[cell{x, y}] = title
			}
		}
	}
}

func TestJSONIsDeterministic(t *testing.T) {
	a, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		b, err := JSON()
		if err != nil {
			t.Fatal(err)
		}
		if string(a) != string(b) {
			t.Fatalf("run %d wrote different JSON: the committed file would never be current", i)
		}
	}
	var v map[string]any
	if err := json.Unmarshal(a, &v); err != nil {
		t.Fatal(err)
	}
	if v["uid"] != UID {
		t.Errorf("uid %v, want %s", v["uid"], UID)
	}
}
