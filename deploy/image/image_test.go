package image

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

var created = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// TestReproducible builds the pause program and its image twice, from
// scratch, and wants the same binary, the same digest and the same archive.
func TestReproducible(t *testing.T) {
	var archives [][]byte
	var digests []string
	for i := range 2 {
		dir := t.TempDir()
		bin := filepath.Join(dir, "pause")
		if err := (GoBinary{Dir: ".", Package: "./pause", LDFlags: "-s -w", Out: bin}).Build(context.Background()); err != nil {
			t.Fatal(err)
		}
		requireStatic(t, bin)
		img, err := Build(Spec{Binary: bin, Entrypoint: "/pause", Version: "v0.0.1", Revision: "abc", Created: created})
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "pause.tar")
		if err := WriteArchive(img, "skewgate.lab/pause:v0.0.1", created, out); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("build %d: digest %s, archive %d bytes", i, d, len(data))
		digests, archives = append(digests, d.String()), append(archives, data)
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds, two digests: %s", digests)
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Error("two builds, two different archives")
	}
}

func requireStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s is dynamically linked", bin)
		}
	}
}

func TestConfigAndIndex(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := Build(Spec{Binary: bin, Entrypoint: "/skewgate", Version: "v9.9.9", Revision: "deadbeef", Created: created})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.Config.Entrypoint; len(got) != 1 || got[0] != "/skewgate" {
		t.Errorf("entrypoint %q", got)
	}
	if cf.Config.Labels[LabelVersion] != "v9.9.9" || cf.Config.Labels[LabelRevision] != "deadbeef" {
		t.Errorf("labels %v", cf.Config.Labels)
	}
	if !cf.Created.Time.Equal(created) || cf.OS != "linux" {
		t.Errorf("created %s, os %q", cf.Created, cf.OS)
	}
	out := filepath.Join(dir, "img.tar")
	if err := WriteArchive(img, "skewgate:v9.9.9", created, out); err != nil {
		t.Fatal(err)
	}
	if got := indexImageName(t, out); got != "docker.io/library/skewgate:v9.9.9" {
		t.Errorf("index names the image %q", got)
	}
}

func indexImageName(t *testing.T, archive string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err != nil {
			t.Fatalf("no index.json in %s: %v", archive, err)
		}
		if !hdr.ModTime.Equal(created) || hdr.Uid != 0 {
			t.Errorf("%s: mtime %s uid %d", hdr.Name, hdr.ModTime, hdr.Uid)
		}
		if hdr.Name != "index.json" {
			continue
		}
		var idx struct {
			Manifests []struct{ Annotations map[string]string }
		}
		data, _ := io.ReadAll(tr)
		if err := json.Unmarshal(data, &idx); err != nil || len(idx.Manifests) != 1 {
			t.Fatalf("index.json %s: %v", data, err)
		}
		return idx.Manifests[0].Annotations[annotationContainerdName]
	}
}

func TestBadInput(t *testing.T) {
	if _, err := Build(Spec{Binary: "x", Entrypoint: "skewgate", Version: "v1", Created: created}); err == nil {
		t.Error("relative entrypoint accepted")
	}
	if _, err := Build(Spec{Binary: "/nonexistent", Entrypoint: "/x", Version: "v1", Created: created}); err == nil {
		t.Error("missing binary accepted")
	}
	if err := WriteArchive(nil, "Bad Ref", created, filepath.Join(t.TempDir(), "x.tar")); err == nil {
		t.Error("bad reference accepted")
	}
	if tag, _ := name.NewTag("registry.example:5000/x/skewgate:v1"); FullName(tag) != "registry.example:5000/x/skewgate:v1" {
		t.Errorf("FullName %s", FullName(tag))
	}
}
