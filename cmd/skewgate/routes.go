package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/membership"
)

const defaultAdmin = "http://127.0.0.1:16444"

// adminHelp says where the admin listener is when it is not on loopback.
const adminHelp = "skewgate's admin listener: --metrics-bind-address (http://, no authentication), or --secure-admin-address (https://<node-ip>:16444 in deploy/kubernetes; with --kubeconfig)"

// kubeconfigHelp says whose credentials reach the secure admin listener.
const kubeconfigHelp = "kubeconfig whose user (a token or client certificate) the secure admin listener authenticates, and whose CA verifies its certificate (the apiserver's, verified by its tls-server-name or \"kubernetes\"); RBAC must allow get on /debug/routes and /debug/explain"

func newRoutesCmd() *cobra.Command {
	adminURL, kubeconfig, all := defaultAdmin, "", false
	cmd := &cobra.Command{
		Use:   "routes",
		Short: "Show each apiserver's health and capabilities, and the resources routed away from the local server",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var v admin.RoutesView
			if err := getJSON(cmd.Context(), adminURL, kubeconfig, "/debug/routes", &v); err != nil {
				return err
			}
			printRoutes(cmd.OutOrStdout(), v, all)
			return nil
		},
	}
	cmd.Flags().StringVar(&adminURL, "admin", adminURL, adminHelp)
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", kubeconfigHelp)
	cmd.Flags().BoolVar(&all, "all", false, "list locally answered resources too")
	return cmd
}

func printRoutes(out io.Writer, v admin.RoutesView, all bool) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tLOCAL\tSTATE\tLATENCY\tDISCOVERY AGE\tGROUP/VERSIONS\tLAST ERROR")
	for _, s := range v.Servers {
		age := orDash(s.DiscoveryAge)
		if s.DiscoveryRestored {
			age += " (restored)"
		}
		fmt.Fprintf(tw, "%s\t%t\t%s\t%s\t%s\t%d\t%s\n", s.ID, s.Local, state(s.Status), s.Latency.Round(10*time.Microsecond),
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
	for k, e := range v.Extra {
		data, _ := json.Marshal(e)
		fmt.Fprintf(out, "%s: %s\n", k, data)
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
	fmt.Fprintln(tw, "IN ROLLBACK GRACE (503)\tUNTIL\tLEFT\tSERVED BY")
	for _, g := range v.Grace {
		var by []string
		for i, id := range g.Servers {
			by = append(by, id+" ("+g.Why[i]+")")
		}
		left := time.Until(g.Until).Round(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", gvrString(g.GVR), g.Until.UTC().Format(time.RFC3339), max(left, 0), strings.Join(by, ", "))
	}
	tw.Flush()
}

func gvrString(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Version + "/" + gvr.Resource
	}
	return gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newExplainCmd() *cobra.Command {
	adminURL, kubeconfig := defaultAdmin, ""
	cmd := &cobra.Command{
		Use:   "explain VERB PATH",
		Short: "Explain where skewgate sends a request, and why (e.g. explain list /apis/scheduling.k8s.io/v1alpha2/workloads)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var e admin.Explanation
			q := url.Values{"verb": {args[0]}, "path": {args[1]}}
			if err := getJSON(cmd.Context(), adminURL, kubeconfig, "/debug/explain?"+q.Encode(), &e); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s %s\n  kind:    %s, verb %s", e.Method, e.Path, e.Kind, e.Verb)
			if e.Resource != "" {
				fmt.Fprintf(out, ", resource %s", e.Resource)
				if e.Subresource != "" {
					fmt.Fprintf(out, "/%s", e.Subresource)
				}
			}
			fmt.Fprintf(out, "\n  route:   %s (rule %s) → %s\n  because: %s\n", e.Route, e.Rule, strings.Join(e.Servers, ", "), e.Reason)
			// Whether such a request reaches skewgate at all on a new
			// connection to the node's address.
			if st, ok := e.Steering.(map[string]any); ok {
				fmt.Fprintf(out, "  steering: %v (mode %v; window %v)\n", st["steering"], st["mode"], st["window"])
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&adminURL, "admin", adminURL, adminHelp)
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", kubeconfigHelp)
	return cmd
}

// adminClient is a plain client, or with kubeconfig one that presents its
// user's credentials and verifies the admin listener by its CA: the
// listener serves the apiserver's certificate, which kubeadm issues for
// the name "kubernetes" (not 127.0.0.1).
func adminClient(kubeconfig string) (*http.Client, error) {
	if kubeconfig == "" {
		return http.DefaultClient, nil
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	if rc.TLSClientConfig.ServerName == "" {
		rc.TLSClientConfig.ServerName = "kubernetes"
	}
	return rest.HTTPClientFor(rc)
}

// getJSON reads an admin endpoint; a non-200 answer is an error with its
// body, so the operator sees what the agent said.
// getJSON reads path from the admin listener at admin, a base URL such as
// http://127.0.0.1:16444.
func getJSON(ctx context.Context, admin, kubeconfig, path string, v any) error {
	base, err := url.Parse(admin)
	if err != nil || base.Host == "" || (base.Scheme != "http" && base.Scheme != "https") || strings.Trim(base.Path, "/") != "" {
		return fmt.Errorf("--admin %q: want the admin listener's base URL, e.g. http://127.0.0.1:16444", admin)
	}
	u := strings.TrimSuffix(admin, "/") + path
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	c, err := adminClient(kubeconfig)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("skewgate admin listener: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, v)
}

// state is a server's health for people: a departed server says since when.
func state(st membership.Status) string {
	switch {
	case st.Departed != nil:
		return "departed " + time.Since(*st.Departed).Round(time.Second).String() + " ago"
	case st.Healthy:
		return "healthy"
	}
	return "unhealthy"
}
