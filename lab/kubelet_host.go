package lab

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// KubeletState records what the kubelet mode changed on the host, so
// tear-down (and the reaper after a crash) undoes all of it.
type KubeletState struct {
	// Nodes run containerd and a kubelet; every process left in their
	// network namespaces or cgroups at tear-down is the lab's.
	Nodes []string `json:"nodes"`
	// Sysctls are the values before the first kubelet changed them.
	Sysctls map[string]string `json:"sysctls"`
	// Cgroups are the kubelets' cgroup roots, one name in every hierarchy.
	Cgroups []string `json:"cgroups"`
	// Mountpoints are host directories the lab created to bind node files
	// on (or that a static pod's hostPath would otherwise create), parents
	// first.
	Mountpoints []string `json:"mountpoints"`
}

// kubeletSysctls are what kubelet's setupKernelTunables sets when
// protectKernelDefaults is false (the default).
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

const cgroupFS = "/sys/fs/cgroup"

// prepareHost records the sysctls, then creates the host directories (and
// missing parents) the nodes' binds need, and each node's cgroup root and
// bpffs root, recording each before it exists.
func (p *Plane) prepareHost(dirs ...string) error {
	ks := &KubeletState{Sysctls: map[string]string{}}
	for _, k := range kubeletSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			return fmt.Errorf("read sysctl %s: %w", k, err)
		}
		ks.Sysctls[k] = strings.TrimSpace(string(v))
	}
	p.State.Kubelet = ks
	for _, n := range p.Spec.Nodes {
		ks.Nodes = append(ks.Nodes, n.Name)
		ks.Cgroups = append(ks.Cgroups, kubeletCgroupRoot(n))
		p.State.Pins = append(p.State.Pins, kubeletBPFRoot(n))
	}
	ks.Mountpoints = missingDirs(dirs...)
	if err := p.State.save(); err != nil {
		return err
	}
	return p.createHostDirs()
}

// missingDirs are the directories (and their missing parents) of paths
// that do not exist yet, parents first.
func missingDirs(paths ...string) []string {
	var out []string
	for _, p := range paths {
		var chain []string
		for d := p; d != "/"; d = filepath.Dir(d) {
			if _, err := os.Stat(d); err == nil {
				break
			}
			chain = append([]string{d}, chain...)
		}
		out = append(out, chain...)
	}
	return out
}

func (p *Plane) createHostDirs() error {
	dirs := slices.Clone(p.State.Kubelet.Mountpoints)
	for _, n := range p.Spec.Nodes {
		dirs = append(dirs, kubeletBPFRoot(n))
		for _, h := range cgroupHierarchies() {
			dirs = append(dirs, filepath.Join(h, kubeletCgroupRoot(n)))
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// cgroupHierarchies are the mounted cgroup hierarchies: the v1 controllers,
// the named systemd one and the unified one on this hybrid host.
func cgroupHierarchies() []string {
	entries, _ := os.ReadDir(cgroupFS)
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join(cgroupFS, e.Name()))
		}
	}
	if len(out) == 0 {
		out = []string{cgroupFS} // a pure cgroup v2 host
	}
	return out
}

// stopKubeletMode stops the kubelets (so nothing restarts a container),
// then kills every other process in the nodes' network namespaces and
// kubelet cgroups that the state does not record: containers, their
// shims and pause processes.
func stopKubeletMode(st *State) []error {
	if st.Kubelet == nil {
		return nil
	}
	errs := stopAll(st.Procs, func(p Proc) bool { return strings.HasPrefix(p.Name, "kubelet-") })
	recorded := map[int]bool{}
	for _, p := range st.Procs {
		if p.Alive() {
			recorded[p.PID] = true
		}
	}
	strays := strayPIDs(st.Kubelet, recorded)
	for _, pid := range strays {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range strays {
		if !waitPIDGone(pid, 10*time.Second) {
			errs = append(errs, fmt.Errorf("pid %d still there after SIGKILL", pid))
		}
	}
	return errs
}

// strayPIDs lists what the nodes' containerds started and the state does
// not record: processes in the kubelet cgroups, and processes in a node's
// network namespace but not in the host's mount namespace (shims,
// hostNetwork containers; not a shell an operator entered the node with).
func strayPIDs(ks *KubeletState, recorded map[int]bool) []int {
	netns := map[uint64]bool{}
	for _, name := range ks.Nodes {
		if ino, err := inode(NetNSPath(name)); err == nil {
			netns[ino] = true
		}
	}
	hostMnt, _ := inode("/proc/self/ns/mnt")
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || recorded[pid] || pid == os.Getpid() {
			continue
		}
		net, err := inode(fmt.Sprintf("/proc/%d/ns/net", pid))
		mnt, merr := inode(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		if (err == nil && merr == nil && netns[net] && mnt != hostMnt) || inKubeletCgroup(pid, ks.Cgroups) {
			out = append(out, pid)
		}
	}
	return out
}

func inode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

func inKubeletCgroup(pid int, roots []string) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		for _, r := range roots {
			if strings.Contains(line, ":/"+r+"/") || strings.HasSuffix(line, ":/"+r) {
				return true
			}
		}
	}
	return false
}

func waitPIDGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cleanKubeletHost removes the kubelets' cgroups and the mountpoints the
// lab created and restores the sysctls; every process is gone by now, and
// with them the nodes' mount namespaces and everything mounted in them.
func cleanKubeletHost(ks *KubeletState) []error {
	if ks == nil {
		return nil
	}
	var errs []error
	for _, root := range ks.Cgroups {
		for _, h := range cgroupHierarchies() {
			if err := removeCgroupTree(filepath.Join(h, root)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for k, v := range ks.Sysctls {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s: %w", k, err))
		}
	}
	for _, d := range slices.Backward(ks.Mountpoints) {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove mountpoint %s: %w", d, err))
		}
	}
	return errs
}

// removeCgroupTree rmdirs a cgroup and its children, deepest first,
// retrying while the kernel finishes releasing killed tasks.
func removeCgroupTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, d := range slices.Backward(dirs) {
		var rerr error
		for range 50 {
			if rerr = syscall.Rmdir(d); rerr == nil || errors.Is(rerr, os.ErrNotExist) {
				rerr = nil
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if rerr != nil {
			return fmt.Errorf("remove cgroup %s: %w", d, rerr)
		}
	}
	return nil
}
