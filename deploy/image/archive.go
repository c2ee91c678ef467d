package image

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Annotations an OCI layout's index carries for img so that
// `ctr images import` names it: containerd reads io.containerd.image.name,
// other tools the OCI ref name (the tag).
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// WriteArchive writes img, tagged ref (e.g. "skewgate:v0.1.0"), to out as a
// tar of an OCI image layout, the format `ctr images import` and
// `skopeo copy oci-archive:` read. Every entry has mtime and owner fixed, so
// the same image always gives the same bytes.
func WriteArchive(img v1.Image, ref string, mtime time.Time, out string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	dir, err := os.MkdirTemp("", "skewgate-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write layout: %w", err)
	}
	err = p.AppendImage(img, layout.WithAnnotations(map[string]string{
		annotationContainerdName: FullName(tag),
		annotationRefName:        tag.TagStr(),
	}))
	if err != nil {
		return fmt.Errorf("write image to layout: %w", err)
	}
	return tarDir(dir, out, mtime.Truncate(time.Second))
}

// FullName is ref as containerd and the kubelet name it:
// "skewgate:v1" is docker.io/library/skewgate:v1.
func FullName(tag name.Tag) string {
	reg := tag.RegistryStr()
	if reg == name.DefaultRegistry {
		reg = "docker.io"
	}
	return reg + "/" + tag.RepositoryStr() + ":" + tag.TagStr()
}

// tarDir writes the files under dir, in lexical order, to the tar out.
func tarDir(dir, out string, mtime time.Time) (err error) {
	f, err := os.Create(out + ".tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	tw := tar.NewWriter(f)
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		return addEntry(tw, dir, p, d, mtime)
	}); err != nil {
		return fmt.Errorf("tar layout: %w", err)
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), out)
}

func addEntry(tw *tar.Writer, root, p string, d fs.DirEntry, mtime time.Time) error {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return err
	}
	hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Mode: 0o644, Typeflag: tar.TypeReg}
	if d.IsDir() {
		hdr.Name, hdr.Mode, hdr.Typeflag = hdr.Name+"/", 0o755, tar.TypeDir
		return tw.WriteHeader(hdr)
	}
	src, err := os.Open(p)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	hdr.Size = st.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}

// Summary is what an operator asks of a built image.
type Summary struct {
	Digest       v1.Hash
	LayerBytes   int64 // compressed, what a registry stores and a node pulls
	ArchiveBytes int64
}

func (s Summary) String() string {
	return fmt.Sprintf("digest %s, layer %.1f MiB compressed, archive %.1f MiB",
		s.Digest, float64(s.LayerBytes)/(1<<20), float64(s.ArchiveBytes)/(1<<20))
}

// Summarize returns img's digest and sizes; archive is the file
// WriteArchive wrote.
func Summarize(img v1.Image, archive string) (Summary, error) {
	var s Summary
	var err error
	if s.Digest, err = img.Digest(); err != nil {
		return s, err
	}
	layers, err := img.Layers()
	if err != nil {
		return s, err
	}
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return s, err
		}
		s.LayerBytes += n
	}
	st, err := os.Stat(archive)
	if err != nil {
		return s, err
	}
	s.ArchiveBytes = st.Size()
	return s, nil
}

// ArchiveName returns the name an archive of WriteArchive or
// WriteIndexArchive gives its image, as containerd imports it, split into
// repository and tag (e.g. ghcr.io/skewgate/skewgate and v0.1.0).
func ArchiveName(archive string) (repository, tag string, err error) {
	f, err := os.Open(archive)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err != nil {
			return "", "", fmt.Errorf("%s: no index.json: %w", archive, err)
		}
		if hdr.Name != "index.json" {
			continue
		}
		var idx v1.IndexManifest
		if err := json.NewDecoder(tr).Decode(&idx); err != nil {
			return "", "", fmt.Errorf("%s: index.json: %w", archive, err)
		}
		if len(idx.Manifests) != 1 {
			return "", "", fmt.Errorf("%s: index.json names %d images, want 1", archive, len(idx.Manifests))
		}
		ref := idx.Manifests[0].Annotations[annotationContainerdName]
		i := strings.LastIndex(ref, ":")
		if i < 0 || strings.Contains(ref[i:], "/") {
			return "", "", fmt.Errorf("%s: image name %q has no tag", archive, ref)
		}
		return ref[:i], ref[i+1:], nil
	}
}
