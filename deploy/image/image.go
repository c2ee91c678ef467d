// Package image builds skewgate's container image (and the lab's pause
// image) without a container daemon: one static binary in one layer, on no
// base, with go-containerregistry. The same inputs give the same bytes:
// every timestamp is the one the caller fixes (the commit's date).
package image

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Spec is what goes into an image.
type Spec struct {
	Binary     string    // the static executable on this machine
	Entrypoint string    // its absolute path in the image, e.g. /skewgate
	Version    string    // org.opencontainers.image.version
	Revision   string    // org.opencontainers.image.revision (a commit)
	Created    time.Time // every timestamp in the image: the commit's date
	Arch       string    // GOARCH of the binary (default: this machine's)
	// Env is the config's environment (e.g. a PATH, for manifests that run
	// the binary by name, as kubeadm's static pods do).
	Env []string
	// Files are more files for the layer: what a binary linked against
	// the host's libc needs (its loader and libraries), by absolute path
	// in the image.
	Files []File
}

// File is one more file in an image's layer: Source on this machine at
// Path in the image (absolute), mode 0755.
type File struct{ Path, Source string }

// Label keys from the OCI image spec's pre-defined annotations.
const (
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelCreated  = "org.opencontainers.image.created"
)

// Build returns the OCI image of s: one layer holding the binary (root
// owned, mode 0755, mtime s.Created) and a config whose entrypoint runs it.
func Build(s Spec) (v1.Image, error) {
	if !path.IsAbs(s.Entrypoint) || s.Created.IsZero() || s.Version == "" {
		return nil, fmt.Errorf("image spec: want an absolute entrypoint, a version and a creation time, got %+v", s)
	}
	files := append([]File{{Path: s.Entrypoint, Source: s.Binary}}, s.Files...)
	layer, err := filesLayer(files, s.Created)
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: s.Created}, CreatedBy: "skewgate deploy/image"},
	})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	return configure(img, s)
}

func configure(img v1.Image, s Spec) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", s.Arch
	if s.Arch == "" {
		cf.Architecture = runtime.GOARCH
	}
	cf.Created = v1.Time{Time: s.Created}
	cf.Config.Entrypoint = []string{s.Entrypoint}
	cf.Config.Env = s.Env
	cf.Config.Labels = map[string]string{
		LabelVersion:  s.Version,
		LabelRevision: s.Revision,
		LabelCreated:  s.Created.UTC().Format(time.RFC3339),
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	return img, nil
}

// filesLayer is a gzip-compressed OCI layer with files, in order (no
// directory entries: an unpacker creates parents).
func filesLayer(files []File, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if !path.IsAbs(f.Path) {
			return nil, fmt.Errorf("image file %q: want an absolute path", f.Path)
		}
		data, err := os.ReadFile(f.Source)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f.Source, err)
		}
		hdr := &tar.Header{
			Name: f.Path[1:], Mode: 0o755, Size: int64(len(data)),
			ModTime: mtime.Truncate(time.Second), Typeflag: tar.TypeReg,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
