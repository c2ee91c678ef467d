package lab

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// reaperEnv marks a process started by StartReaper; its value is the lab
// directory.
const reaperEnv = "SKEWGATE_LAB_REAPER"

// StartReaper starts a helper (this program, re-executed) that tears down
// the lab in dir, and removes dir, once this process has gone without doing
// so; dir is the caller's own temporary directory. A test binary
// that panics or times out exits without running its deferred Down, which
// would leave kube-apiservers, etcd and namespaces behind. The helper waits
// for its stdin to close, which happens however this process ends.
//
// The helper inherits hold (e.g. a lock on the lab's addresses) and keeps
// it open until it is done.
//
// The program must call RunReaper first thing in main (or TestMain). Call
// stop after a normal Down: the helper then finds nothing to do.
func StartReaper(dir string, hold ...*os.File) (stop func(), err error) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), reaperEnv+"="+dir)
	cmd.ExtraFiles = hold
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// Its own process group: a ^C meant for this process must not take
	// the helper with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start lab reaper: %w", err)
	}
	return func() {
		w.Close()
		cmd.Wait()
	}, nil
}

// RunReaper returns at once unless this process was started by StartReaper.
// Then it waits for its parent to go, tears the lab down and removes its
// directory if the parent left it up, and exits.
func RunReaper() {
	dir := os.Getenv(reaperEnv)
	if dir == "" {
		return
	}
	signal.Ignore(os.Interrupt, syscall.SIGHUP)
	io.Copy(io.Discard, os.Stdin)
	if _, err := os.Stat(statePath(dir)); errors.Is(err, os.ErrNotExist) {
		os.Exit(0)
	}
	fmt.Fprintf(os.Stderr, "lab: the process that brought up the lab in %s ended without tearing it down; tearing down\n", dir)
	if err := Down(dir); err != nil {
		fmt.Fprintln(os.Stderr, "lab: down:", err)
		os.Exit(1)
	}
	os.RemoveAll(dir)
	os.Exit(0)
}
