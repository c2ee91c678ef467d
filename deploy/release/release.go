// Package release makes a skewgate release from one commit of a clean
// tree (make release): the multi-architecture image archive and its SPDX
// SBOM (deploy/image), an in-toto statement of the image's SLSA v1
// provenance, a cosign-compatible signature of the image digest, the
// packaged Helm chart and its index.yaml, the kustomize and static-pod
// manifests naming the image by version and digest, and SHA256SUMS with
// its signature. Verify checks all of it with the public key, as an
// operator's cosign and sha256sum would.
package release

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/skewgate/skewgate/deploy/image"
)

// The files of a release directory.
const (
	ImageFile      = "skewgate-image.tar"
	sbomFile       = "skewgate-image.spdx.json"
	ProvenanceFile = "skewgate-image.provenance.json"
	PayloadFile    = "skewgate-image.payload.json"
	SignatureFile  = "skewgate-image.sig"
	PublicKeyFile  = "cosign.pub"
	SumsFile       = "SHA256SUMS"
	SumsSigFile    = "SHA256SUMS.sig"
	chartIndexFile = "index.yaml"
)

// imagePackage is the program the image runs.
const imagePackage = "./cmd/skewgate"

// Options say what to release and where.
type Options struct {
	// Root is the repository's work tree: clean, at the commit released.
	Root string
	// Version is the release, vX.Y.Z (or vX.Y.Z-rc.N): the image's tag,
	// the chart's appVersion (its version without the v).
	Version string
	// Repository is where the image is published, e.g.
	// ghcr.io/skewgate/skewgate (deploy/kubernetes.DefaultRepository).
	Repository string
	// Key signs the image digest and SHA256SUMS.
	Key *ecdsa.PrivateKey
	// Helm is the helm binary that packages and indexes the chart.
	Helm string
	// ChartURL is where the chart's .tgz is downloaded from (index.yaml's
	// urls).
	ChartURL string
	// BuilderID names who built it (the provenance's builder.id).
	BuilderID string
	// Out is the release directory; it must not exist yet.
	Out string
}

// ErrDirty means the tree has changes no commit holds.
var ErrDirty = errors.New("the tree has uncommitted changes")

var versionRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-(alpha|beta|rc)\.(0|[1-9][0-9]*))?$`)

// CheckVersion returns an error unless v is vX.Y.Z, or a pre-release of
// it vX.Y.Z-{alpha,beta,rc}.N (docs/versioning.md).
func CheckVersion(v string) error {
	if !versionRE.MatchString(v) {
		return fmt.Errorf("version %q: want vX.Y.Z or vX.Y.Z-rc.N (semantic versioning, docs/versioning.md)", v)
	}
	return nil
}

// Build makes the release o describes in o.Out and checks it with Verify.
// It refuses a version that is not semantic, a tree with uncommitted
// changes (ErrDirty), a tag o.Version on another commit, and an existing
// o.Out; it writes into o.Out only once everything is built.
func Build(ctx context.Context, o Options) (Summary, error) {
	if err := CheckVersion(o.Version); err != nil {
		return Summary{}, err
	}
	if o.Key == nil || o.Repository == "" || o.Helm == "" || o.Out == "" {
		return Summary{}, errors.New("release: want a key, a repository, helm and an output directory")
	}
	if _, err := os.Stat(o.Out); err == nil {
		return Summary{}, fmt.Errorf("%s exists: a release directory is written once (remove it to build again)", o.Out)
	}
	src, err := readSource(ctx, o.Root, o.Version)
	if err != nil {
		return Summary{}, err
	}
	tmp := o.Out + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return Summary{}, err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return Summary{}, err
	}
	if err := build(ctx, o, src, tmp); err != nil {
		os.RemoveAll(tmp)
		return Summary{}, err
	}
	pub, err := MarshalPublicKey(&o.Key.PublicKey)
	if err != nil {
		return Summary{}, err
	}
	s, err := Verify(tmp, pub)
	if err != nil {
		return Summary{}, fmt.Errorf("the release built does not verify (left in %s): %w", tmp, err)
	}
	return s, os.Rename(tmp, o.Out)
}

func build(ctx context.Context, o Options, src source, dir string) error {
	img, err := buildImage(ctx, o, src, dir)
	if err != nil {
		return err
	}
	if err := sign(o, img, dir); err != nil {
		return err
	}
	if err := writeManifests(o, img.ref(o), dir); err != nil {
		return err
	}
	if err := packageChart(ctx, o, src, img.digest, dir); err != nil {
		return err
	}
	return writeSums(o.Key, dir)
}

// sign writes the image's simple-signing payload, its signature and the
// public key.
func sign(o Options, img built, dir string) error {
	payload, err := Payload(o.Repository, img.digest)
	if err != nil {
		return err
	}
	sig, err := SignBlob(o.Key, payload)
	if err != nil {
		return err
	}
	pub, err := MarshalPublicKey(&o.Key.PublicKey)
	if err != nil {
		return err
	}
	for f, data := range map[string][]byte{PayloadFile: payload, SignatureFile: sig, PublicKeyFile: pub} {
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func arches() []string { return append([]string(nil), image.Arches...) }
