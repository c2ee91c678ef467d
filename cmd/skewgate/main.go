// Command skewgate is the node agent that keeps clients from false 404s while
// kube-apiservers of different versions serve one cluster.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "skewgate:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "skewgate",
		Short:         "Route kube-apiserver requests to a peer that serves them during version skew",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(subcommands()...)
	return root
}
