package monitoring

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/docs"
)

// heldBy are the packages whose TestMetricsDocumented builds their metrics
// as the program does and holds docs/metrics.md's rows for them.
var heldBy = []string{"agent", "proxy", "proxy/membership", "cmd/skewgate"}

// TestEveryMetricNameIsARow backs the packages' TestMetricsDocumented,
// which see only what their registration builds: a skewgate_* name written
// anywhere in the code (a collector registered somewhere else, a name
// copied as a string) has its row in docs/metrics.md, and every row names
// a package whose test holds it.
func TestEveryMetricNameIsARow(t *testing.T) {
	rows, err := docs.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, r := range rows {
		documented[r.Name] = true
		if !slices.Contains(heldBy, r.Package) {
			t.Errorf("docs/metrics.md: %s is registered in %s, which no TestMetricsDocumented holds (%v): register it where those do, or give %s the test", r.Name, r.Package, heldBy, r.Package)
		}
	}
	literal := regexp.MustCompile(`"(skewgate_[a-z0-9_]+)"`)
	for _, dir := range []string{"agent", "proxy", "cmd"} {
		err := filepath.WalkDir(filepath.Join("..", "..", dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range literal.FindAllSubmatch(src, -1) {
				if name := string(m[1]); !documented[name] {
					t.Errorf("%s names the metric %s, which docs/metrics.md has no row for: add | `%s` | type | `label`, … | what it means | `package` | and register it where its package's TestMetricsDocumented sees it", strings.TrimPrefix(filepath.ToSlash(path), "../../"), name, name)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
