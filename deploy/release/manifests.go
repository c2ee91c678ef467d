package release

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/deploy/kubernetes"
)

// manifests are the rendered forms of deploy/kubernetes: release file →
// kustomize directory under deploy/kubernetes.
var manifests = map[string]string{
	"skewgate.yaml":            ".",
	"skewgate-monitoring.yaml": "monitoring",
	"skewgate-uninstall.yaml":  "uninstall",
}

// staticPodFile is the static-pod form (skewgate manifest static-pod).
const staticPodFile = "skewgate-static-pod.yaml"

// writeManifests renders each kustomize directory with the image ref in
// place of kubernetes.DefaultRepository (an overlay's images:, as an
// operator's would), and the static pod of ref, into dir.
func writeManifests(o Options, ref string, dir string) error {
	repo, tag, digest, err := splitRef(ref)
	if err != nil {
		return err
	}
	for file, kdir := range manifests {
		data, err := kustomize(filepath.Join(o.Root, "deploy/kubernetes", kdir), repo, tag, digest)
		if err != nil {
			return fmt.Errorf("render %s: %w", file, err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			return err
		}
	}
	pod, err := kubernetes.StaticPod{Image: ref}.Pod()
	if err != nil {
		return err
	}
	data, err := yaml.Marshal(pod)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, staticPodFile), data, 0o644)
}

// kustomize renders base through an overlay naming repo:tag@digest.
func kustomize(base, repo, tag, digest string) ([]byte, error) {
	overlay, err := os.MkdirTemp("", "skewgate-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(overlay)
	abs, err := filepath.Abs(base)
	if err != nil {
		return nil, err
	}
	// kustomize takes no absolute resource: the base relative to the overlay.
	rel, err := filepath.Rel(overlay, abs)
	if err != nil {
		return nil, err
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - %s\n"+
		"images:\n  - name: %s\n    newName: %s\n    newTag: %s\n    digest: %s\n", rel, kubernetes.DefaultRepository, repo, tag, digest)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		return nil, err
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), overlay)
	if err != nil {
		return nil, err
	}
	return rm.AsYaml()
}

// splitRef splits repo:tag@digest.
func splitRef(ref string) (repo, tag, digest string, err error) {
	rest, digest, ok := strings.Cut(ref, "@")
	i := strings.LastIndex(rest, ":")
	if !ok || i < 0 || strings.Contains(rest[i:], "/") {
		return "", "", "", fmt.Errorf("image %q: want repository:tag@digest", ref)
	}
	return rest[:i], rest[i+1:], digest, nil
}
