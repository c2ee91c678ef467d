package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/skewgate/skewgate/deploy/image"
)

func newImageCmd() *cobra.Command {
	var s image.Spec
	var created, repo, out string
	b := image.GoBinary{Dir: ".", Package: "./cmd/skewgate"}
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build skewgate's OCI image archive (static binary, no container daemon, reproducible)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := time.Parse(time.RFC3339, created)
			if err != nil {
				return fmt.Errorf("--created: %w", err)
			}
			s.Created = t
			b.Out = filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".bin")
			defer os.Remove(b.Out)
			img, err := image.Archive(cmd.Context(), b, s, repo+":"+s.Version, out)
			if err != nil {
				return err
			}
			sum, err := image.Summarize(img, out)
			if err != nil {
				return err
			}
			fmt.Printf("%s %s: %s\n", repo+":"+s.Version, out, sum)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&s.Version, "version", "", "version: the tag and org.opencontainers.image.version")
	f.StringVar(&s.Revision, "revision", "", "commit: org.opencontainers.image.revision")
	f.StringVar(&created, "created", "", "RFC 3339 time of every timestamp in the image (the commit's date)")
	f.StringVar(&s.Entrypoint, "entrypoint", "/skewgate", "path of the binary in the image")
	f.StringVar(&b.Package, "package", b.Package, "Go package to build")
	f.StringVar(&b.LDFlags, "ldflags", "", "go build -ldflags")
	f.StringVar(&repo, "repository", "skewgate", "image name without tag")
	f.StringVar(&out, "out", "bin/skewgate-image.tar", "OCI archive to write")
	return cmd
}
