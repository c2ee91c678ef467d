package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/lab/drill"
)

// TestSupportMatrix holds support.md to what the tests and drills run:
// every evidence a row names exists (a test function in its package, a
// t.Run subtest of it, or a drill report showing the row's pair); every
// Kubernetes pair is one the drill runs (lab/drill.Pairs); every pair the
// drill runs has a row.
func TestSupportMatrix(t *testing.T) {
	page, err := os.ReadFile("support.md")
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]bool{}
	for _, p := range drill.Pairs {
		runs[p.From+" → "+p.To] = true
	}
	listed := map[string]bool{}
	rows := 0
	for _, row := range tableRows(string(page)) {
		evidence := evidenceOf(row[len(row)-1])
		if len(evidence) == 0 {
			continue // a header or a row of Not measured's kind: no claim
		}
		rows++
		pair := ""
		if m := regexp.MustCompile(`^(v[\d.]+(?:-[\w.]+)? → v[\d.]+(?:-[\w.]+)?)$`).FindStringSubmatch(row[0]); m != nil {
			pair = m[1]
			listed[pair] = true
			if !runs[pair] {
				t.Errorf("support.md claims %s, which lab/drill.Pairs does not run", pair)
			}
		}
		for _, e := range evidence {
			if err := checkEvidence(e, pair); err != nil {
				t.Errorf("support.md row %q: %v", row[0], err)
			}
		}
	}
	for pair := range runs {
		if !listed[pair] {
			t.Errorf("the drill runs %s, support.md has no row for it", pair)
		}
	}
	if rows < 10 {
		t.Fatalf("support.md: %d rows with evidence read; the table format changed?", rows)
	}
}

// tableRows are the cells of every markdown table row of page.
func tableRows(page string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(page, "\n") {
		if !strings.HasPrefix(l, "| ") || strings.HasPrefix(l, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), " | ")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	return rows
}

var evidenceRE = regexp.MustCompile("`((?:docs/[\\w.-]+\\.md)|(?:[\\w/]+\\.Test\\w+(?:/\\w+)?))`")

// evidenceOf is the evidence a cell names: docs/….md and pkg.TestName[/sub].
func evidenceOf(cell string) []string {
	var out []string
	for _, m := range evidenceRE.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// checkEvidence returns an error unless e exists: a report that shows
// pair in a table row, or a test (and subtest) in the package's test files.
func checkEvidence(e, pair string) error {
	if doc, ok := strings.CutPrefix(e, "docs/"); ok {
		data, err := os.ReadFile(doc)
		if err != nil {
			return err
		}
		if pair != "" && !strings.Contains(string(data), "| "+pair+" |") {
			return &evidenceError{e, "shows no row for " + pair}
		}
		return nil
	}
	pkg, test, _ := strings.Cut(e, ".")
	test, sub, _ := strings.Cut(test, "/")
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("..", pkg, "*_test.go"))
	if err != nil || len(files) == 0 {
		return &evidenceError{e, "no test files in " + pkg}
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			return err
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Name.Name != test {
				continue
			}
			if sub != "" && !strings.Contains(string(src[fset.Position(fn.Pos()).Offset:fset.Position(fn.End()).Offset]), `t.Run("`+sub+`"`) {
				return &evidenceError{e, test + " runs no subtest " + sub}
			}
			return nil
		}
	}
	return &evidenceError{e, "no such test in " + pkg}
}

type evidenceError struct{ evidence, why string }

func (e *evidenceError) Error() string { return e.evidence + ": " + e.why }
