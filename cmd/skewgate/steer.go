package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/skewgate/skewgate/agent"
)

// newSteerCmd is the operator's kill switch. It works on the pins directly,
// so it works whether or not an agent runs.
func newSteerCmd() *cobra.Command {
	var pinPath string
	cmd := &cobra.Command{
		Use:   "steer on|off|status",
		Short: "Switch connection steering into the proxy on or off, or show its state",
		Long: `steer works on the pinned BPF maps of a node agent, also when the agent is dead.

  off     new connections reach the apiserver's own socket from the next one on;
          established connections stay where they are. Persists across agent
          restarts until "steer on".
  on      steering resumes for new connections once a live agent holds the
          lease and its listener is in the SOCKMAP.
  status  the kill switch, the lease, the listener and the lookup counters.`,
	}
	cmd.PersistentFlags().StringVar(&pinPath, "pin-path", "/sys/fs/bpf/skewgate", "directory of the agent's BPF pins")
	cmd.AddCommand(
		&cobra.Command{
			Use:   "on",
			Short: "Steer new connections into the proxy (while an agent holds the lease)",
			Args:  cobra.NoArgs,
			RunE:  func(c *cobra.Command, _ []string) error { return setSteering(c.OutOrStdout(), pinPath, true) },
		},
		&cobra.Command{
			Use:   "off",
			Short: "Send new connections to the apiserver's own socket",
			Args:  cobra.NoArgs,
			RunE:  func(c *cobra.Command, _ []string) error { return setSteering(c.OutOrStdout(), pinPath, false) },
		},
		&cobra.Command{
			Use:   "status",
			Short: "Show the steering state",
			Args:  cobra.NoArgs,
			RunE:  func(c *cobra.Command, _ []string) error { return steeringStatus(c.OutOrStdout(), pinPath) },
		},
	)
	return cmd
}

func setSteering(w io.Writer, pinPath string, on bool) error {
	ctl, err := agent.OpenControl(pinPath)
	if err != nil {
		return err
	}
	defer ctl.Close()
	ctl.SetEnabled(on)
	st, err := ctl.State()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "steering: %s\n", st)
	return nil
}

func steeringStatus(w io.Writer, pinPath string) error {
	ctl, err := agent.OpenControl(pinPath)
	if err != nil {
		return err
	}
	defer ctl.Close()
	st, err := ctl.State()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "steering:  %s\n", st)
	fmt.Fprintf(w, "enabled:   %t\n", st.Enabled)
	fmt.Fprintf(w, "lease:     %s\n", st.LeaseRemaining)
	fmt.Fprintf(w, "listener:  cookie %d\n", st.ListenerCookie)
	fmt.Fprintf(w, "targets:   %s\n", joinStrings(st.Targets))
	fmt.Fprintf(w, "exempt:    %s\n", joinStrings(st.Exempt))
	reasons := make([]string, 0, len(st.Lookups))
	for r := range st.Lookups {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	fmt.Fprintln(w, "lookups:")
	for _, r := range reasons {
		fmt.Fprintf(w, "  %-14s %d\n", r, st.Lookups[r])
	}
	return nil
}

// joinStrings prints a list, or "none".
func joinStrings[T fmt.Stringer](list []T) string {
	if len(list) == 0 {
		return "none"
	}
	out := make([]string, len(list))
	for i, v := range list {
		out[i] = v.String()
	}
	return strings.Join(out, " ")
}
