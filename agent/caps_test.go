package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/lab/testenv"
)

// runAgentChild is the kernel side as `skewgate run --steering` starts it in
// a hostNetwork pod: already in the node's network namespace (the parent
// enters it with nsenter), with the capabilities it was given, connstat on
// SGT_CGROUP and steering of targetAddr into its listener. It prints
// "ready" once steering holds, then greets "child" until killed.
func runAgentChild() error {
	ln, err := NewListener(proxyAddr)
	if err != nil {
		return err
	}
	pins := os.Getenv("SGT_PINS")
	cs, err := StartConnStat(ConnStatConfig{PinPath: pins, ProxyPort: 16443, ProxyTGID: OwnTGID(), CgroupPath: os.Getenv("SGT_CGROUP")})
	if err != nil {
		return err
	}
	if st := cs.Status(); st.State == StateDisabled {
		return errors.New(st.String())
	}
	s, err := StartSteering(context.Background(), SteeringConfig{
		PinPath: pins, Targets: []netip.AddrPort{netip.MustParseAddrPort(targetAddr)},
		Lease: 2 * time.Second, Renew: 100 * time.Millisecond,
	}, ln)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(5 * time.Second); s.Status().State != StateSteering; time.Sleep(10 * time.Millisecond) {
		if s.Status().State == StateDisabled || time.Now().After(deadline) {
			return fmt.Errorf("steering: %s", s.Status())
		}
	}
	fmt.Println("ready")
	return answerAsChild(ln)
}

// manifestCapabilities are the capabilities the DaemonSet grants skewgate.
func manifestCapabilities(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../deploy/kubernetes/base/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(data, &ds); err != nil {
		t.Fatalf("daemonset.yaml: %v", err)
	}
	sc := ds.Spec.Template.Spec.Containers[0].SecurityContext
	if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Fatal("daemonset.yaml: want capabilities drop [ALL] and an explicit add list")
	}
	var caps []string
	for _, c := range sc.Capabilities.Add {
		caps = append(caps, string(c))
	}
	return caps
}

// startAgentChild runs runAgentChild in n's namespace with exactly caps
// (setpriv bounds root's capabilities as a container runtime does) and
// returns it once ready, or its error output when it exits.
func startAgentChild(t *testing.T, n *node, caps []string) (*child, string) {
	t.Helper()
	bounding := "-all"
	for _, c := range caps {
		bounding += ",+" + strings.ToLower(c)
	}
	cmd := exec.Command(testenv.RequireCommand(t, "nsenter", "util-linux"), "--net="+n.ns.path, "--",
		testenv.RequireCommand(t, "setpriv", "util-linux"), "--inh-caps=-all", "--bounding-set="+bounding, "--", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SGT_CHILD=agent", "SGT_PINS="+n.pins)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	c, out := spawn(t, cmd)
	line, _ := out.ReadString('\n')
	if strings.TrimSpace(line) == "ready" {
		return c, ""
	}
	c.cmd.Wait()
	return nil, stderr.String()
}

// TestCapabilities runs the agent as the DaemonSet does: root in the
// node's network namespace with only the manifest's capabilities. It
// steers and counts with them, and fails, not permitted, without any one.
func TestCapabilities(t *testing.T) {
	testenv.RequireRoot(t)
	caps := manifestCapabilities(t)
	t.Run(strings.Join(caps, ","), func(t *testing.T) {
		n := newNode(t)
		if _, errOut := startAgentChild(t, n, caps); errOut != "" {
			t.Fatalf("agent with %v: %s", caps, errOut)
		}
		if got := n.dial.who(t, targetAddr); got != "child" {
			t.Fatalf("with the manifest's capabilities a new connection reached %q, want the agent", got)
		}
	})
	for i := range caps {
		fewer := slices.Delete(slices.Clone(caps), i, i+1)
		t.Run("without "+caps[i], func(t *testing.T) {
			n := newNode(t)
			_, errOut := startAgentChild(t, n, fewer)
			if !strings.Contains(errOut, ErrNotPermitted.Error()) {
				t.Fatalf("agent without %s: want %q, got %q", caps[i], ErrNotPermitted, errOut)
			}
			if got := n.dial.who(t, targetAddr); got != "origin" {
				t.Errorf("agent without %s: a new connection reached %q, want the apiserver (fail open)", caps[i], got)
			}
			t.Logf("without %s: %s", caps[i], strings.TrimSpace(errOut))
		})
	}
}

// TestCgroupRoot: the pod mounts the host's /sys/fs/cgroup, unified or
// hybrid; CgroupRoot finds the cgroup v2 root in either and refuses
// anything else by name.
func TestCgroupRoot(t *testing.T) {
	want, err := cgroup2Root()
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("no cgroup2 mount, and CI=true forbids skipping: %v", err)
		}
		t.Skipf("no cgroup2 mount here (runs in CI): %v", err)
	}
	dirs := []string{"", want}
	if filepath.Base(want) == "unified" { // a hybrid host, like this one
		dirs = append(dirs, filepath.Dir(want))
	}
	for _, dir := range dirs {
		if got, err := CgroupRoot(dir); err != nil || got != want {
			t.Errorf("CgroupRoot(%s) = %q, %v; want %s", dir, got, err, want)
		}
	}
	tmp := t.TempDir()
	if _, err := CgroupRoot(tmp); err == nil || !strings.Contains(err.Error(), tmp) {
		t.Errorf("CgroupRoot(%s): err %v, want one naming it", tmp, err)
	}
}
