package lab

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// TestOverlayRunsTheLabImage: the overlay ApplyKustomize applies runs the
// image the lab imported (skewgate:<tag>, never the release repository
// the base names, which the lab's containerd cannot pull) with the flags
// added, rendered as kubectl apply -k renders it.
func TestOverlayRunsTheLabImage(t *testing.T) {
	dir := t.TempDir()
	abs, err := filepath.Abs("../deploy/kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, abs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay(rel, "skewgate", "v9-lab", "--steering-mode=always")), 0o644); err != nil {
		t.Fatal(err)
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rm.Resources() {
		if r.GetKind() != "DaemonSet" {
			continue
		}
		data, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		var ds appsv1.DaemonSet
		if err := yaml.Unmarshal(data, &ds); err != nil {
			t.Fatal(err)
		}
		c := ds.Spec.Template.Spec.Containers[0]
		if c.Image != "skewgate:v9-lab" || !slices.Contains(c.Args, "--steering-mode=always") {
			t.Errorf("the lab's DaemonSet runs %s with %s, want skewgate:v9-lab with --steering-mode=always", c.Image, strings.Join(c.Args, " "))
		}
		return
	}
	t.Fatal("no DaemonSet rendered")
}
