package image

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Arches are the architectures skewgate's image is built for: the
// control-plane nodes people run (linux/amd64, linux/arm64).
var Arches = []string{"amd64", "arm64"}

// Multi is a multi-architecture build: the image index and, by
// architecture, each image and the binary in it.
type Multi struct {
	Index    v1.ImageIndex
	Images   map[string]v1.Image
	Binaries map[string]string
}

// BuildMulti builds b for every arch (b.Out gets "-<arch>") and returns
// the OCI image index of their images, one linux/<arch> manifest each, in
// the order of arches. The same inputs give the same digest. It returns
// the first build or image error.
func BuildMulti(ctx context.Context, b GoBinary, s Spec, arches []string) (Multi, error) {
	m := Multi{Images: map[string]v1.Image{}, Binaries: map[string]string{}}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	base := b.Out
	for _, arch := range arches {
		b.Arch, b.Out = arch, base+"-"+arch
		if err := b.Build(ctx); err != nil {
			return Multi{}, err
		}
		s.Arch, s.Binary = arch, b.Out
		img, err := Build(s)
		if err != nil {
			return Multi{}, fmt.Errorf("image for %s: %w", arch, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
		m.Images[arch], m.Binaries[arch] = img, b.Out
	}
	m.Index = idx
	return m, nil
}

// WriteIndexArchive writes idx, tagged ref, to out as WriteArchive writes
// one image: a tar of an OCI image layout whose index.json names it, every
// entry's mtime and owner fixed. `ctr images import` takes the platform of
// the node it runs on.
func WriteIndexArchive(idx v1.ImageIndex, ref string, mtime time.Time, out string) error {
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
	err = p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		annotationContainerdName: FullName(tag),
		annotationRefName:        tag.TagStr(),
	}))
	if err != nil {
		return fmt.Errorf("write index to layout: %w", err)
	}
	return tarDir(dir, out, mtime.Truncate(time.Second))
}
