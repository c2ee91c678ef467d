// Command skewlab builds and runs the lab: a real mixed-version Kubernetes
// control plane on one machine, made of network namespaces on a bridge.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "skewlab:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "skewlab",
		Short:         "A real mixed-version kube-apiserver plane in network namespaces",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newBuildCmd(), newUpCmd(), newDownCmd(), newDrillCmd(), newImageCmd(), newDeployCmd(), newReleaseCmd())
	return root
}
