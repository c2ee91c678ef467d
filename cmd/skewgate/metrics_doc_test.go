package main

import (
	"strings"
	"testing"

	"github.com/skewgate/skewgate/docs"
)

// Issue 44: what the command registers itself (skewgate_build_info; Go's
// and the process's collectors are not skewgate's) has its row in
// docs/metrics.md; the proxy's and the agent's are held to it in their
// packages.
func TestMetricsDocumented(t *testing.T) {
	reg := docs.NewRecorder()
	registerProcess(reg)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	ms, err := docs.Described("cmd/skewgate", reg.Collectors, fams)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := docs.Undocumented("cmd/skewgate", ms)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Errorf("docs/metrics.md and cmd/skewgate disagree:\n%s", strings.Join(problems, "\n"))
	}
}
