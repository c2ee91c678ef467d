package monitoring

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/deploy/monitoring/dashboard"
)

// TestDocsNamePanels holds the docs to the dashboard's panel titles: the
// runbook and operations.md sent an operator to "the Window panel" and to
// the grace "on the dashboard", which had no such panels (issue 44); the
// README's alert table names panels too. Every panel has its
// row in operations.md's panel-by-panel table (TCP heatmaps and Build
// aside), every name the table or a bold panel reference gives is a
// panel's title.
func TestDocsNamePanels(t *testing.T) {
	queries, err := dashboard.Queries()
	if err != nil {
		t.Fatal(err)
	}
	var titles []string
	for _, q := range queries {
		if !slices.Contains(titles, q.Panel) {
			titles = append(titles, q.Panel)
		}
	}
	ops := string(readFile(t, "../../docs/operations.md"))
	start := strings.Index(ops, "## During: the dashboard, panel by panel")
	if start < 0 {
		t.Fatal("operations.md has no section \"During: the dashboard, panel by panel\"")
	}
	section := ops[start:]
	section = section[:strings.Index(section[3:], "\n## ")+3]
	var named []string
	for _, m := range regexp.MustCompile("(?m)^\\| ([^|]+?) \\|").FindAllStringSubmatch(section, -1) {
		if m[1] == "panel" || strings.HasPrefix(m[1], "TCP ") {
			continue
		}
		named = append(named, strings.Split(m[1], ", ")...)
	}
	if len(named) < 10 {
		t.Fatalf("found %d panel names in operations.md's table: the scan is broken", len(named))
	}
	for _, title := range titles {
		if !slices.Contains(named, title) && !strings.HasPrefix(title, "TCP ") && title != "Build" {
			t.Errorf("panel %q has no row in operations.md's panel-by-panel table: add | %s | what you should see | worry when |", title, title)
		}
	}
	bold := regexp.MustCompile(`\*\*([^*]+)\*\*`)
	for _, doc := range []string{"../../docs/operations.md", "../../docs/runbook.md", "README.md"} {
		text := string(readFile(t, doc))
		var refs []string
		for _, line := range regexp.MustCompile(`(?ms)^- Dashboard: .*?\n\n|\*\*[^*]+\*\*(\s+and\s+\*\*[^*]+\*\*)?\s+panels?\b`).FindAllString(text, -1) {
			for _, m := range bold.FindAllStringSubmatch(line, -1) {
				refs = append(refs, strings.Join(strings.Fields(m[1]), " "))
			}
		}
		for _, m := range regexp.MustCompile(`\bthe\s+([A-Z][\w ]*?)\s+panel\b`).FindAllStringSubmatch(text, -1) {
			refs = append(refs, m[1])
		}
		for _, r := range append(refs, named...) {
			if !slices.Contains(titles, r) && !strings.HasPrefix(r, "TCP ") {
				t.Errorf("%s names a panel %q the dashboard does not have; its panels: %q", doc, r, titles)
			}
		}
	}
}
