package main

import (
	"crypto/ecdsa"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/skewgate/skewgate/deploy/kubernetes"
	"github.com/skewgate/skewgate/deploy/release"
	"github.com/skewgate/skewgate/lab"
)

// releaseKeyEnv holds the release key's PEM when no --key-file is given.
const releaseKeyEnv = "SKEWGATE_RELEASE_KEY"

func newReleaseCmd() *cobra.Command {
	o := release.Options{Root: ".", Repository: kubernetes.DefaultRepository,
		BuilderID: "https://github.com/skewgate/skewgate/blob/main/docs/release.md#who-builds"}
	var keyFile, chartURL string
	var dryRun bool
	cache := lab.DefaultCacheDir()
	cmd := &cobra.Command{
		Use:   "release",
		Short: "Build a signed release of the clean tree at one commit into bin/release/<version> (make release; docs/release.md)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := release.CheckVersion(o.Version); err != nil {
				return err
			}
			key, err := releaseKey(keyFile, dryRun)
			if err != nil {
				return err
			}
			o.Key = key
			if o.Out == "" {
				o.Out = filepath.Join("bin", "release", o.Version+map[bool]string{true: "-dry-run"}[dryRun])
			}
			if o.ChartURL = chartURL; o.ChartURL == "" {
				o.ChartURL = "https://github.com/skewgate/skewgate/releases/download/" + o.Version
			}
			if o.Helm, err = lab.EnsureHelm(cmd.Context(), cache, os.Stderr); err != nil {
				return err
			}
			s, err := release.Build(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Printf("%s: %s, verified\n", o.Out, s.Ref())
			if dryRun {
				fmt.Println("dry run: signed with a throwaway key; not for publishing")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Version, "version", "", "the release, vX.Y.Z (required)")
	f.StringVar(&o.Repository, "repository", o.Repository, "where the image is published")
	f.StringVar(&keyFile, "key-file", "", "the release key (PEM, ECDSA P-256; default: $"+releaseKeyEnv+"; docs/release.md)")
	f.BoolVar(&dryRun, "dry-run", false, "sign with a throwaway key (CI)")
	f.StringVar(&o.Out, "out", "", "release directory (default bin/release/<version>)")
	f.StringVar(&chartURL, "chart-url", "", "where the chart is downloaded from (default: the GitHub release's assets)")
	f.StringVar(&o.BuilderID, "builder-id", o.BuilderID, "who builds: the provenance's builder.id")
	f.StringVar(&cache, "cache", cache, "where helm is cached ($SKEWGATE_LAB_CACHE)")
	cmd.AddCommand(newReleaseVerifyCmd())
	return cmd
}

// releaseKey reads the release key from keyFile or $SKEWGATE_RELEASE_KEY,
// or makes a throwaway one for a dry run.
func releaseKey(keyFile string, dryRun bool) (*ecdsa.PrivateKey, error) {
	if dryRun {
		if keyFile != "" || os.Getenv(releaseKeyEnv) != "" {
			return nil, errors.New("--dry-run signs with a throwaway key: give no release key")
		}
		return release.GenerateKey()
	}
	data := []byte(os.Getenv(releaseKeyEnv))
	if keyFile != "" {
		var err error
		if data, err = os.ReadFile(keyFile); err != nil {
			return nil, err
		}
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("no release key: --key-file (make release RELEASE_KEY=file) or $%s (docs/release.md); --dry-run signs with a throwaway key", releaseKeyEnv)
	}
	return release.ParsePrivateKey(data)
}

func newReleaseVerifyCmd() *cobra.Command {
	var dir, pub string
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check a release directory with the release's public key: checksums, signatures, provenance, the digest every manifest names",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := os.ReadFile(pub)
			if err != nil {
				return err
			}
			s, err := release.Verify(dir, key)
			if err != nil {
				return err
			}
			fmt.Printf("%s: %s and %s verify\n", dir, s.Ref(), s.Chart)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "release directory")
	cmd.Flags().StringVar(&pub, "key", "", "the release's public key (PEM), from where it is published, not from the directory")
	cmd.MarkFlagRequired("dir")
	cmd.MarkFlagRequired("key")
	return cmd
}
