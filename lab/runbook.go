package lab

import (
	"fmt"
	"strings"

	"github.com/skewgate/skewgate/docs"
)

// RunbookStep returns the shell blocks (```sh fences) of the runbook's
// section "## <step>. …" (docs/runbook.md), in order, each as written,
// its indentation (a block inside a list item) removed. It panics if the
// step has none: the lab runs what the page says, and a page that lost a
// step is a bug in the page or the lab.
func RunbookStep(step string) []string {
	blocks := runbookBlocks(docs.Runbook)[step]
	if len(blocks) == 0 {
		panic(fmt.Sprintf("docs/runbook.md: no sh block in step %q", step))
	}
	return blocks
}

// RunbookSteps lists every step of the runbook that has shell blocks, and
// their blocks.
func RunbookSteps() map[string][]string { return runbookBlocks(docs.Runbook) }

// runbookBlocks maps each "## <step>. …" section of md to its sh blocks.
func runbookBlocks(md string) map[string][]string {
	out := map[string][]string{}
	step, indent := "", ""
	var block []string
	inBlock := false
	for line := range strings.SplitSeq(md, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case inBlock && trimmed == "```":
			out[step] = append(out[step], strings.Join(block, "\n")+"\n")
			inBlock, block = false, nil
		case inBlock:
			block = append(block, strings.TrimPrefix(line, indent))
		case trimmed == "```sh":
			inBlock, indent = true, line[:strings.Index(line, "```")]
		case strings.HasPrefix(line, "## "):
			step, _, _ = strings.Cut(strings.TrimPrefix(line, "## "), ".")
		}
	}
	return out
}
