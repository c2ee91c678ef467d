package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/skewgate/skewgate/deploy/image"
	"github.com/skewgate/skewgate/deploy/kubernetes"
)

func newImageCmd() *cobra.Command {
	var s image.Spec
	var created, repo, out, sbom string
	arches := image.Arches
	b := image.GoBinary{Dir: ".", Package: "./cmd/skewgate"}
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build skewgate's multi-architecture OCI image archive and its SPDX SBOM (static binaries, no container daemon, reproducible)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := time.Parse(time.RFC3339, created)
			if err != nil {
				return fmt.Errorf("--created: %w", err)
			}
			s.Created = t
			b.Out = filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".bin")
			m, err := image.BuildMulti(cmd.Context(), b, s, arches)
			defer func() {
				for _, bin := range m.Binaries {
					os.Remove(bin)
				}
			}()
			if err != nil {
				return err
			}
			ref := repo + ":" + s.Version
			if err := image.WriteIndexArchive(m.Index, ref, s.Created, out); err != nil {
				return err
			}
			doc, err := image.SPDX(m, repo, s)
			if err != nil {
				return err
			}
			if sbom == "" {
				sbom = strings.TrimSuffix(out, ".tar") + ".spdx.json"
			}
			if err := os.WriteFile(sbom, doc, 0o644); err != nil {
				return err
			}
			d, err := m.Index.Digest()
			if err != nil {
				return err
			}
			fmt.Printf("%s %s: index %s\n", ref, out, d)
			for _, arch := range arches {
				sum, err := image.Summarize(m.Images[arch], out)
				if err != nil {
					return err
				}
				fmt.Printf("  linux/%s: %s\n", arch, sum)
			}
			fmt.Printf("SBOM (SPDX 2.3) %s\n", sbom)
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
	f.StringVar(&repo, "repository", kubernetes.DefaultRepository, "image name without tag (where it is published)")
	f.StringVar(&out, "out", "bin/skewgate-image.tar", "OCI archive to write")
	f.StringSliceVar(&arches, "arch", arches, "architectures to build for, each linux/<arch>")
	f.StringVar(&sbom, "sbom", "", "SPDX JSON SBOM to write (default: the archive's name with .spdx.json)")
	return cmd
}
