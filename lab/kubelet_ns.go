package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/skewgate/skewgate/agent"
)

// KubeletPinPath is node n's skewgate pin directory in the kubelet mode,
// as the host sees it. Lab nodes share one filesystem, but a DaemonSet pod
// mounts the host's /sys/fs/bpf and pins in /sys/fs/bpf/skewgate: each
// node's containerd and kubelet run in a mount namespace of their own where
// /sys/fs/bpf is the host's /sys/fs/bpf/skewlab-<node>, so one manifest
// works on every node and `skewgate steer off --pin-path` on the host
// finds that node's pod's pins here.
func KubeletPinPath(n Node) string { return filepath.Join(kubeletBPFRoot(n), "skewgate") }

// KubeletSteering reads the steering state of node n's skewgate pod from
// its pins, as the host sees them.
func KubeletSteering(n Node) (agent.State, error) {
	ctl, err := agent.OpenControl(KubeletPinPath(n))
	if err != nil {
		return agent.State{}, err
	}
	defer ctl.Close()
	return ctl.State()
}

func kubeletBPFRoot(n Node) string { return "/sys/fs/bpf/skewlab-" + n.Name }

// bindMount is one host path bound over another in a node's mount
// namespace.
type bindMount struct{ src, dst string }

// nodeBinds are the per-node host paths: kubeadm's pki, its static-pod
// manifests (the kubelet's staticPodPath, where the DaemonSet's skewgate
// looks for kube-apiserver.yaml), skewgate's state directory, the bpffs,
// the logs. /run gets a tmpfs of its own (containerd
// 1.6 keeps shim sockets in /run/containerd/s whatever its config says).
func (f nodeFiles) nodeBinds() []bindMount {
	return []bindMount{
		{f.path("pki"), "/etc/kubernetes/pki"},
		{f.path("manifests"), "/etc/kubernetes/manifests"},
		{f.path("skewgate"), "/var/lib/skewgate"},
		{f.path("log"), "/var/log"},
		{kubeletBPFRoot(f.node), "/sys/fs/bpf"},
	}
}

// startInNewMountNS starts cmd in node n's network and UTS namespaces and
// in a new mount namespace, a slave of the host's (host mounts reach it,
// its mounts never reach the host), with binds applied. Everything mounted
// in it goes when its last process exits.
func startInNewMountNS(n Node, binds []bindMount, cmd *exec.Cmd) error {
	return onNodeThread(n, cmd, func() error {
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("unshare mount namespace: %w", err)
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
			return fmt.Errorf("make / rslave: %w", err)
		}
		for _, b := range binds {
			if err := unix.Mount(b.src, b.dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("bind %s on %s: %w", b.src, b.dst, err)
			}
		}
		if err := unix.Mount("tmpfs", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
			return fmt.Errorf("tmpfs on /run: %w", err)
		}
		return nil
	})
}

// startInMountNSOf starts cmd in node n's network and UTS namespaces and in
// the mount namespace of process pid (the node's containerd), so the
// kubelet's volume mounts are the ones containerd hands to containers.
func startInMountNSOf(n Node, pid int, cmd *exec.Cmd) error {
	return onNodeThread(n, cmd, func() error {
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		if err != nil {
			return err
		}
		defer f.Close()
		// setns into a mount namespace needs a thread that shares its
		// filesystem attributes with no other: Go's threads do.
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return fmt.Errorf("unshare fs: %w", err)
		}
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("enter mount namespace of pid %d: %w", pid, err)
		}
		return nil
	})
}

// onNodeThread runs mounts then starts cmd on a locked OS thread that has
// entered n's namespaces. The thread is never unlocked: the runtime
// discards it with its namespaces.
func onNodeThread(n Node, cmd *exec.Cmd, mounts func() error) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- enterMountsAndStart(n, cmd, mounts)
	}()
	return <-errc
}

func enterMountsAndStart(n Node, cmd *exec.Cmd, mounts func() error) error {
	if err := unix.Unshare(unix.CLONE_NEWUTS); err != nil {
		return fmt.Errorf("unshare uts: %w", err)
	}
	if err := unix.Sethostname([]byte(n.Name)); err != nil {
		return err
	}
	f, err := os.Open(NetNSPath(n.Name))
	if err != nil {
		return fmt.Errorf("open netns: %w", err)
	}
	defer f.Close()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter netns %s: %w", n.Name, err)
	}
	if err := mounts(); err != nil {
		return err
	}
	return cmd.Start()
}
