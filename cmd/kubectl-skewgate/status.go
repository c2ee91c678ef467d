package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/skewgate/skewgate/proxy/status"
)

func newStatusCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "One row per node: skewgate's version, mode, steering, skew window, rollback grace, targets, steered and direct connections, apiservers' health (the default)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runStatus(cmd.Context(), cmd.OutOrStdout(), o) },
	}
}

func runStatus(ctx context.Context, out io.Writer, o *options) error {
	targets, so, err := o.connect(ctx)
	if err != nil {
		return err
	}
	c := status.Gather(ctx, targets, so)
	if o.json() {
		if err := status.WriteJSON(out, c); err != nil {
			return err
		}
	} else {
		status.PrintStatus(out, c, time.Now())
	}
	if err := nodesFailed("status", c.Failed()); err != nil {
		return err
	}
	if d := c.Degraded(); len(d) > 0 {
		return exitError{exitDegraded, fmt.Errorf("degraded: %v", d)}
	}
	return nil
}
