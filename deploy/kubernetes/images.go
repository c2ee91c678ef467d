package kubernetes

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// DefaultRepository is the image repository every manifest names unless
// an operator names another: where a release's image is published
// (docs/release.md). A bare "skewgate" would be docker.io/library/skewgate,
// which no one publishes; the kustomize files name it only for kustomize's
// images: to replace.
const DefaultRepository = "ghcr.io/skewgate/skewgate"

// DefaultImage is DefaultRepository at version (a tag, e.g. v0.1.0).
func DefaultImage(version string) string { return DefaultRepository + ":" + version }

// CheckPublished returns an error unless ref is an image in
// DefaultRepository, by tag or digest.
func CheckPublished(ref string) error {
	r, err := name.ParseReference(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image %q: want a full reference (%s:TAG or @sha256:…): %w", ref, DefaultRepository, err)
	}
	if repo := r.Context().Name(); repo != DefaultRepository || !strings.HasPrefix(ref, DefaultRepository) {
		return fmt.Errorf("image %q is in %s, want %s (docs/release.md)", ref, repo, DefaultRepository)
	}
	return nil
}
