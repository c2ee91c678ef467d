package release

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/skewgate/skewgate/deploy/image"
)

// built is the image of a release.
type built struct {
	digest v1.Hash // the image index's
}

// ref is the image as the manifests name it: repository:version@digest
// (the tag for people, the digest for the kubelet, as Cilium's do).
func (b built) ref(o Options) string {
	return o.Repository + ":" + o.Version + "@" + b.digest.String()
}

// buildImage builds the image as `make image` does (static binaries for
// image.Arches, -s -w, the version, commit and commit date stamped), from
// src, and writes its archive, SBOM and provenance to dir.
func buildImage(ctx context.Context, o Options, src source, dir string) (built, error) {
	ldflags := fmt.Sprintf("-s -w -X main.version=%s -X main.commit=%s -X main.buildDate=%s",
		o.Version, src.Commit, src.Date.Format(time.RFC3339))
	b := image.GoBinary{Dir: o.Root, Package: imagePackage, LDFlags: ldflags, Out: filepath.Join(dir, ".skewgate")}
	s := image.Spec{Entrypoint: "/skewgate", Version: o.Version, Revision: src.Commit, Created: src.Date}
	m, err := image.BuildMulti(ctx, b, s, image.Arches)
	defer func() {
		for _, bin := range m.Binaries {
			os.Remove(bin)
		}
	}()
	if err != nil {
		return built{}, err
	}
	if err := image.WriteIndexArchive(m.Index, o.Repository+":"+o.Version, src.Date, filepath.Join(dir, ImageFile)); err != nil {
		return built{}, err
	}
	sbom, err := image.SPDX(m, o.Repository, s)
	if err != nil {
		return built{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, sbomFile), sbom, 0o644); err != nil {
		return built{}, err
	}
	d, err := m.Index.Digest()
	if err != nil {
		return built{}, err
	}
	sum := sha256.Sum256(sbom)
	prov, err := provenanceStatement(o, src, d, ldflags, hex.EncodeToString(sum[:]))
	if err != nil {
		return built{}, err
	}
	return built{digest: d}, os.WriteFile(filepath.Join(dir, ProvenanceFile), prov, 0o644)
}
