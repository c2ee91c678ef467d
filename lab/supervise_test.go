package lab

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is an io.Writer the supervisor, its children and the test
// share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitFor polls out until it contains want n times.
func waitFor(t *testing.T, out *syncBuffer, want string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(out.String(), want) < n {
		if time.Now().After(deadline) {
			t.Fatalf("no %d× %q in:\n%s", n, want, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// superviseSh supervises a shell script as the child.
func superviseSh(script string, grace time.Duration) (supervisor, *syncBuffer) {
	out := &syncBuffer{}
	return supervisor{path: "/bin/sh", args: []string{"-c", script}, delay: 50 * time.Millisecond, grace: grace, out: out}, out
}

func TestSuperviseRestartsAfterExit(t *testing.T) {
	s, out := superviseSh("echo run; exit 3", time.Second)
	stop := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() { s.run(stop); close(done) }()
	waitFor(t, out, "run\n", 3)
	stop <- syscall.SIGTERM
	<-done
	got := out.String()
	for _, want := range []string{"exited after", "exit status 3; restart 1 in 50ms", "restart 2 in 50ms"} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %q:\n%s", want, got)
		}
	}
}

func TestSuperviseStopsChild(t *testing.T) {
	s, out := superviseSh("echo run; exec sleep 30", time.Second)
	stop := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() { s.run(stop); close(done) }()
	waitFor(t, out, "run\n", 1)
	t0 := time.Now()
	stop <- syscall.SIGTERM
	<-done
	if d := time.Since(t0); d > 500*time.Millisecond {
		t.Errorf("stopping took %s: the child's SIGTERM should end it", d)
	}
	got := out.String()
	if !strings.Contains(got, "stopping /bin/sh (signal: terminated)") || strings.Contains(got, "restart") {
		t.Errorf("want one stop and no restart:\n%s", got)
	}
}

func TestSuperviseKillsChildIgnoringTERM(t *testing.T) {
	s, out := superviseSh("trap '' TERM; echo run; while :; do sleep 0.05; done", 200*time.Millisecond)
	stop := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() { s.run(stop); close(done) }()
	waitFor(t, out, "run\n", 1)
	stop <- syscall.SIGTERM
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("supervisor did not return")
	}
	if got := out.String(); !strings.Contains(got, "signal: killed, SIGKILL after 200ms") {
		t.Errorf("want SIGKILL after grace:\n%s", got)
	}
}

func TestSuperviseStopDuringDelay(t *testing.T) {
	s, out := superviseSh("echo run; exit 0", time.Second)
	s.delay = time.Hour
	stop := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() { s.run(stop); close(done) }()
	waitFor(t, out, "restart 1 in 1h0m0s", 1)
	stop <- syscall.SIGTERM
	<-done
	if got := out.String(); !strings.Contains(got, "not restarting") || strings.Count(got, "run\n") != 1 {
		t.Errorf("want one run, then no restart:\n%s", got)
	}
}

func TestSuperviseLogsStartFailure(t *testing.T) {
	out := &syncBuffer{}
	s := supervisor{path: "/nonexistent/kubelet", delay: 10 * time.Millisecond, grace: time.Second, out: out}
	stop := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() { s.run(stop); close(done) }()
	waitFor(t, out, "no such file or directory; restart", 2)
	stop <- syscall.SIGTERM
	<-done
}

// TestSuperviseProcess runs the supervisor as the lab does, this test
// binary re-executed (its init supervises), and checks that a SIGTERM to
// the recorded process takes the child with it.
func TestSuperviseProcess(t *testing.T) {
	log := &syncBuffer{}
	pidFile := t.TempDir() + "/child.pid"
	path, args, env := superviseArgs("/bin/sh", []string{"-c", "echo $$ > " + pidFile + "; echo run; exec sleep 30"}, 50*time.Millisecond)
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitFor(t, log, "run\n", 1)
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("supervisor: %v\n%s", err, log)
	}
	if !waitPIDGone(child, 2*time.Second) {
		t.Errorf("child %d outlived its supervisor", child)
	}
	if got := log.String(); !strings.Contains(got, "terminated: stopping /bin/sh") {
		t.Errorf("log:\n%s", got)
	}
}
