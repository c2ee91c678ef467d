package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// chartDir is the chart in the tree.
const chartDir = "deploy/helm/skewgate"

// packageChart packages a copy of the chart whose values name the release's
// image (repository, tag and digest) and whose version is the release's,
// and writes the chart repository's index.yaml for it, every time in both
// the commit's (pinTimes).
func packageChart(ctx context.Context, o Options, src source, digest v1.Hash, dir string) error {
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
	file := "skewgate-" + chartVersion(o.Version) + ".tgz"
	data, err = os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return err
	}
	if data, err = retime(data, src.Date); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	// The index records the archive's digest: written after the archive
	// is final.
	if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
		return err
	}
	if err := helm(ctx, o.Helm, "repo", "index", dir, "--url", o.ChartURL); err != nil {
		return err
	}
	return pinIndexTimes(filepath.Join(dir, chartIndexFile), src.Date)
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

// pinIndexTimes sets index.yaml's created and generated times, which helm
// takes from the clock, to t: a release's files are the same bytes from
// the same commit (only the signatures and key differ).
func pinIndexTimes(index string, t time.Time) error {
	idx, err := os.ReadFile(index)
	if err != nil {
		return err
	}
	stamp := []byte(`${1}: "` + t.UTC().Format(time.RFC3339) + `"`)
	return os.WriteFile(index, indexTimeRE.ReplaceAll(idx, stamp), 0o644)
}

var indexTimeRE = regexp.MustCompile(`(?m)^(\s*(?:- )?created|generated): "[^"]*"`)

// retime is a gzipped tar with every entry's modification time t and no
// other times, in a gzip stream with no name or time.
func retime(tgz []byte, t time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = t.Truncate(time.Second), time.Time{}, time.Time{}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
