package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 44: architecture.md did not show proxy/upgrade, proxy/plan,
// proxy/status, proxy/drain or the plugin. Every package of the two halves
// and of cmd/ is in its table.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	page, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, root := range []string{"agent", "bpf", "cmd", "proxy"} {
		err := filepath.WalkDir(filepath.Join("..", root), func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			if d.Name() == "testdata" || strings.HasSuffix(d.Name(), "test") {
				return filepath.SkipDir // test helpers: admintest, statustest
			}
			if !hasGo(t, path) {
				return nil
			}
			seen++
			pkg := filepath.ToSlash(strings.TrimPrefix(path, ".."+string(filepath.Separator)))
			if !strings.Contains(string(page), "`"+pkg+"`") {
				t.Errorf("docs/architecture.md does not name package %s", pkg)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if seen < 10 {
		t.Fatalf("found %d packages: the walk is broken", seen)
	}
}

func hasGo(t *testing.T, dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") {
			return true
		}
	}
	return false
}
