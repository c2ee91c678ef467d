package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/skewgate/skewgate/proxy/status"
)

func newRoutesCmd(o *options) *cobra.Command {
	all := false
	cmd := &cobra.Command{
		Use:   "routes",
		Short: "Every node's `skewgate routes`: each apiserver's health and discovery, the resources routed away from the local server, the rollback grace",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			targets, so, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			rs := status.Routes(cmd.Context(), targets, so)
			out := cmd.OutOrStdout()
			if o.json() {
				if err := status.WriteJSON(out, rs); err != nil {
					return err
				}
			}
			var failed []string
			for i, r := range rs {
				if r.Error != "" {
					failed = append(failed, r.Node)
				}
				if o.json() {
					continue
				}
				if i > 0 {
					fmt.Fprintln(out)
				}
				fmt.Fprintf(out, "== %s (%s, %s)\n", r.Node, r.Pod, r.URL)
				if r.Error != "" {
					fmt.Fprintf(out, "error: %s\n", r.Error)
					continue
				}
				status.PrintRoutes(out, *r.Routes, all)
			}
			return nodesFailed("routes", failed)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "list locally answered resources too")
	return cmd
}
