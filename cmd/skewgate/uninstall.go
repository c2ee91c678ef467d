package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/skewgate/skewgate/agent"
)

func newUninstallCmd() *cobra.Command {
	var pinPath, stateFile string
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Detach steering and connection stats and remove every pin, the state file and the hand-over socket",
		Long: `uninstall removes skewgate from this node's kernel: it detaches the
sk_lookup and sock_ops links (even while an agent still holds them open), removes
every pin under --pin-path and the directory. New connections reach the
apiserver's own socket at once; established ones stay up. With --state-file it
also removes that file, an unfinished write of it and the hand-over socket beside
it (<state file without extension>.handover.sock). Run it after the agent is gone
(DaemonSet deleted), as root on the host or as a one-shot Job (kubectl skewgate
uninstall starts one per control-plane node). Running it again prints "nothing
installed" and succeeds.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return uninstall(c.OutOrStdout(), pinPath, stateFile) },
	}
	cmd.Flags().StringVar(&pinPath, "pin-path", "/sys/fs/bpf/skewgate", "directory of the agent's BPF pins")
	cmd.Flags().StringVar(&stateFile, "state-file", "", "the agent's --state-file, to remove with its hand-over socket (none when empty)")
	return cmd
}

func uninstall(w io.Writer, pinPath, stateFile string) error {
	err := uninstallPins(w, pinPath)
	if stateFile != "" {
		err = errors.Join(err, removeState(w, stateFile))
	}
	return err
}

func uninstallPins(w io.Writer, pinPath string) error {
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

// removeState removes the state file, what an interrupted write left of it
// (membership's writeAtomic: .<name>.*) and the hand-over socket. The
// directory stays: in a Job it is the hostPath's mount point.
func removeState(w io.Writer, stateFile string) error {
	partial, err := filepath.Glob(filepath.Join(filepath.Dir(stateFile), "."+filepath.Base(stateFile)+".*"))
	if err != nil {
		return fmt.Errorf("state file %s: %w", stateFile, err)
	}
	var errs []error
	for _, p := range append([]string{stateFile, handOverSocketOf(stateFile)}, partial...) {
		switch err := os.Remove(p); {
		case err == nil:
			fmt.Fprintf(w, "removed %s\n", p)
		case errors.Is(err, fs.ErrNotExist):
			fmt.Fprintf(w, "no %s\n", p)
		default:
			errs = append(errs, fmt.Errorf("remove %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
