package daemonset

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/labtest"
)

// waitSteering waits until every node's pins say steering (want) or fall
// back (!want), and returns how long that took.
func waitSteering(t *testing.T, want bool, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for _, n := range plane.Spec.Nodes {
		waitNodeSteering(t, n, want, timeout-time.Since(start))
	}
	return time.Since(start)
}

// waitNodeSteering waits until node n's pins say steering (want) or fall
// back (!want), and returns how long that took.
func waitNodeSteering(t *testing.T, n lab.Node, want bool, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for {
		st, err := lab.KubeletSteering(n)
		if err == nil && st.Steering() == want {
			return time.Since(start)
		}
		last = fmt.Sprint(st, err)
		if time.Since(start) > timeout {
			t.Fatalf("%s: steering %t not reached in %s: %s", n.Name, want, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// connLoop sends GET /version on a new connection to url, one after
// another, until stopped; it counts failures (errors or non-200) and the
// answers the apiserver gave itself (no X-Skewgate-Route: the connection
// was not steered, it fell open).
type connLoop struct {
	tried, failed, direct int
	examples              []string
	start                 time.Time
	window                time.Duration
	stop                  chan struct{}
	wg                    sync.WaitGroup
}

func startLoop(t *testing.T, url string) *connLoop {
	l := &connLoop{stop: make(chan struct{}), start: time.Now()}
	c := labtest.FreshClient(t, plane)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			code, route, err := labtest.Get(c, url+"/version")
			l.tried++
			if err == nil && route == "" {
				l.direct++
			}
			if err != nil || code != http.StatusOK {
				l.failed++
				if len(l.examples) < 5 {
					l.examples = append(l.examples, fmt.Sprintf("%s (%s): %d %v", time.Since(l.start).Round(time.Millisecond), time.Now().UTC().Format("15:04:05.000"), code, err))
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return l
}

func (l *connLoop) Stop() {
	close(l.stop)
	l.wg.Wait()
	l.window = time.Since(l.start)
}

func (l *connLoop) String() string {
	return fmt.Sprintf("%d new connections in %s, %d failed %v, %d answered by the apiserver directly", l.tried, l.window.Round(time.Millisecond), l.failed, l.examples, l.direct)
}

// podRSS is the resident memory of node n's skewgate pod process.
func podRSS(t *testing.T, n lab.Node) (pid int, kib int) {
	t.Helper()
	pid = podPID(t, n)
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			fmt.Sscanf(strings.TrimPrefix(line, "VmRSS:"), "%d", &kib)
			return pid, kib
		}
	}
	t.Fatalf("%s: no VmRSS in /proc/%d/status", n.Name, pid)
	return 0, 0
}

// podPID is node n's skewgate pod process: the `/skewgate run` in n's
// network namespace.
func podPID(t *testing.T, n lab.Node) int {
	t.Helper()
	pid, ok := findPodPID(n)
	if !ok {
		t.Fatalf("no skewgate pod process in %s's network namespace", n.Name)
	}
	p, _ := strconv.Atoi(pid)
	return p
}

// findPodPID is podPID, or false when there is none (yet).
func findPodPID(n lab.Node) (string, bool) {
	var ns syscall.Stat_t
	if err := syscall.Stat(lab.NetNSPath(n.Name), &ns); err != nil {
		return "", false
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		var st syscall.Stat_t
		if strings.HasPrefix(string(cmd), "/skewgate\x00run") && syscall.Stat("/proc/"+e.Name()+"/ns/net", &st) == nil && st.Ino == ns.Ino {
			return e.Name(), true
		}
	}
	return "", false
}

// pinnedBPF are the IDs of the links and maps pinned under dirs and of the
// programs those links hold, from `bpftool -j -f link|map show`.
func pinnedBPF(t *testing.T, dirs []string) (progs, links, maps map[int]bool) {
	t.Helper()
	progs, links, maps = map[int]bool{}, map[int]bool{}, map[int]bool{}
	for _, o := range bpftoolShow(t, "link", "-f") {
		if pinnedUnder(o.Pinned, dirs) {
			links[o.ID], progs[o.ProgID] = true, true
		}
	}
	for _, o := range bpftoolShow(t, "map", "-f") {
		if pinnedUnder(o.Pinned, dirs) {
			maps[o.ID] = true
		}
	}
	return progs, links, maps
}

type bpfObject struct {
	ID     int      `json:"id"`
	ProgID int      `json:"prog_id"`
	Pinned []string `json:"pinned"`
}

func bpftoolShow(t *testing.T, kind string, flags ...string) []bpfObject {
	t.Helper()
	args := append(append([]string{"-j"}, flags...), kind, "show")
	out, err := exec.Command("bpftool", args...).Output()
	if err != nil {
		t.Fatalf("bpftool %s: %v", strings.Join(args, " "), err)
	}
	var objs []bpfObject
	if err := json.Unmarshal(out, &objs); err != nil {
		t.Fatalf("bpftool %s: %v", strings.Join(args, " "), err)
	}
	return objs
}

func pinnedUnder(pins, dirs []string) bool {
	for _, p := range pins {
		for _, d := range dirs {
			if strings.HasPrefix(p, d+"/") {
				return true
			}
		}
	}
	return false
}

// bpfIDsAlive returns which of ids still exist.
func bpfIDsAlive(t *testing.T, kind string, ids map[int]bool) []int {
	t.Helper()
	var alive []int
	for _, o := range bpftoolShow(t, kind) {
		if ids[o.ID] {
			alive = append(alive, o.ID)
		}
	}
	return alive
}

// podLogKeeper copies every skewgate pod's log on every node while it
// runs, so the logs of pods deleted meanwhile can be shown (the kubelet
// removes them with the pod).
type podLogKeeper struct {
	stop chan struct{}
	done chan struct{}
	logs map[string][]byte
}

func keepPodLogs() *podLogKeeper {
	k := &podLogKeeper{stop: make(chan struct{}), done: make(chan struct{}), logs: map[string][]byte{}}
	go func() {
		defer close(k.done)
		for {
			for _, n := range plane.Spec.Nodes {
				files, _ := filepath.Glob(filepath.Join(plane.Dir, "nodes", n.Name, "log", "pods", "kube-system_skewgate-*", "skewgate", "*.log"))
				for _, f := range files {
					if b, err := os.ReadFile(f); err == nil && len(b) >= len(k.logs[f]) {
						k.logs[f] = b
					}
				}
			}
			select {
			case <-k.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return k
}

// Stop ends the copying and returns every log kept, the last lines of
// each.
func (k *podLogKeeper) Stop(lines int) string {
	close(k.stop)
	<-k.done
	var out strings.Builder
	for f, b := range k.logs {
		all := strings.Split(strings.TrimSpace(string(b)), "\n")
		fmt.Fprintf(&out, "--- %s (last %d lines) ---\n%s\n", strings.TrimPrefix(f, plane.Dir), lines, strings.Join(all[max(0, len(all)-lines):], "\n"))
	}
	return out.String()
}
