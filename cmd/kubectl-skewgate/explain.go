package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/skewgate/skewgate/proxy/status"
)

func newExplainCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "explain VERB PATH",
		Short: "Where each node's skewgate sends a request, and why (e.g. explain list /apis/scheduling.k8s.io/v1alpha2/workloads)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			targets, so, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			es := status.Explain(cmd.Context(), targets, so, args[0], args[1])
			out := cmd.OutOrStdout()
			if o.json() {
				if err := status.WriteJSON(out, es); err != nil {
					return err
				}
			}
			var failed []string
			for _, e := range es {
				if e.Error != "" {
					failed = append(failed, e.Node)
				}
				if o.json() {
					continue
				}
				fmt.Fprintf(out, "== %s: ", e.Node)
				if e.Error != "" {
					fmt.Fprintf(out, "error: %s\n", e.Error)
					continue
				}
				status.PrintExplanation(out, *e.Explanation)
			}
			return nodesFailed("explain", failed)
		},
	}
}
