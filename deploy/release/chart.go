package release

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// chartDir is the chart in the tree.
const chartDir = "deploy/helm/skewgate"

// packageChart packages a copy of the chart whose values name the release's
// image (repository, tag and digest) and whose version is the release's,
// and writes the chart repository's index.yaml for it.
func packageChart(ctx context.Context, o Options, digest v1.Hash, dir string) error {
	work, err := os.MkdirTemp("", "skewgate-chart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	chart := filepath.Join(work, "skewgate")
	if err := os.CopyFS(chart, os.DirFS(filepath.Join(o.Root, chartDir))); err != nil {
		return fmt.Errorf("copy the chart: %w", err)
	}
	values := filepath.Join(chart, "values.yaml")
	data, err := os.ReadFile(values)
	if err != nil {
		return err
	}
	data, err = pinImage(data, o.Repository, o.Version, digest.String())
	if err != nil {
		return err
	}
	if err := os.WriteFile(values, data, 0o644); err != nil {
		return err
	}
	if err := helm(ctx, o.Helm, "package", chart, "--version", chartVersion(o.Version), "--app-version", o.Version, "--destination", dir); err != nil {
		return err
	}
	return helm(ctx, o.Helm, "repo", "index", dir, "--url", o.ChartURL)
}

// chartVersion is the chart's version for a release: SemVer 2 without
// the v, as Helm wants.
func chartVersion(v string) string { return strings.TrimPrefix(v, "v") }

// pinImage sets image.repository, image.tag and image.digest in the
// chart's values.yaml, keeping its comments; each key must be there once,
// as the chart in the tree writes it.
func pinImage(values []byte, repo, tag, digest string) ([]byte, error) {
	for _, kv := range [][2]string{
		{"  repository: ", repo}, {"  tag: ", tag}, {"  digest: ", digest},
	} {
		lines := bytes.Split(values, []byte("\n"))
		found := 0
		inImage := false
		for i, l := range lines {
			if len(l) > 0 && l[0] != ' ' && l[0] != '#' {
				inImage = bytes.Equal(l, []byte("image:"))
			}
			if inImage && bytes.HasPrefix(l, []byte(kv[0])) {
				lines[i] = []byte(kv[0] + fmt.Sprintf("%q", kv[1]))
				found++
			}
		}
		if found != 1 {
			return nil, fmt.Errorf("%s/values.yaml: %d lines %q under image:, want 1", chartDir, found, strings.TrimSpace(kv[0]))
		}
		values = bytes.Join(lines, []byte("\n"))
	}
	return values, nil
}

func helm(ctx context.Context, bin string, args ...string) error {
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}
