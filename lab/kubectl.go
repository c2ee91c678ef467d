package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/skewgate/skewgate/deploy/kubernetes"
)

// Kubectl returns the lab's kubectl (KubectlVersion, built like the
// apiservers and cached).
func (p *Plane) Kubectl(ctx context.Context) (string, error) {
	cache := p.cache
	if cache == "" {
		cache = DefaultCacheDir()
	}
	return ensure(ctx, cache, kubernetesRecipe("kubectl", KubectlVersion), io.Discard)
}

// ApplyKustomize runs `kubectl apply -k` as the lab admin on an overlay of
// base (a kustomize directory) that runs image:tag where the base names
// kubernetes.DefaultRepository (the lab imports its own image) and appends
// args to the first container of every DaemonSet (e.g.
// --steering-mode=always), as an operator's overlay would, and returns
// kubectl's output.
func (p *Plane) ApplyKustomize(ctx context.Context, base, image, tag string, args ...string) (string, error) {
	kubectl, err := p.Kubectl(ctx)
	if err != nil {
		return "", err
	}
	dir, err := filepath.Abs(filepath.Join(p.Dir, "overlay"))
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	abs, err := filepath.Abs(base)
	if err != nil {
		return "", err
	}
	// kustomize takes no absolute root: the base relative to the overlay.
	rel, err := filepath.Rel(dir, abs)
	if err != nil {
		return "", err
	}
	k := overlay(rel, image, tag, args...)
	if err := writeFile(filepath.Join(dir, "kustomization.yaml"), k); err != nil {
		return "", err
	}
	n := p.Spec.Nodes[len(p.Spec.Nodes)-1]
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", KubeconfigPath(p.Dir, n.Name), "apply", "-k", dir).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kubectl apply -k %s: %w\n%s", base, err, out)
	}
	return string(out), nil
}

// overlay is the kustomization of ApplyKustomize: the base at rel, image:tag
// where the base names kubernetes.DefaultRepository, args appended to the
// first container of every DaemonSet.
func overlay(rel, image, tag string, args ...string) string {
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\n"+
		"images:\n  - name: %s\n    newName: %s\n    newTag: %s\n", rel, kubernetes.DefaultRepository, image, tag)
	if len(args) > 0 {
		k += "patches:\n  - target:\n      kind: DaemonSet\n    patch: |-\n"
		for _, a := range args {
			k += fmt.Sprintf("      - op: add\n        path: /spec/template/spec/containers/0/args/-\n        value: %q\n", a)
		}
	}
	return k
}
