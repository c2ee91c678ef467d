package bench

import (
	"os"
	"path/filepath"
	"strings"
)

// ScaleHeading opens the section of docs/benchmarks.md that `make scale`
// writes (lab/e2e BenchmarkScale). `make bench` writes the rest of the file
// and carries this section over unchanged: the two runs take minutes each
// and measure different things, so neither erases the other's figures.
const ScaleHeading = "## Scale"

// ScaleNotesHeading opens the hand-kept notes on scale runs that did not
// fit this machine; like the Scale section, make bench keeps it.
const ScaleNotesHeading = "## Scale: what did not fit"

// Section returns doc's section that starts with the line heading, up to
// the next "## " heading or the end, or "" when doc has none.
func Section(doc, heading string) string {
	start := strings.Index(doc, "\n"+heading+"\n")
	if start < 0 {
		return ""
	}
	start++
	rest := doc[start+len(heading)+1:]
	if end := strings.Index(rest, "\n## "); end >= 0 {
		return doc[start : start+len(heading)+1+end+1]
	}
	return doc[start:]
}

// ReplaceSection returns doc with its section under heading replaced by
// section (which starts with that heading), or section appended when doc
// has none.
func ReplaceSection(doc, heading, section string) string {
	section = strings.TrimRight(section, "\n") + "\n"
	old := Section(doc, heading)
	if old == "" {
		return strings.TrimRight(doc, "\n") + "\n\n" + section
	}
	if !strings.HasSuffix(old, "\n") || strings.HasSuffix(doc, old) {
		return strings.Replace(doc, old, section, 1)
	}
	return strings.Replace(doc, old, section+"\n", 1)
}

// WriteScaleSection writes section into docsDir/benchmarks.md in place of
// the previous one.
func WriteScaleSection(docsDir, section string) error {
	path := filepath.Join(docsDir, "benchmarks.md")
	doc, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.WriteFile(path, []byte(ReplaceSection(string(doc), ScaleHeading, section)), 0o644)
}

// Machine describes the host: kernel, CPU model, cores, Go.
func Machine() string { return machine() }
