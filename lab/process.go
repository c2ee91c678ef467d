package lab

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// startProcess starts bin with args in node's namespaces (nsPath and
// hostname empty: the root namespace), its output appended to logFile.
func startProcess(name, bin string, args []string, nsPath, hostname, logFile string) (Proc, error) {
	return startProcessEnv(name, bin, args, nil, nsPath, hostname, logFile)
}

// startProcessEnv is startProcess with env added to this process's
// environment, as a container's env adds to its image's.
func startProcessEnv(name, bin string, args, env []string, nsPath, hostname, logFile string) (Proc, error) {
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return Proc{}, fmt.Errorf("open log for %s: %w", name, err)
	}
	defer log.Close() // the child keeps its own copy
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if err := StartInNode(nsPath, hostname, cmd); err != nil {
		return Proc{}, fmt.Errorf("start %s: %w", name, err)
	}
	// Reap the child if it exits while this process lives; after this
	// process exits, init does.
	go cmd.Wait()
	st, err := procStartTime(cmd.Process.Pid)
	if err != nil {
		return Proc{}, fmt.Errorf("%s exited at once, see %s", name, logFile)
	}
	return Proc{Name: name, PID: cmd.Process.Pid, StartTime: st, Log: logFile}, nil
}

// Stop ends p: SIGTERM, then SIGKILL after grace. A process that is gone or
// whose PID now belongs to another process is left alone.
func (p Proc) Stop(grace time.Duration) error {
	if !p.Alive() {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGTERM); err != nil {
		return fmt.Errorf("signal %s (pid %d): %w", p.Name, p.PID, err)
	}
	if p.waitGone(grace) {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && p.Alive() {
		return fmt.Errorf("kill %s (pid %d): %w", p.Name, p.PID, err)
	}
	p.waitGone(2 * time.Second)
	return nil
}

// waitGone waits up to d for p to be reaped (by this process or by init).
func (p Proc) waitGone(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !p.Gone() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// logTail returns the last n lines of file, for error messages.
func logTail(file string, n int) string {
	data, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	lines := strings.Split(string(bytes.TrimRight(data, "\n")), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
