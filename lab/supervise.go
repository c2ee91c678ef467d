package lab

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// A lab kubelet runs as kubeadm's packages run it: kubelet.service has
// Restart=always and RestartSec=10, so a kubelet that exits (a panic, a
// fatal configuration error) is back 10 s later. Without that a kubelet
// bug ends a drill (v1.37.2's podcertificatemanager panics on a
// DeletedFinalStateUnknown). systemd's part is played by a supervisor,
// this program re-executed in the node's namespaces: the process the
// lab records, so stopping it (Down, a kubelet upgrade) stops the
// kubelet, and nothing restarts a kubelet the lab stopped.

// superviseEnv marks a process started as a supervisor; its value is
// the restart delay.
const superviseEnv = "SKEWGATE_LAB_SUPERVISE"

// kubeletRestartDelay is kubelet.service's RestartSec.
const kubeletRestartDelay = 10 * time.Second

// superviseGrace is how long a stopping supervisor gives its child after
// SIGTERM before SIGKILL: less than stopGrace, so the supervisor is not
// killed itself while its child lives on.
const superviseGrace = stopGrace - 2*time.Second

// init runs the supervisor when this process is one. It is init, not a
// hook main must call: every program that links the lab can start a
// kubelet, and one that forgot the hook would run itself again inside a
// node instead.
func init() {
	if d := os.Getenv(superviseEnv); d != "" {
		os.Exit(superviseMain(d, os.Args[1:]))
	}
}

func superviseMain(delay string, argv []string) int {
	d, err := time.ParseDuration(delay)
	if err != nil || len(argv) == 0 {
		fmt.Fprintf(os.Stderr, "skewlab supervisor: want %s=<delay> and a command, got %q %q\n", superviseEnv, delay, argv)
		return 2
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	s := supervisor{path: argv[0], args: argv[1:], env: withoutEnv(os.Environ(), superviseEnv),
		delay: d, grace: superviseGrace, out: os.Stdout}
	s.run(stop)
	return 0
}

// superviseArgs are the path and arguments that run bin with args under a
// supervisor restarting it delay after each exit, and the environment
// that makes this program one.
func superviseArgs(bin string, args []string, delay time.Duration) (string, []string, []string) {
	return "/proc/self/exe", append([]string{bin}, args...), []string{superviseEnv + "=" + delay.String()}
}

func withoutEnv(env []string, name string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
}

// supervisor runs a command and restarts it delay after it exits, as
// systemd's Restart=always does, until it is stopped.
type supervisor struct {
	path         string
	args, env    []string
	delay, grace time.Duration
	// out receives the child's output and one line per exit, with its
	// status.
	out io.Writer
}

// run supervises until stop receives: then it stops the child (SIGTERM,
// SIGKILL after grace), waits for it, and returns.
func (s supervisor) run(stop <-chan os.Signal) {
	for restarts := 0; ; restarts++ {
		t0 := time.Now()
		cmd := exec.Command(s.path, s.args...)
		cmd.Stdout, cmd.Stderr, cmd.Env = s.out, s.out, s.env
		exited := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			exited <- fmt.Errorf("start: %w", err)
			cmd = nil
		} else {
			go func() { exited <- cmd.Wait() }()
		}
		select {
		case sig := <-stop:
			s.logf("%s: stopping %s (%s)", sig, s.path, s.stopChild(cmd, exited))
			return
		case err := <-exited:
			s.logf("%s exited after %s: %s; restart %d in %s (Restart=always, RestartSec=%s)",
				s.path, time.Since(t0).Round(time.Millisecond), status(err), restarts+1, s.delay, s.delay)
		}
		select {
		case sig := <-stop:
			s.logf("%s: not restarting %s", sig, s.path)
			return
		case <-time.After(s.delay):
		}
	}
}

// stopChild ends a running child and says how it ended.
func (s supervisor) stopChild(cmd *exec.Cmd, exited <-chan error) string {
	if cmd == nil {
		return "not running"
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		return status(err)
	case <-time.After(s.grace):
	}
	cmd.Process.Kill()
	return status(<-exited) + fmt.Sprintf(", SIGKILL after %s", s.grace)
}

func (s supervisor) logf(format string, a ...any) {
	fmt.Fprintf(s.out, "%s skewlab supervisor: %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, a...))
}

// status is how a child ended: "exit status 2", "signal: killed", or why
// it did not start.
func status(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exit status 0"
	case errors.As(err, &ee):
		return ee.String()
	}
	return err.Error()
}
