package release

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/testenv"
)

// tool is a binary of the lab cache (helm, cosign), built on first use;
// it skips only outside CI when it cannot be built here.
func tool(t *testing.T, ensure func(context.Context, string, io.Writer) (string, error), what string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	bin, err := ensure(ctx, lab.DefaultCacheDir(), os.Stderr)
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("%s: %v", what, err)
		}
		t.Skipf("%s cannot be built here (runs in CI): %v", what, err)
	}
	return bin
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestRefusals: a version that is not semantic, a tree with a change no
// commit holds (an untracked file too), a tag on another commit and an
// existing release directory are refused before anything is built.
func TestRefusals(t *testing.T) {
	key, _ := GenerateKey()
	repo := t.TempDir()
	run(t, repo, "git", "init", "-q")
	run(t, repo, "git", "commit", "-q", "--allow-empty", "-m", "one")
	run(t, repo, "git", "tag", "v1.0.0")
	run(t, repo, "git", "commit", "-q", "--allow-empty", "-m", "two")
	o := Options{Root: repo, Version: "v1.1.0", Repository: "ghcr.io/skewgate/skewgate", Key: key, Helm: "helm", Out: filepath.Join(t.TempDir(), "out")}
	ctx := context.Background()

	if err := os.WriteFile(filepath.Join(repo, "new.go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(ctx, o); !errors.Is(err, ErrDirty) || !strings.Contains(err.Error(), "new.go") {
		t.Errorf("untracked file: %v, want ErrDirty naming new.go", err)
	}
	os.Remove(filepath.Join(repo, "new.go"))

	bad := o
	bad.Version = "v1.1"
	if _, err := Build(ctx, bad); err == nil || !strings.Contains(err.Error(), "vX.Y.Z") {
		t.Errorf("version v1.1: %v", err)
	}
	bad.Version = "v1.0.0"
	if _, err := Build(ctx, bad); err == nil || !strings.Contains(err.Error(), "tag v1.0.0 is commit") {
		t.Errorf("a tag on another commit: %v", err)
	}
	if err := os.Mkdir(o.Out, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(ctx, o); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("existing output: %v", err)
	}
	if _, err := os.Stat(o.Out + ".tmp"); err == nil {
		t.Error("a refused release left a directory")
	}
}

// TestReleaseDryRun is make release's dry run, as CI runs it: a shared
// clone of this repository's HEAD (a clean tree at one commit; uncommitted
// changes are not in it), a throwaway key, helm from the lab cache. The
// release verifies with the public key (Verify), with sha256sum -c, and
// with cosign verify-blob as an operator runs it; the packaged chart
// renders the image by digest; and a release whose manifest names another
// image, or whose checksums were signed by another key, does not verify.
func TestReleaseDryRun(t *testing.T) {
	helm := tool(t, lab.EnsureHelm, "helm "+lab.HelmVersion)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "src")
	run(t, "", "git", "clone", "-q", "--shared", root, src)
	key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Root: src, Version: "v0.0.1-rc.1", Repository: "ghcr.io/skewgate/skewgate", Key: key, Helm: helm,
		ChartURL: "https://example.com/charts", BuilderID: "https://example.com/ci", Out: filepath.Join(t.TempDir(), "release")}
	t0 := time.Now()
	s, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("release %s built and verified in %s", s.Ref(), time.Since(t0).Round(time.Second))
	pub, err := MarshalPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(o.Out, pub); err != nil {
		t.Fatal(err)
	}
	run(t, o.Out, "sha256sum", "--quiet", "-c", SumsFile)

	cosign := tool(t, lab.EnsureCosign, "cosign "+lab.CosignVersion)
	for blob, sig := range map[string]string{PayloadFile: SignatureFile, SumsFile: SumsSigFile} {
		out := run(t, o.Out, cosign, "verify-blob", "--key", PublicKeyFile, "--signature", sig, "--insecure-ignore-tlog=true", blob)
		t.Logf("cosign verify-blob %s: %s", blob, strings.TrimSpace(out))
	}

	rendered := run(t, "", helm, "template", "skewgate", filepath.Join(o.Out, s.Chart), "--namespace", "kube-system")
	if img := daemonSetImage(t, rendered); img != s.Ref() {
		t.Errorf("the packaged chart runs %s, want %s", img, s.Ref())
	}

	tampered := copyRelease(t, o.Out)
	manifest := filepath.Join(tampered, "skewgate.yaml")
	data, _ := os.ReadFile(manifest)
	os.WriteFile(manifest, bytes.Replace(data, []byte(s.Digest.Hex), []byte(strings.Repeat("0", 64)), 1), 0o644)
	if _, err := Verify(tampered, pub); err == nil || !strings.Contains(err.Error(), "skewgate.yaml") {
		t.Errorf("a manifest changed after signing: %v", err)
	}
	if err := writeSums(key, tampered); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(tampered, pub); err == nil || !strings.Contains(err.Error(), "want "+s.Ref()) {
		t.Errorf("a manifest naming another digest, re-summed with the key: %v", err)
	}
	other, _ := GenerateKey()
	if err := writeSums(other, tampered); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(tampered, pub); !errors.Is(err, ErrBadSignature) {
		t.Errorf("checksums signed by another key: %v, want ErrBadSignature", err)
	}
}

func daemonSetImage(t *testing.T, manifests string) string {
	t.Helper()
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	for {
		var ds appsv1.DaemonSet
		if err := d.Decode(&ds); err != nil {
			t.Fatalf("no DaemonSet rendered: %v", err)
		}
		if ds.Kind == "DaemonSet" {
			return ds.Spec.Template.Spec.Containers[0].Image
		}
	}
}

// copyRelease copies a release directory (the image archive by hard link).
func copyRelease(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		from, to := filepath.Join(dir, e.Name()), filepath.Join(out, e.Name())
		if e.Name() == ImageFile {
			if err := os.Link(from, to); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
