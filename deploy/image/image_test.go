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
	"strings"
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
	if repo, tag, err := ArchiveName(out); repo != "docker.io/library/skewgate" || tag != "v9.9.9" || err != nil {
		t.Errorf("ArchiveName: %s %s %v", repo, tag, err)
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

// TestMultiArch builds the pause program's image for every arch of Arches
// twice: one index, a linux/<arch> manifest each holding a binary of that
// machine, the same index digest, archive and SBOM both times; the SBOM
// names the index and what the binaries link.
func TestMultiArch(t *testing.T) {
	var archives, sboms [][]byte
	var digests []string
	for i := range 2 {
		dir := t.TempDir()
		s := Spec{Entrypoint: "/pause", Version: "v0.0.1", Revision: "abc", Created: created}
		m, err := BuildMulti(context.Background(), GoBinary{Dir: ".", Package: "./pause", LDFlags: "-s -w", Out: filepath.Join(dir, "pause")}, s, Arches)
		if err != nil {
			t.Fatal(err)
		}
		im, err := m.Index.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(im.Manifests) != len(Arches) {
			t.Fatalf("index with %d manifests, want %d", len(im.Manifests), len(Arches))
		}
		machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
		for j, d := range im.Manifests {
			arch := Arches[j]
			if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != arch {
				t.Errorf("manifest %d: platform %+v, want linux/%s", j, d.Platform, arch)
			}
			cf, err := m.Images[arch].ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.Architecture != arch || cf.OS != "linux" {
				t.Errorf("%s image config: %s/%s", arch, cf.OS, cf.Architecture)
			}
			f, err := elf.Open(m.Binaries[arch])
			if err != nil {
				t.Fatal(err)
			}
			if f.Machine != machines[arch] {
				t.Errorf("%s binary is for %s", arch, f.Machine)
			}
			f.Close()
			requireStatic(t, m.Binaries[arch])
		}
		out := filepath.Join(dir, "pause.tar")
		if err := WriteIndexArchive(m.Index, "skewgate.lab/pause:v0.0.1", created, out); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		sbom, err := SPDX(m, "pause", s)
		if err != nil {
			t.Fatal(err)
		}
		d, err := m.Index.Digest()
		if err != nil {
			t.Fatal(err)
		}
		checkSPDX(t, sbom, d.Hex)
		t.Logf("build %d: index %s, archive %d bytes, SBOM %d bytes", i, d, len(data), len(sbom))
		digests, archives, sboms = append(digests, d.String()), append(archives, data), append(sboms, sbom)
	}
	if digests[0] != digests[1] || !bytes.Equal(archives[0], archives[1]) || !bytes.Equal(sboms[0], sboms[1]) {
		t.Errorf("two builds differ: digests %v, archives equal %t, SBOMs equal %t", digests, bytes.Equal(archives[0], archives[1]), bytes.Equal(sboms[0], sboms[1]))
	}
}

func checkSPDX(t *testing.T, sbom []byte, indexHex string) {
	t.Helper()
	var doc struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name, VersionInfo string
			Checksums         []struct{ ChecksumValue string }
		} `json:"packages"`
		Relationships []struct {
			Element string `json:"spdxElementId"`
			Type    string `json:"relationshipType"`
		} `json:"relationships"`
	}
	if err := json.Unmarshal(sbom, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || len(doc.Packages) < 3 {
		t.Fatalf("SBOM %s with %d packages", doc.SPDXVersion, len(doc.Packages))
	}
	if p := doc.Packages[0]; p.Name != "pause" || len(p.Checksums) != 1 || p.Checksums[0].ChecksumValue != indexHex {
		t.Errorf("SBOM's first package %+v, want the image with the index digest %s", p, indexHex)
	}
	if p := doc.Packages[1]; p.Name != "github.com/skewgate/skewgate" || p.VersionInfo != "v0.0.1" {
		t.Errorf("SBOM's second package %+v, want the skewgate module at the image's version", p)
	}
	if p := doc.Packages[2]; p.Name != "stdlib" || !strings.HasPrefix(p.VersionInfo, "go1.") {
		t.Errorf("SBOM's third package %+v, want Go's standard library", p)
	}
	if len(doc.Relationships) == 0 || doc.Relationships[0].Type != "DESCRIBES" {
		t.Errorf("SBOM relationships %+v: the document must describe the image", doc.Relationships)
	}
}
