package daemonset

import (
	"errors"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/labtest"
)

// workloadsPath is served only by v1.36 (scheduling.k8s.io/v1alpha2): on
// node-a (v1.35.4) alone it is a false 404.
const workloadsPath = "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads"

// leaseSlack is how long after its agent is gone steering must have failed
// open: the agent's lease (2 s) and the time to notice.
const leaseSlack = 5 * time.Second

// TestDaemonSet is the life of skewgate as a DaemonSet, in order: apply,
// the pod confined as its securityContext says (seccomp, no_new_privs,
// two capabilities, a read-only root), only the six pki files it reads in
// the pod, `kubectl skewgate status` through the apiserver alone (the
// bastion path, its refusals too), the false 404 fixed through
// the pod (and back with `steer off` on the host), its serving certificate
// renewed on the node and served without a restart, a rollout and a
// deletion with no failed new connection, the static-pod form taking over
// node-a's pins (fixed, upgraded by editing its file, removed), an
// uninstall that leaves nothing in the kernel, and the documented removal
// (kustomize, then Helm) that leaves nothing on the nodes or in the
// cluster.
func TestDaemonSet(t *testing.T) {
	c := admin(t)
	a := plane.Spec.Nodes[0]
	if a.Minor() >= 36 {
		t.Fatalf("node %s runs %s: want the old version first", a.Name, a.Version)
	}
	decoyKey(t)
	t0 := time.Now()
	applyBase(t, images[0])
	waitRolledOut(t, c, images[0], 3*time.Minute)
	ready := time.Since(t0)
	engaged := ready + waitSteering(t, true, time.Minute)
	t.Logf("apply → pods Ready %s, → steering engaged on every node %s", ready.Round(time.Millisecond), engaged.Round(time.Millisecond))
	for _, n := range plane.Spec.Nodes {
		pid, kib := podRSS(t, n)
		t.Logf("%s: pod process %d RSS %.1f MiB", n.Name, pid, float64(kib)/1024)
	}
	t.Logf("logs of a pod, through its kubelet:\n%s", podLogs(t, c))

	t.Run("hardened", hardened)
	t.Run("pki", pkiSeen)
	t.Run("through apiserver", throughAPIServer)
	t.Run("false404", func(t *testing.T) { falseFourOhFour(t, a) })
	t.Run("renew", func(t *testing.T) { renew(t, a) })
	t.Run("rollout", func(t *testing.T) {
		logs := keepPodLogs()
		loop := startLoop(t, a.URL())
		t1 := time.Now()
		setImage(t, c, images[1])
		waitRolledOut(t, c, images[1], 3*time.Minute)
		waitSteering(t, true, time.Minute)
		rolled := time.Since(t1)
		time.Sleep(time.Second)
		loop.Stop()
		t.Logf("rollout %s → %s in %s; %s", images[0], images[1], rolled.Round(time.Millisecond), loop)
		// The new pods take the old ones' sockets (--handover, maxSurge):
		// not one connection reaches the apiserver past skewgate.
		kept := logs.Stop(40)
		if loop.failed != 0 || loop.tried == 0 || loop.direct != 0 {
			t.Errorf("rollout: %s\n%s", loop, kept)
		}
	})
	t.Run("pod deleted", func(t *testing.T) {
		// An eviction, a drain, kubectl delete pod: the DaemonSet starts
		// the replacement beside the terminating pod (maxSurge), which
		// keeps serving until the replacement takes its sockets.
		logs := keepPodLogs()
		loop := startLoop(t, a.URL())
		old := deleteNodePod(t, c, a)
		replaced := waitReplaced(t, c, a, old, 2*time.Minute)
		time.Sleep(time.Second)
		loop.Stop()
		t.Logf("%s's pod %s deleted, replacement ready and the old one gone in %s; %s", a.Name, old, replaced.Round(time.Millisecond), loop)
		kept := logs.Stop(40)
		if loop.failed != 0 || loop.tried == 0 || loop.direct != 0 {
			t.Errorf("pod deleted: %s\n%s", loop, kept)
		}
	})
	t.Run("prometheus", prometheusScrapes)
	t.Run("delete", func(t *testing.T) {
		loop := startLoop(t, a.URL())
		deleteDaemonSet(t, c, 2*time.Minute)
		fellBack := waitSteering(t, false, leaseSlack)
		time.Sleep(time.Second)
		loop.Stop()
		t.Logf("DaemonSet deleted; steering failed open %s after its pods were gone; %s", fellBack.Round(time.Millisecond), loop)
		if loop.failed != 0 || loop.tried == 0 {
			t.Errorf("delete: %s", loop)
		}
		if code, route, err := labtest.Get(labtest.FreshClient(t, plane), a.URL()+workloadsPath); err != nil || code != http.StatusNotFound || route != "" {
			t.Errorf("without skewgate node-a answers the workloads list %d (route %q) %v, want its own (false) 404", code, route, err)
		}
	})
	t.Run("staticpod", func(t *testing.T) { staticPod(t, a) })
	t.Run("uninstall", uninstall)
	t.Run("removal", removalRounds)
}

// falseFourOhFour: node-a's address answers a v1.36-only resource 200
// through the pod's steering, the false 404 with steering off from the
// host, and 200 again once it is back on.
func falseFourOhFour(t *testing.T, a lab.Node) {
	c := labtest.FreshClient(t, plane)
	pins := "--pin-path=" + lab.KubeletPinPath(a)
	want := func(code int, route, how string) {
		t.Helper()
		got, gotRoute, err := labtest.Get(c, a.URL()+workloadsPath)
		if err != nil || got != code || gotRoute != route {
			t.Errorf("%s: GET %s on %s: %d (route %q) %v, want %d (route %q)", how, workloadsPath, a.Name, got, gotRoute, err, code, route)
		}
	}
	want(http.StatusOK, "peer", "through the pod")
	t.Logf("steer off: %s", labtest.RunSkewgate(t, skewgateBin, "steer", "off", pins))
	want(http.StatusNotFound, "", "steering off")
	t.Logf("steer on: %s", labtest.RunSkewgate(t, skewgateBin, "steer", "on", pins))
	want(http.StatusOK, "peer", "steering on again")
}

// uninstall: `skewgate uninstall` on the host removes every program and
// link the DaemonSet's pods pinned on every node.
func uninstall(t *testing.T) {
	var dirs []string
	for _, n := range plane.Spec.Nodes {
		dirs = append(dirs, lab.KubeletPinPath(n))
	}
	progs, links, maps := pinnedBPF(t, dirs)
	if len(progs) == 0 || len(links) == 0 || len(maps) == 0 {
		t.Fatalf("before uninstall: %d programs, %d links, %d maps pinned under %v", len(progs), len(links), len(maps), dirs)
	}
	for _, d := range dirs {
		t.Logf("uninstall %s:\n%s", d, labtest.RunSkewgate(t, skewgateBin, "uninstall", "--pin-path", d))
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, l, m := bpfIDsAlive(t, "prog", progs), bpfIDsAlive(t, "link", links), bpfIDsAlive(t, "map", maps)
		if len(p)+len(l)+len(m) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after uninstall programs %v, links %v and maps %v still exist", p, l, m)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there after uninstall: %v", d, err)
		}
	}
	t.Logf("uninstall removed %d programs, %d links, %d maps", len(progs), len(links), len(maps))
}
