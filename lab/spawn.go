package lab

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// StartInNode starts cmd inside the network namespace at nsPath with a UTS
// namespace of its own named hostname ("" keeps the caller's network and
// UTS namespaces). Kube-apiserver derives its identity from the hostname, so
// every node needs its own.
//
// It uses setns on a locked OS thread rather than `ip netns exec`, which
// remounts /sys and so hides bpffs and cgroup2 from the child. The thread is
// never unlocked: when the goroutine ends the runtime discards it along with
// its namespaces.
func StartInNode(nsPath, hostname string, cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		// Own process group: a ^C at the terminal that ran `lab up` must
		// not reach the plane.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- enterAndStart(nsPath, hostname, cmd)
	}()
	return <-errc
}

func enterAndStart(nsPath, hostname string, cmd *exec.Cmd) error {
	if hostname != "" {
		if err := unix.Unshare(unix.CLONE_NEWUTS); err != nil {
			return fmt.Errorf("unshare uts: %w", err)
		}
		if err := unix.Sethostname([]byte(hostname)); err != nil {
			return fmt.Errorf("set hostname %s: %w", hostname, err)
		}
	}
	if nsPath != "" {
		f, err := os.Open(nsPath)
		if err != nil {
			return fmt.Errorf("open netns: %w", err)
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("enter netns %s: %w", nsPath, err)
		}
	}
	return cmd.Start()
}

// Proc identifies a started process by PID and kernel start time, so a
// recorded PID that the kernel has since reused is never signalled.
type Proc struct {
	Name      string `json:"name"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
	Log       string `json:"log"`
}

// procStartTime reads field 22 of /proc/<pid>/stat (start time in clock
// ticks since boot).
func procStartTime(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may contain spaces; fields after it are
	// counted from the closing parenthesis.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// Gone reports whether p has fully exited and been reaped. A killed
// multi-threaded process shows its leader as a zombie while other threads
// still hold its file descriptors (a listening socket, say): only Gone says
// those are closed.
func (p Proc) Gone() bool {
	st, err := procStartTime(p.PID)
	return err != nil || st != p.StartTime
}

// Alive reports whether p still runs (and is the same process).
func (p Proc) Alive() bool {
	st, err := procStartTime(p.PID)
	if err != nil || st != p.StartTime {
		return false
	}
	// A zombie still has a /proc entry but no longer runs.
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}
