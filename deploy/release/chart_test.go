package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func tgz(t *testing.T, mtime time.Time) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.ModTime, zw.Name = mtime, "skewgate.tgz"
	tw := tar.NewWriter(zw)
	for _, f := range []string{"skewgate/Chart.yaml", "skewgate/values.yaml"} {
		tw.WriteHeader(&tar.Header{Name: f, Mode: 0o644, Size: 2, ModTime: mtime, Typeflag: tar.TypeReg})
		tw.Write([]byte("x\n"))
	}
	tw.Close()
	zw.Close()
	return b.Bytes()
}

// TestChartTimesPinned: two chart archives that differ only in helm's
// clock become the same bytes, and index.yaml's times are the commit's.
func TestChartTimesPinned(t *testing.T) {
	commit := time.Date(2026, 12, 7, 6, 20, 21, 0, time.UTC)
	a, err := retime(tgz(t, time.Now()), commit)
	if err != nil {
		t.Fatal(err)
	}
	b, err := retime(tgz(t, time.Now().Add(time.Hour)), commit)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("two archives of the same files differ after retime")
	}
	files, err := chartFilesOf(a)
	if err != nil || len(files) != 2 {
		t.Fatalf("retimed archive: %v, %d files", err, len(files))
	}
	index := filepath.Join(t.TempDir(), "index.yaml")
	os.WriteFile(index, []byte("apiVersion: v1\nentries:\n  skewgate:\n  - apiVersion: v2\n    created: \"2026-12-07T06:23:31.363171967Z\"\n    version: 0.1.0\ngenerated: \"2026-12-07T06:23:31.360706761Z\"\n"), 0o644)
	if err := pinIndexTimes(index, commit); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(index)
	if strings.Count(string(data), `"2026-12-07T06:20:21Z"`) != 2 || strings.Contains(string(data), "06:23") {
		t.Errorf("index.yaml after pinning:\n%s", data)
	}
}

func chartFilesOf(data []byte) (map[string]bool, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if err != nil {
			return out, nil
		}
		out[hdr.Name] = true
	}
}
