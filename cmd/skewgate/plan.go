package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/skewgate/skewgate/proxy/plan"
)

// planFlags are what rollback-plan and preflight share: the operator's
// kubeconfig, where each node's skewgate listens, Prometheus, the output.
type planFlags struct {
	kubeconfig, output, prometheus string
	admins                         []string
	adminPort                      int
}

func (o *planFlags) add(f *pflag.FlagSet) {
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "the operator's kubeconfig (default: $KUBECONFIG, ~/.kube/config); its user also reads each node's secure admin listener, which needs get on /debug/routes and /metrics")
	f.StringSliceVar(&o.admins, "admin", nil, "skewgate admin listeners to read (default: https://<each apiserver's advertise address>:--admin-port, from default/kubernetes)")
	f.IntVar(&o.adminPort, "admin-port", plan.DefaultAdminPort, "the secure admin listener's port on every control-plane node")
	f.StringVar(&o.prometheus, "prometheus", "", "Prometheus base URL (e.g. http://prometheus.monitoring:9090) to ask for skewgate's series")
	f.StringVarP(&o.output, "output", "o", "table", "table or json")
}

func (o *planFlags) cluster(cmd *cobra.Command) (*plan.Cluster, error) {
	if o.output != "table" && o.output != "json" {
		return nil, usageError{cmd.CommandPath(), fmt.Errorf("--output %q: want table or json", o.output)}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return plan.Connect(rc)
}

func writeJSON(out io.Writer, v any) error {
	e := json.NewEncoder(out)
	e.SetIndent("", "  ")
	return e.Encode(v)
}

func newRollbackPlanCmd() *cobra.Command {
	var o planFlags
	var to string
	cmd := &cobra.Command{
		Use:   "rollback-plan --to VERSION",
		Short: "Show what a rollback of the apiservers to VERSION takes away: types, their objects and namespaces, their clients",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return usageError{cmd.CommandPath(), fmt.Errorf("--to is required: the version the apiservers roll back to")}
			}
			if err := plan.CheckVersion(to); err != nil {
				return usageError{cmd.CommandPath(), fmt.Errorf("--to: %w", err)}
			}
			c, err := o.cluster(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			warn := func(what string, errs ...error) {
				for _, e := range errs {
					if e != nil {
						fmt.Fprintln(cmd.ErrOrStderr(), what+":", e)
					}
				}
			}
			// What each version served is what the nodes' skewgates read
			// from the servers, not a table compiled into this binary.
			adv, err := plan.AdvertiseAddresses(ctx, c)
			warn("nodes", err)
			nodes := plan.Nodes(adv, o.admins, o.adminPort)
			releases, errs := plan.ReadReleases(ctx, c, nodes)
			warn("releases", errs...)
			target, err := plan.TargetOf(to, releases)
			if err != nil {
				return fmt.Errorf("--to: %w", err)
			}
			var usage plan.Usage
			if o.prometheus != "" {
				if usage, err = plan.PrometheusUsage(ctx, nil, o.prometheus); err != nil {
					warn("requests", err)
				}
			}
			if usage == nil && len(nodes) > 0 {
				usage, errs = plan.ScrapeUsage(ctx, c, nodes)
				warn("requests", errs...)
			}
			p, err := plan.Rollback(ctx, c, target, usage)
			if err != nil {
				return err
			}
			if o.output == "json" {
				return writeJSON(cmd.OutOrStdout(), p)
			}
			p.WriteTable(cmd.OutOrStdout())
			return nil
		},
	}
	o.add(cmd.Flags())
	cmd.Flags().StringVar(&to, "to", "", "the version the apiservers roll back to, e.g. v1.35.4 or v1.35: any version the cluster's skewgates saw a kube-apiserver run (their /debug/routes releases)")
	return cmd
}

func newPreflightCmd() *cobra.Command {
	var o planFlags
	cmd := &cobra.Command{
		Use:   "preflight",
		Short: "Check every control-plane node's skewgate before kubeadm upgrade plan: steering, targets, state file, mode, monitoring (exit 1 on a failed check)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.cluster(cmd)
			if err != nil {
				return err
			}
			checks, err := plan.Preflight(cmd.Context(), c, plan.PreflightOptions{AdminURLs: o.admins, AdminPort: o.adminPort, Prometheus: o.prometheus})
			if err != nil {
				return err
			}
			if o.output == "json" {
				err = writeJSON(cmd.OutOrStdout(), checks)
			} else {
				plan.WriteChecks(cmd.OutOrStdout(), checks)
			}
			if err == nil && plan.Failed(checks) {
				err = fmt.Errorf("preflight failed: see the fail lines")
			}
			return err
		},
	}
	o.add(cmd.Flags())
	return cmd
}
