package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/skewgate/skewgate/lab"
)

func newBuildCmd() *cobra.Command {
	cache := lab.DefaultCacheDir()
	versions := []string{lab.OldVersion, lab.NewVersion}
	var kubelet, kubeadm, helm, cosign bool
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build the kube-apiservers and the etcd each one's kubeadm deploys into the lab cache (reused when present)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := lab.EnsureBinaries(cmd.Context(), cache, versions, os.Stdout); err != nil {
				return err
			}
			if kubelet {
				if _, err := lab.EnsureKubeletBinaries(cmd.Context(), cache, versions, os.Stdout); err != nil {
					return err
				}
			}
			if kubeadm {
				if _, err := lab.EnsureKubeadmBinaries(cmd.Context(), cache, versions, os.Stdout); err != nil {
					return err
				}
			}
			if helm {
				if _, err := lab.EnsureHelm(cmd.Context(), cache, os.Stdout); err != nil {
					return err
				}
			}
			if cosign {
				_, err := lab.EnsureCosign(cmd.Context(), cache, os.Stdout)
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&cache, "cache", cache, "directory for the built binaries ($SKEWGATE_LAB_CACHE)")
	cmd.Flags().StringSliceVar(&versions, "versions", versions, "kube-apiserver versions to build, each with the etcd its kubeadm deploys; a version whose module needs a newer Go builds with GOTOOLCHAIN="+lab.NewerGoToolchain)
	cmd.Flags().BoolVar(&kubeadm, "kubeadm", false, "also build kubeadm, kube-controller-manager, kube-scheduler and a kubelet per version, and kubectl "+lab.KubectlVersion)
	cmd.Flags().BoolVar(&kubelet, "kubelet", false, "also build a kubelet per version, kube-controller-manager and kube-scheduler at the oldest, and kubectl "+lab.KubectlVersion)
	cmd.Flags().BoolVar(&helm, "helm", false, "also build helm "+lab.HelmVersion+" (deploy/helm's lint and render)")
	cmd.Flags().BoolVar(&cosign, "cosign", false, "also build cosign "+lab.CosignVersion+" (make release's signature, checked as operators check it)")
	return cmd
}
