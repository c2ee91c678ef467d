package lab

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// Binaries are the paths of the lab's executables.
type Binaries struct {
	// Etcd is, by etcd version (v3.6.8), an etcd.
	Etcd map[string]string
	// EtcdVersions is, by Kubernetes version, the etcd version its
	// kubeadm deploys (KubeadmEtcdVersion).
	EtcdVersions map[string]string
	APIServers   map[string]string // by version
}

// EtcdFor is the etcd that kubeadm of Kubernetes version v deploys ("" if
// EnsureBinaries was not asked for v).
func (b Binaries) EtcdFor(v string) string { return b.Etcd[b.EtcdVersions[v]] }

// DefaultCacheDir is $SKEWGATE_LAB_CACHE, or ~/.cache/skewgate/lab.
func DefaultCacheDir() string {
	if d := os.Getenv("SKEWGATE_LAB_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "skewgate", "lab")
	}
	return filepath.Join(os.TempDir(), "skewgate-lab-cache")
}

// EnsureBinaries builds, per version, a kube-apiserver and the etcd its
// kubeadm deploys from the Go module proxy into cacheDir, reusing every
// binary that already reports the right version. Progress goes to out,
// because the first build takes minutes.
func EnsureBinaries(ctx context.Context, cacheDir string, versions []string, out io.Writer) (Binaries, error) {
	b := Binaries{Etcd: map[string]string{}, EtcdVersions: map[string]string{}, APIServers: map[string]string{}}
	for _, v := range versions {
		if _, ok := b.APIServers[v]; ok {
			continue
		}
		e, err := KubeadmEtcdVersion(ctx, v)
		if err != nil {
			return b, err
		}
		b.EtcdVersions[v] = e
		if _, err := b.ensureEtcd(ctx, cacheDir, e, out); err != nil {
			return b, err
		}
		path, err := ensure(ctx, cacheDir, apiserverRecipe(v), out)
		if err != nil {
			return b, err
		}
		b.APIServers[v] = path
	}
	return b, nil
}

// ensureEtcd builds etcd version v (v3.7.0) unless b has it.
func (b Binaries) ensureEtcd(ctx context.Context, cacheDir, v string, out io.Writer) (string, error) {
	if path, ok := b.Etcd[v]; ok {
		return path, nil
	}
	path, err := ensure(ctx, cacheDir, etcdRecipe(v), out)
	if err != nil {
		return "", err
	}
	b.Etcd[v] = path
	return path, nil
}

// recipe is how to build one binary from the module proxy.
type recipe struct {
	name    string // binary name
	version string
	module  string // module to require
	pkg     string // package to build
	ldflags string
	// wantVersion is a substring of `<bin> <versionArgs>` output.
	wantVersion string
	versionArgs []string // default --version
	// replaces returns go.mod replace lines once the module is downloaded.
	replaces func(ctx context.Context, dir string) ([]string, error)
}

func etcdRecipe(v string) recipe {
	return recipe{
		name: "etcd", version: v,
		module: "go.etcd.io/etcd/server/v3", pkg: "go.etcd.io/etcd/server/v3",
		wantVersion: "etcd Version: " + strings.TrimPrefix(v, "v"),
	}
}

func apiserverRecipe(v string) recipe { return kubernetesRecipe("kube-apiserver", v) }

// kubernetesRecipe builds k8s.io/kubernetes/cmd/<name> at version v
// (kube-apiserver, kubelet, kube-controller-manager, kube-scheduler,
// kubectl, kubeadm), stamped with v as a release build would be.
func kubernetesRecipe(name, v string) recipe {
	minor := strings.TrimPrefix(v, "v1.")
	r := recipe{
		name: name, version: v,
		module: "k8s.io/kubernetes", pkg: "k8s.io/kubernetes/cmd/" + name,
		ldflags: fmt.Sprintf("-s -w -X k8s.io/component-base/version.gitVersion=%s"+
			" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=%s",
			v, strings.Split(minor, ".")[0]),
		wantVersion: "Kubernetes " + v,
		replaces:    stagingReplaces("v0." + minor),
	}
	if name == "kubectl" {
		// kubectl has no --version flag and prints its own wording.
		r.versionArgs = []string{"version", "--client"}
		r.wantVersion = "Client Version: " + v
	}
	if name == "kubeadm" {
		r.versionArgs = []string{"version", "-o", "short"}
		r.wantVersion = v
	}
	return r
}

// stagingReplaces pins every staging module k8s.io/kubernetes replaces with
// ./staging/... (unusable from the module proxy) to its published v0.X.Y.
func stagingReplaces(stagingVersion string) func(context.Context, string) ([]string, error) {
	return func(ctx context.Context, dir string) ([]string, error) {
		gomod, err := goOutput(ctx, dir, "list", "-m", "-f", "{{.GoMod}}", "k8s.io/kubernetes")
		if err != nil {
			return nil, err
		}
		data, err := os.ReadFile(strings.TrimSpace(gomod))
		if err != nil {
			return nil, fmt.Errorf("read kubernetes go.mod: %w", err)
		}
		return parseStagingReplaces(string(data), stagingVersion), nil
	}
}

// parseStagingReplaces turns "k8s.io/api => ./staging/src/k8s.io/api" lines
// of a go.mod into "k8s.io/api => k8s.io/api v0.X.Y" replace directives.
func parseStagingReplaces(gomod, stagingVersion string) []string {
	var out []string
	for _, line := range strings.Split(gomod, "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "replace ")
		mod, target, ok := strings.Cut(line, "=>")
		if !ok || !strings.HasPrefix(strings.TrimSpace(target), "./staging/") {
			continue
		}
		mod = strings.TrimSpace(mod)
		out = append(out, fmt.Sprintf("replace %s => %s %s", mod, mod, stagingVersion))
	}
	return out
}

// ensure returns the cached binary for r, building it if it is missing or
// reports another version.
func ensure(ctx context.Context, cacheDir string, r recipe, out io.Writer) (string, error) {
	bin := filepath.Join(cacheDir, "bin", r.name+"-"+r.version)
	if reportsVersion(ctx, bin, r) {
		return bin, nil
	}
	fmt.Fprintf(out, "lab: building %s %s from the Go module proxy (first time: minutes)\n", r.name, r.version)
	start := time.Now()
	if err := build(ctx, cacheDir, r, bin, out); err != nil {
		return "", fmt.Errorf("build %s %s: %w", r.name, r.version, err)
	}
	if !reportsVersion(ctx, bin, r) {
		return "", fmt.Errorf("built %s does not report %q", bin, r.wantVersion)
	}
	fmt.Fprintf(out, "lab: built %s %s in %s\n", r.name, r.version, time.Since(start).Round(time.Second))
	return bin, nil
}

func reportsVersion(ctx context.Context, bin string, r recipe) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	args := r.versionArgs
	if args == nil {
		args = []string{"--version"}
	}
	got, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return err == nil && strings.Contains(string(got), r.wantVersion)
}

func build(ctx context.Context, cacheDir string, r recipe, bin string, out io.Writer) error {
	dir := filepath.Join(cacheDir, "src", r.name+"-"+r.version)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// Chosen before go.mod requires the module: the machine's go refuses
	// a module graph that needs a newer Go.
	toolchain, err := toolchainFor(ctx, dir, r.module, r.version)
	if err != nil {
		return err
	}
	if toolchain != "" {
		fmt.Fprintf(out, "lab: %s %s needs a newer Go: building with GOTOOLCHAIN=%s\n", r.name, r.version, toolchain)
		ctx = withToolchain(ctx, toolchain)
	}
	gomod := fmt.Sprintf("module skewgate.lab/build\n\ngo 1.26\n\nrequire %s %s\n", r.module, r.version)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	if r.replaces != nil {
		if _, err := goOutput(ctx, dir, "mod", "download", r.module); err != nil {
			return err
		}
		lines, err := r.replaces(ctx, dir)
		if err != nil {
			return err
		}
		gomod += strings.Join(lines, "\n") + "\n"
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "lab: %s %s: resolving modules\n", r.name, r.version)
	if _, err := goOutput(ctx, dir, "get", r.pkg+"@"+r.version); err != nil {
		return err
	}
	return goBuild(ctx, dir, r, bin+".tmp", out)
}

// goBuild runs `go build -v`, reporting every 15 s how many packages it has
// compiled so a long first build never looks hung.
func goBuild(ctx context.Context, dir string, r recipe, tmp string, out io.Writer) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-v", "-o", tmp, "-ldflags", r.ldflags, r.pkg)
	cmd.Dir = dir
	cmd.Env = goEnv(ctx)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	var compiled atomic.Int64
	var tail []string
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go reportProgress(out, r, &compiled, done)
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		compiled.Add(1)
		tail = append(tail, sc.Text())
		if len(tail) > 20 {
			tail = tail[1:]
		}
	}
	err = cmd.Wait()
	close(done)
	if err != nil {
		return fmt.Errorf("go build: %w\n%s", err, strings.Join(tail, "\n"))
	}
	return os.Rename(tmp, strings.TrimSuffix(tmp, ".tmp"))
}

func reportProgress(out io.Writer, r recipe, compiled *atomic.Int64, done <-chan struct{}) {
	start := time.Now()
	t := time.NewTicker(15 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			fmt.Fprintf(out, "lab: building %s %s: %s, %d packages compiled\n",
				r.name, r.version, time.Since(start).Round(time.Second), compiled.Load())
		}
	}
}

func goOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = goEnv(ctx)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
