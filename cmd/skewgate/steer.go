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
	var force bool
	cmd := &cobra.Command{
		Use:   "steer on|off|status",
		Short: "Switch connection steering into the proxy on or off, or show its state",
		Long: `steer works on the pinned BPF maps of a node agent, also when the agent is dead.

  off     new connections reach the apiserver's own socket from the next one on;
          established connections stay where they are. Persists across agent
          restarts until "steer on". Refused without --force while the agent
          holds a rollback grace (see docs/runbook.md, the eject step).
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
		offCmd(&pinPath, &force),
		&cobra.Command{
			Use:   "status",
			Short: "Show the steering state",
			Args:  cobra.NoArgs,
			RunE:  func(c *cobra.Command, _ []string) error { return steeringStatus(c.OutOrStdout(), pinPath) },
		},
	)
	return cmd
}

func offCmd(pinPath *string, force *bool) *cobra.Command {
	c := &cobra.Command{
		Use:   "off",
		Short: "Send new connections to the apiserver's own socket",
		Args:  cobra.NoArgs,
		RunE:  func(c *cobra.Command, _ []string) error { return turnOff(c.OutOrStdout(), *pinPath, *force) },
	}
	c.Flags().BoolVar(force, "force", false, "turn steering off even while a rollback grace holds a type (clients may then get the local apiserver's 404 for it)")
	return c
}

// turnOff is steer off: refused without force while the agent holds a
// rollback grace, with what to do instead.
func turnOff(w io.Writer, pinPath string, force bool) error {
	ctl, err := agent.OpenControl(pinPath)
	if err != nil {
		return err
	}
	defer ctl.Close()
	if err := ctl.TurnOff(force); err != nil {
		return fmt.Errorf("steering not turned off: %w. Off now would hand its clients to the local apiserver, which answers 404 for that type, and a garbage collector deletes what a 404 owner owned. "+
			"End the grace first (kubectl -n kube-system patch configmap skewgate --type merge -p '{\"data\":{\"rollback-grace-until\":\"<now, RFC 3339>\"}}'), "+
			"wait out its settle (`kubectl skewgate status` shows the grace), then turn steering off; or pass --force", err)
	}
	return printState(w, ctl)
}

func setSteering(w io.Writer, pinPath string, on bool) error {
	ctl, err := agent.OpenControl(pinPath)
	if err != nil {
		return err
	}
	defer ctl.Close()
	ctl.SetEnabled(on)
	return printState(w, ctl)
}

func printState(w io.Writer, ctl *agent.Control) error {
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
	fmt.Fprintf(w, "hold:      %s\n", max(st.HoldRemaining, 0))
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
