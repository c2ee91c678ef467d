package drill

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 44: the drill reports opened with a page of definitions; an
// operator wants the answer first. A generated report's first section is
// the answer table, one row per mode, before any definition.
func TestReportOpensWithTheAnswer(t *testing.T) {
	p, err := PairOf("v1.35.4", "v1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	writeAnswer(&b, p, []*Result{{Mode: ModeNone}, {Mode: ModeSkewgateAuto, Loss: &Loss{GCDeleted: []string{"drill-gc/cm-1"}}}})
	got := b.String()
	for _, want := range []string{"## The answer", "| v1.35.4 → v1.36.3 | " + ModeNone + " | **0** |", "| " + ModeSkewgateAuto + " | **0** | 0 | 0 | 0 | 0 of 0 | 1 |"} {
		if !strings.Contains(got, want) {
			t.Errorf("answer lacks %q:\n%s", want, got)
		}
	}
	// The committed reports too: the answer before the definitions.
	reports, err := filepath.Glob("../../docs/upgrade-drill*.md")
	if err != nil || len(reports) == 0 {
		t.Fatalf("no committed drill report (%v)", err)
	}
	for _, f := range reports {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		answer, defs := bytes.Index(data, []byte("\n## The answer\n")), bytes.Index(data, []byte("A **false 404** is"))
		first := bytes.Index(data, []byte("\n## "))
		if answer < 0 || answer != first || (defs >= 0 && defs < answer) {
			t.Errorf("%s does not open with the answer (## The answer at %d, first section at %d, definitions at %d)", filepath.Base(f), answer, first, defs)
		}
	}
}
