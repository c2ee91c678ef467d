package connstat

import (
	"testing"

	"github.com/skewgate/skewgate/lab/testenv"
)

// TestLoad checks that the kernel's verifier accepts connstat. sock_ops
// cannot run under BPF_PROG_RUN; its behaviour is tested in package agent
// with real connections.
func TestLoad(t *testing.T) {
	testenv.RequireRoot(t)
	var objs ConnstatObjects
	if err := LoadConnstatObjects(&objs, nil); err != nil {
		t.Fatal(err)
	}
	objs.Close()
}
