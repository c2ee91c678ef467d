package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// serveGreeting answers every connection on ln with who, until ln closes.
func serveGreeting(ln net.Listener, who string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte(who))
		c.Close()
	}
}

// greet dials addr and reads who answered.
func greet(t *testing.T, addr string) (string, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

// A successor started beside a running skewgate takes the same listening
// socket (same kernel socket: the SOCKMAP entry is unchanged), both serve
// until it asks the predecessor to leave, and after the predecessor closed
// its copy not one connection is refused. A successor that dies before it
// asked leaves the predecessor serving and offering again.
func TestSuccessionHandsTheSocketOver(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "state.handover.sock")
	if in, err := Inherit(sock, time.Second); in != nil || err != nil {
		t.Fatalf("no predecessor: %v, %v; want nil, nil", in, err)
	}
	// A stale socket file, its owner gone (a crash): not an offer.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	if in, err := Inherit(sock, time.Second); in != nil || err != nil {
		t.Fatalf("a stale socket file: %v, %v; want nil, nil", in, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	old, err := NewSuccession(sock, 0, nil)
	if err != nil || old.Inherited() {
		t.Fatalf("first start: inherited %v, %v", old.Inherited(), err)
	}
	oldLn, err := old.Listen("proxy", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := oldLn.Addr().String()
	oldCtx := old.Context(ctx)
	go serveGreeting(oldLn, "old")
	if err := old.Serving(ctx); err != nil {
		t.Fatal(err)
	}

	// A successor that goes away before it serves.
	quitter, err := NewSuccession(sock, 0, nil)
	if err != nil || !quitter.Inherited() {
		t.Fatalf("successor: inherited %v, %v", quitter.Inherited(), err)
	}
	quitter.in.Close()
	time.Sleep(100 * time.Millisecond)
	if who, err := greet(t, addr); who != "old" || err != nil {
		t.Fatalf("after a successor went away: %q, %v; want the predecessor", who, err)
	}
	if oldCtx.Err() != nil || old.HandedOver() {
		t.Fatal("the predecessor left although its successor never served")
	}

	succ, err := NewSuccession(sock, 0, nil)
	if err != nil || !succ.Inherited() {
		t.Fatalf("second successor: inherited %v, %v", succ.Inherited(), err)
	}
	if l, _ := succ.in.Take("proxy", "127.0.0.2:1"); l != nil {
		t.Fatal("a listener on another port was taken")
	}
	succ.in.Close()
	// On the same port but another address (the default moved from
	// 0.0.0.0 to loopback): kept, said to have moved; binding the new
	// address beside the predecessor's would fail.
	succ, _ = NewSuccession(sock, 0, nil)
	_, port, _ := net.SplitHostPort(addr)
	if l, moved := succ.in.Take("proxy", net.JoinHostPort("127.0.0.2", port)); l == nil || !moved {
		t.Fatalf("a listener on the same port, another address: %v, moved %t; want it kept", l, moved)
	} else {
		l.Close() // this process's copy; the predecessor's serves on
	}
	succ.in.Close()
	succ, _ = NewSuccession(sock, 0, nil)
	if got, want := succ.Predecessor(), os.Getpid(); got != want || old.Predecessor() != 0 {
		t.Fatalf("predecessor's pid: %d, want %d (the first start's: %d, want 0)", got, want, old.Predecessor())
	}
	newLn, err := succ.Listen("proxy", addr)
	if err != nil {
		t.Fatal(err)
	}
	if newLn.Addr().String() != addr {
		t.Fatalf("inherited listener on %s, want %s", newLn.Addr(), addr)
	}
	oc, err1 := socketCookie(oldLn)
	nc, err2 := socketCookie(newLn)
	if err := errors.Join(err1, err2); err != nil || oc != nc {
		t.Fatalf("socket cookies %d and %d (%v): not the same socket", oc, nc, err)
	}
	go serveGreeting(newLn, "new")
	newCtx, cancelNew := context.WithCancel(context.Background())
	defer cancelNew()
	if err := succ.Serving(newCtx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-oldCtx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the predecessor was not told to leave")
	}
	if !old.HandedOver() {
		t.Fatal("the predecessor does not know it handed over")
	}
	oldLn.Close() // what its server's shutdown does

	for i := range 50 {
		who, err := greet(t, addr)
		if errors.Is(err, syscall.ECONNREFUSED) || err != nil || who != "new" {
			t.Fatalf("connection %d after the predecessor left: %q, %v; want the successor", i, who, err)
		}
	}

	// The successor offers in turn: its own successor finds it.
	if _, err := os.Stat(sock); err != nil {
		t.Fatal(err)
	}
	third, err := NewSuccession(sock, 0, nil)
	if err != nil || !third.Inherited() {
		t.Fatalf("the successor does not offer its sockets: inherited %v, %v", third.Inherited(), err)
	}
	third.in.Close()
}

// On SIGTERM a skewgate waits up to its hand-over wait for a successor
// (the DaemonSet's maxSurge starts one beside a deleted pod); none coming,
// it stops and withdraws.
func TestSuccessionWaitsForASuccessorOnStop(t *testing.T) {
	dir := t.TempDir()
	for _, comes := range []bool{true, false} {
		sock := filepath.Join(dir, fmt.Sprintf("%v.handover.sock", comes))
		sig, term := context.WithCancel(context.Background())
		s, err := NewSuccession(sock, 2*time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := s.Listen("proxy", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx := s.Context(sig)
		if err := s.Serving(ctx); err != nil {
			t.Fatal(err)
		}
		term()
		time.Sleep(200 * time.Millisecond)
		if ctx.Err() != nil {
			t.Fatal("stopped at once, without waiting for a successor")
		}
		if comes {
			succ, err := NewSuccession(sock, 0, nil)
			if err != nil || !succ.Inherited() {
				t.Fatalf("successor: %v %v", succ.Inherited(), err)
			}
			l, _ := succ.Listen("proxy", ln.Addr().String())
			if err := succ.Serving(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer l.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("never stopped")
		}
		if s.HandedOver() != comes {
			t.Errorf("successor came %v: handed over %v", comes, s.HandedOver())
		}
		ln.Close()
	}
}
