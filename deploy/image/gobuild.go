package image

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// GoBinary describes a static Go executable to build for an image.
type GoBinary struct {
	Dir     string // module directory to build in
	Package string // e.g. ./cmd/skewgate
	LDFlags string
	Out     string
	Arch    string // GOARCH to build for, on GOOS linux (default: this machine's)
}

// Build compiles b with CGO_ENABLED=0 (no libc in an image with no base)
// and -trimpath (no path of this machine in the binary, so two checkouts
// of one commit build the same bytes).
func (b GoBinary) Build(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", b.LDFlags, "-o", b.Out, b.Package)
	cmd.Dir = b.Dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b.Arch != "" {
		cmd.Env = append(cmd.Env, "GOOS=linux", "GOARCH="+b.Arch)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", b.Package, err, out)
	}
	return nil
}

// Archive builds b, makes the image of it described by s (s.Binary is
// b.Out) and writes it to out, tagged ref. It returns the image.
func Archive(ctx context.Context, b GoBinary, s Spec, ref, out string) (v1.Image, error) {
	if err := b.Build(ctx); err != nil {
		return nil, err
	}
	s.Binary = b.Out
	img, err := Build(s)
	if err != nil {
		return nil, err
	}
	return img, WriteArchive(img, ref, s.Created, out)
}
