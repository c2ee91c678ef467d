package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// NewerGoToolchain is the Go toolchain the lab builds a module with when
// the machine's Go is older than the module's go directive (Kubernetes
// 1.38's k8s.io libraries need Go 1.27). The go command fetches it from
// the module proxy as golang.org/toolchain; only that build uses it.
const NewerGoToolchain = "go1.27.3"

type toolchainKey struct{}

// withToolchain makes every go command run under ctx use GOTOOLCHAIN=t.
func withToolchain(ctx context.Context, t string) context.Context {
	return context.WithValue(ctx, toolchainKey{}, t)
}

// goEnv is the environment of the lab's go commands: the throwaway
// module's go.mod is the only one (no workspace), it may be edited, and
// the toolchain is ctx's when one was chosen.
func goEnv(ctx context.Context) []string {
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if t, ok := ctx.Value(toolchainKey{}).(string); ok {
		env = append(env, "GOTOOLCHAIN="+t)
	}
	return env
}

// toolchainFor is "" when the machine's Go can build module@version,
// NewerGoToolchain when only that can, and an error when neither can.
func toolchainFor(ctx context.Context, dir, module, version string) (string, error) {
	// go list -m, unlike go mod download, answers whatever Go the
	// module needs.
	path, err := goOutput(ctx, dir, "list", "-m", "-f", "{{.GoMod}}", module+"@"+version)
	if err != nil {
		return "", err
	}
	path = strings.TrimSpace(path)
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s@%s go.mod: %w", module, version, err)
	}
	f, err := modfile.ParseLax(path, data, nil)
	if err != nil {
		return "", fmt.Errorf("parse %s@%s go.mod: %w", module, version, err)
	}
	local, err := goOutput(ctx, dir, "env", "GOVERSION")
	if err != nil {
		return "", err
	}
	t, err := pickToolchain(f.Go, strings.TrimSpace(local))
	if err != nil {
		return "", fmt.Errorf("%s@%s %w", module, version, err)
	}
	return t, nil
}

// downloadedModule is what `go mod download -json` says of a module.
type downloadedModule struct {
	Dir string // its source
}

// downloadModule fetches module@version into the module cache, with or
// without a go.mod in dir; under ctx's toolchain (toolchainFor) when the
// module needs a newer Go than the machine's.
func downloadModule(ctx context.Context, dir, module, version string) (downloadedModule, error) {
	var m downloadedModule
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir, cmd.Env = dir, goEnv(ctx)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output() // JSON, also when it failed (its Error field)
	if err != nil {
		return m, fmt.Errorf("go mod download %s@%s: %w\n%s%s", module, version, err, out, stderr.String())
	}
	if err := json.Unmarshal(out, &m); err != nil {
		return m, fmt.Errorf("go mod download %s@%s: %w", module, version, err)
	}
	return m, nil
}

// pickToolchain compares a go directive (nil: none) with the machine's
// GOVERSION (go1.26.8).
func pickToolchain(need *modfile.Go, local string) (string, error) {
	if need == nil || !newerGo(need.Version, local) {
		return "", nil
	}
	if newerGo(need.Version, NewerGoToolchain) {
		return "", fmt.Errorf("needs Go %s, newer than %s and the lab's %s", need.Version, local, NewerGoToolchain)
	}
	return NewerGoToolchain, nil
}

// newerGo reports whether go directive version v (1.27, 1.27.0) is newer
// than toolchain t (go1.26.8).
func newerGo(v, t string) bool {
	return semver.Compare("v"+v, "v"+strings.TrimPrefix(t, "go")) > 0
}
