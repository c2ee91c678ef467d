package bench

import "testing"

func TestReplaceSection(t *testing.T) {
	doc := "# B\n\n## Goals\n\ng\n\n## Scale\n\nold\n\n## Reading\n\nr\n"
	got := ReplaceSection(doc, ScaleHeading, "## Scale\n\nnew\n")
	if want := "# B\n\n## Goals\n\ng\n\n## Scale\n\nnew\n\n## Reading\n\nr\n"; got != want {
		t.Errorf("middle section:\n%q\nwant\n%q", got, want)
	}
	last := "# B\n\n## Scale\n\nold\n"
	if got, want := ReplaceSection(last, ScaleHeading, "## Scale\n\nnew"), "# B\n\n## Scale\n\nnew\n"; got != want {
		t.Errorf("last section: %q, want %q", got, want)
	}
	if got, want := ReplaceSection("# B\n", ScaleHeading, "## Scale\n\nnew\n"), "# B\n\n## Scale\n\nnew\n"; got != want {
		t.Errorf("no section: %q, want %q", got, want)
	}
	if got := Section(got, ScaleHeading); got != "## Scale\n\nnew\n\n" {
		t.Errorf("Section = %q", got)
	}
}
