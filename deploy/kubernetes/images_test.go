package kubernetes_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/skewgate/skewgate/deploy/kubernetes"
)

// release is the Makefile's RELEASE: the version the manifests name.
func release(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^RELEASE\s*:=\s*(\S+)$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("Makefile: no RELEASE := …")
	}
	return string(m[1])
}

// TestImagesThroughKustomize: every container of every kustomization
// (the uninstall Job's too) gets its image from kustomize's images:, so
// `kustomize edit set image` reaches it: the files name the bare image,
// the rendered objects DefaultRepository:<the Makefile's RELEASE>.
func TestImagesThroughKustomize(t *testing.T) {
	want := kubernetes.DefaultRepository + ":" + release(t)
	for where, spec := range podSpecs(t) {
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			if c.Image != want {
				t.Errorf("%s: container %s runs %q, want %q", where, c.Name, c.Image, want)
			}
		}
	}
	for _, f := range []string{"base/daemonset.yaml", "uninstall/job.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		spec, _ := podSpec(t, map[bool]string{true: "DaemonSet", false: "Job"}[strings.HasPrefix(f, "base/")], data)
		for _, c := range spec.Containers {
			if c.Image != "skewgate" {
				t.Errorf("%s: container %s names image %q: want the bare name skewgate, tagged by kustomize's images:", f, c.Name, c.Image)
			}
		}
	}
	for _, dir := range []string{"base", "uninstall"} {
		var k struct {
			Images []struct {
				Name    string `json:"name"`
				NewName string `json:"newName"`
				NewTag  string `json:"newTag"`
			} `json:"images"`
		}
		data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, &k); err != nil {
			t.Fatal(err)
		}
		if len(k.Images) != 1 || k.Images[0].Name != "skewgate" || k.Images[0].NewName+":"+k.Images[0].NewTag != want {
			t.Errorf("%s/kustomization.yaml: images %+v, want skewgate named %s", dir, k.Images, want)
		}
	}
}

// TestNoImageNobodyPublishes: no rendered manifest, the static pod's
// default included, names an image without a registry (a bare name is
// docker.io/library/…, where no one publishes skewgate) or in a
// repository other than DefaultRepository.
func TestNoImageNobodyPublishes(t *testing.T) {
	images := map[string]string{}
	for where, spec := range podSpecs(t) {
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			images[where+" "+c.Name] = c.Image
		}
	}
	pod, err := kubernetes.StaticPod{Image: kubernetes.DefaultImage(release(t))}.Pod()
	if err != nil {
		t.Fatal(err)
	}
	images["static pod"] = pod.Spec.Containers[0].Image
	for where, img := range images {
		if err := kubernetes.CheckPublished(img); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}
	for _, bad := range []string{"skewgate:v0.1.0", "docker.io/library/skewgate:v1", "library/skewgate", "registry.example/skewgate:v1"} {
		if kubernetes.CheckPublished(bad) == nil {
			t.Errorf("CheckPublished(%q) passed", bad)
		}
	}
}

// TestReleaseIsWhatMakeImageTags: at a commit tagged RELEASE, `make image`
// tags the image RELEASE (make version prints the tag it uses); before any
// tag, RELEASE-<commit>. Run on the Makefile in a throwaway repository.
func TestReleaseIsWhatMakeImageTags(t *testing.T) {
	rel := release(t)
	dir := t.TempDir()
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), makefile, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		// Not the caller's VERSION: the Makefile's own must decide.
		cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "VERSION=") })
		cmd.Env = append(cmd.Env, "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("git", "init", "-q")
	run("git", "add", "Makefile")
	run("git", "commit", "-qm", "release")
	commit := run("git", "rev-parse", "--short=12", "HEAD")
	if got, want := run("make", "-s", "version"), rel+"-"+commit; got != want {
		t.Errorf("untagged: make version = %q, want %q", got, want)
	}
	run("git", "tag", rel)
	if got := run("make", "-s", "version"); got != rel {
		t.Errorf("at tag %s: make version = %q, want the manifests' tag %s", rel, got, rel)
	}
}
