package kubernetes_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/lab/testenv"
)

// TestHostPIDOpensNoOtherRoot backs docs/deploy.md's claim that hostPID
// gives the pod no way around its file mounts: a root process bounded to
// the DaemonSet's capabilities (setpriv, as a container runtime bounds
// them) cannot read through /proc/<pid>/root of a root process with more
// (the kernel's ptrace access check: the target's permitted capabilities
// must be a subset of the caller's), while the same read without the bound
// works.
func TestHostPIDOpensNoOtherRoot(t *testing.T) {
	testenv.RequireRoot(t)
	setpriv := testenv.RequireCommand(t, "setpriv", "util-linux")
	target := exec.Command("sleep", "60")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { target.Process.Kill(); target.Wait() }()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary itself, read through the target's root.
	through := fmt.Sprintf("/proc/%d/root%s", target.Process.Pid, self)
	if out, err := exec.Command("head", "-c", "4", through).CombinedOutput(); err != nil {
		t.Fatalf("unbounded root cannot read %s (%v: %s): the check below would prove nothing", through, err, out)
	}
	caps := daemonSetCaps(t)
	out, err := exec.Command(setpriv, "--inh-caps=-all", "--bounding-set=-all,"+caps, "--", "head", "-c", "4", through).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Errorf("root bounded to %s read %s: %v %q, want permission denied", caps, through, err, out)
	}
}

// daemonSetCaps is the DaemonSet's added capabilities as setpriv takes
// them: "+bpf,+net_admin".
func daemonSetCaps(t *testing.T) string {
	t.Helper()
	spec := podSpecs(t)["base: DaemonSet skewgate"]
	var caps []string
	for _, c := range spec.Containers[0].SecurityContext.Capabilities.Add {
		caps = append(caps, "+"+strings.ToLower(string(c)))
	}
	if len(caps) == 0 {
		t.Fatal("the DaemonSet adds no capabilities")
	}
	return strings.Join(caps, ",")
}
