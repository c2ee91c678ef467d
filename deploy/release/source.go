package release

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// source is the commit a release is built from.
type source struct {
	Commit string
	Date   time.Time // the commit's: every timestamp in the image
}

// readSource returns root's HEAD after checking that the tree is clean
// (no change or untracked file git does not ignore) and that no tag
// version names another commit.
func readSource(ctx context.Context, root, version string) (source, error) {
	status, err := git(ctx, root, "status", "--porcelain", "--untracked-files=normal")
	if err != nil {
		return source{}, err
	}
	if status != "" {
		lines := strings.Split(status, "\n")
		if len(lines) > 5 {
			lines = append(lines[:5], "…")
		}
		return source{}, fmt.Errorf("%w: commit or stash them first:\n%s", ErrDirty, strings.Join(lines, "\n"))
	}
	commit, err := git(ctx, root, "rev-parse", "HEAD")
	if err != nil {
		return source{}, err
	}
	date, err := git(ctx, root, "log", "-1", "--format=%cI")
	if err != nil {
		return source{}, err
	}
	t, err := time.Parse(time.RFC3339, date)
	if err != nil {
		return source{}, fmt.Errorf("commit date %q: %w", date, err)
	}
	if tagged, err := git(ctx, root, "rev-parse", "-q", "--verify", "refs/tags/"+version+"^{commit}"); err == nil && tagged != commit {
		return source{}, fmt.Errorf("tag %s is commit %s, the tree is at %s: release the tagged commit", version, tagged, commit)
	}
	return source{Commit: commit, Date: t.UTC()}, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(string(out)), nil
}
