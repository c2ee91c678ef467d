package main

import "github.com/spf13/cobra"

// subcommands lists every subcommand; each lives in a file of its own.
func subcommands() []*cobra.Command {
	return []*cobra.Command{
		newRunCmd(),
		newRoutesCmd(),
		newExplainCmd(),
		newSteerCmd(),
	}
}
