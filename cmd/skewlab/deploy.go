package main

import (
	"github.com/spf13/cobra"

	"github.com/skewgate/skewgate/deploy/kubernetes"
	"github.com/skewgate/skewgate/lab"
)

func newDeployCmd() *cobra.Command {
	dir, cache := lab.DefaultDir(), lab.DefaultCacheDir()
	base, tag, repo := "deploy/kubernetes", "", kubernetes.DefaultRepository
	cmd := &cobra.Command{
		Use:   "deploy",
		Short: "kubectl apply -k a kustomize base with skewgate's image tag set, on a kubelet lab (make lab-deploy)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := lab.Open(cmd.Context(), dir, cache)
			if err != nil {
				return err
			}
			out, err := p.ApplyKustomize(cmd.Context(), base, repo, tag)
			cmd.Print(out)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", dir, "lab state directory ($SKEWGATE_LAB_DIR)")
	f.StringVar(&cache, "cache", cache, "binary cache ($SKEWGATE_LAB_CACHE)")
	f.StringVar(&base, "base", base, "kustomize directory to apply")
	f.StringVar(&tag, "tag", tag, "skewgate image tag (make image's VERSION)")
	f.StringVar(&repo, "repository", repo, "skewgate image repository (make image's REPOSITORY)")
	cmd.MarkFlagRequired("tag")
	return cmd
}
