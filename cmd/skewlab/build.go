package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/skewgate/skewgate/lab"
)

func newBuildCmd() *cobra.Command {
	cache := lab.DefaultCacheDir()
	versions := []string{lab.OldVersion, lab.NewVersion}
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build etcd and the kube-apiservers into the lab cache (reused when present)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := lab.EnsureBinaries(cmd.Context(), cache, versions, os.Stdout)
			return err
		},
	}
	cmd.Flags().StringVar(&cache, "cache", cache, "directory for the built binaries ($SKEWGATE_LAB_CACHE)")
	cmd.Flags().StringSliceVar(&versions, "versions", versions, "kube-apiserver versions to build")
	return cmd
}
