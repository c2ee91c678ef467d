package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/status"
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
			status.PrintRoutes(cmd.OutOrStdout(), v, all)
			return nil
		},
	}
	cmd.Flags().StringVar(&adminURL, "admin", adminURL, adminHelp)
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", kubeconfigHelp)
	cmd.Flags().BoolVar(&all, "all", false, "list locally answered resources too")
	return cmd
}

func newExplainCmd() *cobra.Command {
	adminURL, kubeconfig := defaultAdmin, ""
	cmd := &cobra.Command{
		Use:   "explain VERB PATH",
		Short: "Explain where skewgate sends a request, and why (e.g. explain list /apis/scheduling.k8s.io/v1alpha2/workloads)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var e admin.Explanation
			if err := getJSON(cmd.Context(), adminURL, kubeconfig, status.ExplainPath(args[0], args[1]), &e); err != nil {
				return err
			}
			status.PrintExplanation(cmd.OutOrStdout(), e)
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

// getJSON reads path from the admin listener at admin, a base URL such as
// http://127.0.0.1:16444; a non-200 answer is an error with its body, so
// the operator sees what the agent said.
func getJSON(ctx context.Context, admin, kubeconfig, path string, v any) error {
	base, err := url.Parse(admin)
	if err != nil || base.Host == "" || (base.Scheme != "http" && base.Scheme != "https") || strings.Trim(base.Path, "/") != "" {
		return fmt.Errorf("--admin %q: want the admin listener's base URL, e.g. http://127.0.0.1:16444", admin)
	}
	c, err := adminClient(kubeconfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := status.Get(ctx, c, strings.TrimSuffix(admin, "/")+path, v); err != nil {
		return fmt.Errorf("skewgate admin listener: %w", err)
	}
	return nil
}
