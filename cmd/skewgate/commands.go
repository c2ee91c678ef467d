package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "skewgate",
		Short:         "Route kube-apiserver requests to a peer that serves them during version skew",
		Version:       buildVersion().Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate(versionText())
	root.AddCommand(newRunCmd(), newRoutesCmd(), newExplainCmd(), newSteerCmd(), newUninstallCmd(), newManifestCmd(), newVersionCmd(), newRollbackPlanCmd(), newPreflightCmd())
	strict(root)
	return root
}

// usageError is a wrong command line, as opposed to a command that failed.
type usageError struct {
	cmd string
	err error
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// strict makes every command in the tree refuse what it does not know: a
// parent without a subcommand, an unknown subcommand ("steer of"), wrong
// arguments or flags are usage errors (exit status 2), never help and
// success.
func strict(c *cobra.Command) {
	c.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{c.CommandPath(), err} })
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{c.CommandPath(), fmt.Errorf("%s needs a subcommand: %s", c.CommandPath(), subcommandNames(c))}
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
			if s := c.SuggestionsFor(args[0]); len(s) > 0 {
				msg += fmt.Sprintf("; did you mean %q?", s[0])
			}
			return usageError{c.CommandPath(), fmt.Errorf("%s", msg)}
		}
	} else if c.Args != nil {
		check := c.Args
		c.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return usageError{c.CommandPath(), err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		strict(sub)
	}
}

func subcommandNames(c *cobra.Command) string {
	var names []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			names = append(names, s.Name())
		}
	}
	return strings.Join(names, ", ")
}
