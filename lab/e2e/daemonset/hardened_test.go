package daemonset

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// Capability bits of /proc/<pid>/status (linux/capability.h).
const (
	capNetAdmin = 12
	capBPF      = 39
)

// hardened: each node's pod process runs as the manifest's
// securityContext says, as the kernel sees it: a seccomp filter (the
// runtime's default profile, which must allow skewgate's bpf() calls for
// the rest of TestDaemonSet to pass), no_new_privs, exactly CAP_BPF and
// CAP_NET_ADMIN, UID 0, and a read-only root filesystem.
func hardened(t *testing.T) {
	wantCaps := fmt.Sprintf("%016x", uint64(1)<<capNetAdmin|uint64(1)<<capBPF)
	for _, n := range plane.Spec.Nodes {
		pid := podPID(t, n)
		status := procFields(t, fmt.Sprintf("/proc/%d/status", pid))
		want := map[string]string{
			"Seccomp":    "2", // SECCOMP_MODE_FILTER
			"NoNewPrivs": "1",
			"CapEff":     wantCaps,
			"CapPrm":     wantCaps,
			"CapBnd":     wantCaps,
			"CapAmb":     "0000000000000000",
		}
		for k, v := range want {
			if status[k] != v {
				t.Errorf("%s: pod process %d: %s %q, want %q", n.Name, pid, k, status[k], v)
			}
		}
		if uid := strings.Fields(status["Uid"]); len(uid) == 0 || uid[0] != "0" {
			t.Errorf("%s: pod process %d: Uid %q, want 0", n.Name, pid, status["Uid"])
		}
		root := rootMountOptions(t, pid)
		if !strings.Contains(","+root+",", ",ro,") {
			t.Errorf("%s: pod process %d: / mounted %q, want ro", n.Name, pid, root)
		}
		t.Logf("%s: pod process %d: Seccomp %s (%s filters), NoNewPrivs %s, CapEff %s, Uid %s, / %s",
			n.Name, pid, status["Seccomp"], status["Seccomp_filters"], status["NoNewPrivs"], status["CapEff"], status["Uid"], root)
	}
}

// procFields reads a /proc "Key:\tvalue" file.
func procFields(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	return fields
}

// rootMountOptions is the per-mount options of / as process pid sees it
// (its mount namespace's root: the container's root filesystem).
func rootMountOptions(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	opts := ""
	for _, line := range strings.Split(string(data), "\n") {
		// id parent major:minor root mountpoint options ...
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == "/" {
			opts = f[5] // the last mount on / is the one in effect
		}
	}
	if opts == "" {
		t.Fatalf("no / in /proc/%d/mountinfo", pid)
	}
	return opts
}
