package lab

import (
	"context"
	"io"
)

// HelmVersion is the helm that lints and renders deploy/helm/skewgate.
// Helm 3, the major the chart's apiVersion v2 targets and every operator's
// helm installs.
const HelmVersion = "v3.22.0"

// EnsureHelm builds helm from the Go module proxy into cacheDir (cached
// afterwards, like the apiservers) and returns its path. It stays out of
// skewgate's go.mod: helm's dependency tree (ORAS, containerd, docker's
// registry client) is not the product's.
func EnsureHelm(ctx context.Context, cacheDir string, out io.Writer) (string, error) {
	return ensure(ctx, cacheDir, helmRecipe(HelmVersion), out)
}

// helmRecipe stamps the version as helm's release Makefile does, and the
// Kubernetes version `helm template` and `helm lint` assume (Capabilities,
// deprecation checks) from the client-go helm links (v0.37: 1.37) instead
// of the source's fallback 1.20.
func helmRecipe(v string) recipe {
	const pkg = "helm.sh/helm/v3"
	return recipe{
		name: "helm", version: v,
		module: pkg, pkg: pkg + "/cmd/helm",
		ldflags: "-s -w -X " + pkg + "/internal/version.version=" + v +
			" -X " + pkg + "/internal/version.gitTreeState=clean" +
			" -X " + pkg + "/pkg/lint/rules.k8sVersionMajor=1 -X " + pkg + "/pkg/lint/rules.k8sVersionMinor=37" +
			" -X " + pkg + "/pkg/chartutil.k8sVersionMajor=1 -X " + pkg + "/pkg/chartutil.k8sVersionMinor=37",
		versionArgs: []string{"version", "--short"},
		wantVersion: v,
	}
}
