package status

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/membership"
)

// NodeRoutes is one node's /debug/routes, or why it is missing.
type NodeRoutes struct {
	Node   string            `json:"node"`
	Pod    string            `json:"pod"`
	URL    string            `json:"url,omitempty"`
	Error  string            `json:"error,omitempty"`
	Routes *admin.RoutesView `json:"routes,omitempty"`
}

// NodeExplanation is one node's /debug/explain, or why it is missing.
type NodeExplanation struct {
	Node        string             `json:"node"`
	Pod         string             `json:"pod"`
	URL         string             `json:"url,omitempty"`
	Error       string             `json:"error,omitempty"`
	Explanation *admin.Explanation `json:"explanation,omitempty"`
}

// Routes asks every target for its routes.
func Routes(ctx context.Context, targets []Target, o Options) []NodeRoutes {
	return each(ctx, targets, o, func(ctx context.Context, c *http.Client, t Target) NodeRoutes {
		r := NodeRoutes{Node: t.Node, Pod: t.Pod, URL: t.URL}
		var v admin.RoutesView
		if err := Get(ctx, c, t.URL+"/debug/routes", &v); err != nil {
			r.Error = err.Error()
		} else {
			r.Routes = &v
		}
		return r
	}, func(t Target, err error) NodeRoutes {
		return NodeRoutes{Node: t.Node, Pod: t.Pod, URL: t.URL, Error: err.Error()}
	})
}

// ExplainPath is the /debug/explain request for verb and path.
func ExplainPath(verb, path string) string {
	return "/debug/explain?" + url.Values{"verb": {verb}, "path": {path}}.Encode()
}

// Explain asks every target where it sends verb on path, and why.
func Explain(ctx context.Context, targets []Target, o Options, verb, path string) []NodeExplanation {
	return each(ctx, targets, o, func(ctx context.Context, c *http.Client, t Target) NodeExplanation {
		r := NodeExplanation{Node: t.Node, Pod: t.Pod, URL: t.URL}
		var e admin.Explanation
		if err := Get(ctx, c, t.URL+ExplainPath(verb, path), &e); err != nil {
			r.Error = err.Error()
		} else {
			r.Explanation = &e
		}
		return r
	}, func(t Target, err error) NodeExplanation {
		return NodeExplanation{Node: t.Node, Pod: t.Pod, URL: t.URL, Error: err.Error()}
	})
}

// PrintRoutes writes one node's /debug/routes: every apiserver's health
// and discovery, the resources not answered locally (all with all), the
// types the rollback grace holds, and the agent's state.
func PrintRoutes(out io.Writer, v admin.RoutesView, all bool) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tLOCAL\tSTATE\tLATENCY\tDISCOVERY AGE\tGROUP/VERSIONS\tLAST ERROR")
	for _, s := range v.Servers {
		age := orDash(s.DiscoveryAge)
		if s.DiscoveryRestored {
			age += " (restored)"
		}
		fmt.Fprintf(tw, "%s\t%t\t%s\t%s\t%s\t%d\t%s\n", s.ID, s.Local, ServerState(s.Status), s.Latency.Round(10*time.Microsecond),
			age, len(s.GroupVersions), orDash(s.LastError+s.DiscoveryError))
	}
	tw.Flush()
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tROUTE\tRULE\tSERVERS")
	local := 0
	for _, r := range v.Routes {
		if r.Route == "local" && !all {
			local++
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Resource, r.Route, r.Rule, strings.Join(r.Servers, ","))
	}
	tw.Flush()
	if local > 0 {
		fmt.Fprintf(out, "(%d resources answered by the local server; --all lists them)\n", local)
	}
	printGrace(out, v)
	printBuiltIn(out, v)
	if st := v.Steering; st != nil {
		fmt.Fprintf(out, "\nsteering: %s (mode %s; targets %s)\n", st.State, orDash(st.Mode), orDash(strings.Join(st.Targets, ", ")))
		if st.OffWaits != "" {
			fmt.Fprintf(out, "steering off waits: %s\n", st.OffWaits)
		}
	}
}

// printBuiltIn says where the built-in groups come from and which
// releases skewgate recorded (what rollback-plan can compare).
func printBuiltIn(out io.Writer, v admin.RoutesView) {
	if v.BuiltIn == nil {
		return
	}
	fmt.Fprintf(out, "\nbuilt-in groups: %d from %s", len(v.BuiltIn.Groups), v.BuiltIn.Source)
	if v.BuiltIn.Source == membership.BuiltInCompiled {
		fmt.Fprint(out, " (the cluster's APIServices not read: a group only a newer release adds does not count)")
	}
	fmt.Fprintln(out)
	for _, r := range v.Releases {
		fmt.Fprintf(out, "release %s: %d built-in types, read from %s at %s\n", r.Version, len(r.Types), r.Server, r.Read.UTC().Format(time.RFC3339))
	}
}

// printGrace lists the types the rollback grace holds: the 503s an
// operator may end (kube-system/skewgate rollback-grace-until).
func printGrace(out io.Writer, v admin.RoutesView) {
	if v.GraceOverride != nil {
		fmt.Fprintf(out, "\nrollback grace override (kube-system/skewgate rollback-grace-until): %s\n", v.GraceOverride.UTC().Format(time.RFC3339))
	}
	if len(v.Grace) == 0 {
		fmt.Fprintln(out, "\nno type in rollback grace")
		return
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IN ROLLBACK GRACE (503)\tUNTIL\tLEFT\tIN DISCOVERY UNTIL\tSERVED BY")
	for _, g := range v.Grace {
		var by []string
		for i, id := range g.Servers {
			by = append(by, id+" ("+g.Why[i]+")")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", gvrString(g.GVR), g.Until.UTC().Format(time.RFC3339), left(g.Until, time.Now()), g.Listed.UTC().Format(time.RFC3339), strings.Join(by, ", "))
	}
	tw.Flush()
}

// PrintExplanation writes one /debug/explain answer for people.
func PrintExplanation(out io.Writer, e admin.Explanation) {
	fmt.Fprintf(out, "%s %s\n  kind:    %s, verb %s", e.Method, e.Path, e.Kind, e.Verb)
	if e.Resource != "" {
		fmt.Fprintf(out, ", resource %s", e.Resource)
		if e.Subresource != "" {
			fmt.Fprintf(out, "/%s", e.Subresource)
		}
	}
	fmt.Fprintf(out, "\n  route:   %s (rule %s) → %s\n  because: %s\n", e.Route, e.Rule, strings.Join(e.Servers, ", "), e.Reason)
	// Whether such a request reaches skewgate at all on a new connection
	// to the node's address.
	if st := e.Steering; st != nil {
		fmt.Fprintf(out, "  steering: %s (mode %s)\n", st.State, orDash(st.Mode))
	}
}

// ServerState is a server's health for people: a departed server says
// since when.
func ServerState(st membership.Status) string {
	if st.Departed != nil {
		return "departed " + time.Since(*st.Departed).Round(time.Second).String() + " ago"
	}
	return serverState(st)
}

func gvrString(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Version + "/" + gvr.Resource
	}
	return gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}
