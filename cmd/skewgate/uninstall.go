package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/skewgate/skewgate/agent"
)

func newUninstallCmd() *cobra.Command {
	var pinPath string
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Detach steering and connection stats and remove every pin",
		Long: `uninstall removes skewgate from this node's kernel: it detaches the
sk_lookup and sock_ops links (even while an agent still holds them open), removes
every pin under --pin-path and the directory. New connections reach the
apiserver's own socket at once; established ones stay up. Run it after the
agent is gone (DaemonSet deleted), as root on the host or as a one-shot Job.
Running it again prints "nothing installed" and succeeds.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return uninstall(c.OutOrStdout(), pinPath) },
	}
	cmd.Flags().StringVar(&pinPath, "pin-path", "/sys/fs/bpf/skewgate", "directory of the agent's BPF pins")
	return cmd
}

func uninstall(w io.Writer, pinPath string) error {
	r, err := agent.Uninstall(pinPath)
	if errors.Is(err, agent.ErrNotInstalled) {
		fmt.Fprintf(w, "nothing installed at %s\n", pinPath)
		return nil
	}
	for _, l := range r.Links {
		fmt.Fprintf(w, "detached %s\n", l)
	}
	for _, p := range r.Pins {
		fmt.Fprintf(w, "removed pin %s\n", p)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "removed %s\n", pinPath)
	return nil
}
