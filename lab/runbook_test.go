package lab

import (
	"slices"
	"strings"
	"testing"
)

func TestRunbookBlocks(t *testing.T) {
	md := "# T\n## 0. Pre\n\n```sh\nskewgate preflight \\\n  --x\n```\n## 7. Rollback\n\n1. Put back\n\n   ```sh\n   B=$(ls)\n   cp \"$B/a\" b\n   ```\n\n```sh\nkubectl get x\n```\n## 8. End\ntext\n"
	got := runbookBlocks(md)
	want := map[string][]string{
		"0": {"skewgate preflight \\\n  --x\n"},
		"7": {"B=$(ls)\ncp \"$B/a\" b\n", "kubectl get x\n"},
	}
	if len(got) != len(want) {
		t.Fatalf("steps %v, want %v", got, want)
	}
	for step, blocks := range want {
		if !slices.Equal(got[step], blocks) {
			t.Errorf("step %s: %q, want %q", step, got[step], blocks)
		}
	}
	// The real page: the rollback step copies the control plane's
	// manifests back, not etcd's.
	rollback := strings.Join(RunbookStep("7"), "")
	if !strings.Contains(rollback, "kube-apiserver.yaml") || strings.Contains(rollback, "cp \"$B/etcd.yaml\"") {
		t.Errorf("runbook step 7:\n%s", rollback)
	}
}
