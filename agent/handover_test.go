package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runHandOverChild is an agent in a child process that takes part in a
// hand-over: it inherits the listener from the agent offering it at
// SGT_SOCK (or binds it), steers targetAddr in SGT_NETNS into it, greets
// SGT_WHO, serves and offers it in turn; once a successor asked it to
// leave it stops accepting and renewing its lease (no withdrawal), says
// "left", and idles until killed.
func runHandOverChild() error {
	nsPath, who := os.Getenv("SGT_NETNS"), os.Getenv("SGT_WHO")
	succ, err := NewSuccession(os.Getenv("SGT_SOCK"), 0, nil)
	if err != nil {
		return err
	}
	var ln *net.TCPListener
	if err := inNetNS(nsPath, func() (err error) {
		ln, err = succ.Listen("proxy", proxyAddr)
		return err
	}); err != nil {
		return err
	}
	s, err := StartSteering(context.Background(), SteeringConfig{
		PinPath: os.Getenv("SGT_PINS"), NetNSPath: nsPath,
		Targets: []netip.AddrPort{netip.MustParseAddrPort(targetAddr)},
		Lease:   2 * time.Second, Renew: 100 * time.Millisecond,
	}, ln)
	if err != nil {
		return err
	}
	if st := s.Status(); st.State == StateDisabled {
		return errors.New(st.String())
	}
	ctx := succ.Context(context.Background())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, who+"\n")
				io.Copy(io.Discard, c)
			}()
		}
	}()
	if err := succ.Serving(context.Background()); err != nil {
		return err
	}
	// StartSteering returns with the program attached; the lease is
	// granted by its first probe, a moment later. Until then a new
	// connection falls open, so "ready" waits for it (CI once saw a
	// connection 48 µs after the first agent's "ready" reach the
	// apiserver directly).
	for deadline := time.Now().Add(5 * time.Second); s.Status().State != StateSteering; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("not steering 5s after start: %s", s.Status())
		}
	}
	fmt.Println("ready")
	<-ctx.Done()
	s.Close()
	ln.Close()
	fmt.Println("left")
	select {}
}

func startHandOverChild(t *testing.T, n *node, who, sock string) (*child, func(string, time.Duration)) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SGT_CHILD=handover", "SGT_NETNS="+n.ns.path, "SGT_PINS="+n.pins, "SGT_WHO="+who, "SGT_SOCK="+sock)
	cmd.Stderr = os.Stderr
	c, out := spawn(t, cmd)
	lines := make(chan string, 4)
	go func() {
		for {
			line, err := out.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- strings.TrimSpace(line)
		}
	}()
	expect := func(want string, timeout time.Duration) {
		t.Helper()
		select {
		case got, ok := <-lines:
			if !ok || got != want {
				t.Fatalf("child %s said %q (open %v), want %q", who, got, ok, want)
			}
		case <-time.After(timeout):
			t.Fatalf("child %s did not say %q within %s", who, want, timeout)
		}
	}
	expect("ready", 10*time.Second)
	return c, expect
}

// A second agent started beside the running one takes its listening
// socket (--handover) while connections stream in through the steered
// address: not one connection fails or reaches the apiserver directly —
// before, during and after the hand-over, and after the first agent is
// killed — unlike a stop and a start, between which new connections fall
// open (TestSteeringSIGKILL).
func TestSteeringHandOver(t *testing.T) {
	n := newNode(t)
	sock := filepath.Join(t.TempDir(), "state.handover.sock")
	str := startStream(t, n.ns, targetAddr, 100000)

	first, firstSays := startHandOverChild(t, n, "old", sock)
	started := time.Now()
	str.waitGreet(t, "old", started, 5*time.Second)
	time.Sleep(300 * time.Millisecond)

	handing := time.Now()
	startHandOverChild(t, n, "new", sock)
	firstSays("left", 10*time.Second)
	left := time.Now()
	str.waitGreet(t, "new", left, 5*time.Second)
	time.Sleep(300 * time.Millisecond)
	first.kill() // the old pod goes
	killed := time.Now()
	time.Sleep(500 * time.Millisecond)
	str.halt()

	counts := map[string]int{}
	for _, r := range str.snapshot() {
		if r.start.Before(started) {
			continue
		}
		switch {
		case r.err != nil:
			t.Errorf("connection %s after the first agent served failed: %v", r.start.Sub(started), r.err)
		case r.greet == "origin":
			t.Errorf("connection %s after the first agent served (hand-over began at %s) reached the apiserver directly",
				r.start.Sub(started), handing.Sub(started))
		}
		counts[r.greet]++
		if r.start.After(killed) && r.greet != "new" {
			t.Errorf("connection after the old agent was killed greeted by %q", r.greet)
		}
	}
	t.Logf("hand-over: %d connections answered by the old agent, %d by the new one, %d by the apiserver directly; the old one left %s after the new one started",
		counts["old"], counts["new"], counts["origin"], left.Sub(handing).Round(time.Millisecond))
	if counts["new"] == 0 || counts["old"] == 0 {
		t.Errorf("answers %v: want both agents seen", counts)
	}
}
