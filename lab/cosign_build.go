package lab

import (
	"context"
	"io"
)

// CosignVersion is the cosign that checks a release's signature as an
// operator would (`cosign verify-blob --key`): deploy/release's
// TestReleaseDryRun.
const CosignVersion = "v3.1.3"

// EnsureCosign builds cosign from the Go module proxy into cacheDir
// (cached afterwards, like helm) and returns its path. It stays out of
// skewgate's go.mod: cosign's dependency tree (Rekor, Fulcio, TUF, cloud
// KMS clients) is not the product's.
func EnsureCosign(ctx context.Context, cacheDir string, out io.Writer) (string, error) {
	return ensure(ctx, cacheDir, cosignRecipe(CosignVersion), out)
}

// cosignRecipe stamps the version as cosign's release build does
// (sigs.k8s.io/release-utils/version), so `cosign version` reports it.
func cosignRecipe(v string) recipe {
	return recipe{
		name: "cosign", version: v,
		module: "github.com/sigstore/cosign/v3", pkg: "github.com/sigstore/cosign/v3/cmd/cosign",
		ldflags:     "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=" + v,
		versionArgs: []string{"version"},
		wantVersion: v,
	}
}
