package agent

import (
	"bufio"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// runHoldChild holds the socket passed as fd 3, as a predecessor holds the
// connections it accepted, until killed.
func runHoldChild() error {
	f := os.NewFile(3, "held")
	defer f.Close()
	os.Stdout.WriteString("ready\n")
	select {}
}

// A skewgate that took its listening sockets over from a predecessor must
// not end the predecessor's connections as direct ones: steered, they have
// the apiserver's address as their local address too, and the predecessor
// serves them until they drained (CI: lab/e2e/daemonset "pod deleted" saw a
// new connection the old pod had accepted reset by the replacement's sweep
// in the middle of its TLS handshake — the old pod spoke last).
func TestSweepSparesThePredecessorsConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	f, err := sc.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	ino := st.Ino

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "SGT_CHILD=hold")
	child.ExtraFiles = []*os.File{f}
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("child: %q, %v", line, err)
	}
	f.Close()
	sc.Close() // only the child holds the accepted socket now

	own, err := ownSocketInodes()
	if err != nil {
		t.Fatal(err)
	}
	if own[ino] {
		t.Fatalf("socket %d still held by this process: the check below would prove nothing", ino)
	}
	remote := netip.MustParseAddrPort(c.LocalAddr().String())

	n := &Node{cfg: NodeConfig{Predecessor: child.Process.Pid}}
	skip, err := n.notDirect()
	if err != nil {
		t.Fatal(err)
	}
	if !skip(remote, uint32(ino)) {
		t.Errorf("the predecessor's connection (inode %d) is taken for a direct one", ino)
	}
	n.cfg.Predecessor = 0
	if skip, err = n.notDirect(); err != nil || skip(remote, uint32(ino)) {
		t.Errorf("without a predecessor: skip %v, %v; want false, nil", skip(remote, uint32(ino)), err)
	}
	// A predecessor this process cannot see: nothing can be told apart,
	// so no sweep.
	n.cfg.Predecessor = -1
	if _, err := n.notDirect(); err == nil {
		t.Error("a predecessor in another PID namespace: no error, so the sweep would end its connections")
	}

	// The pid reused by another program: its sockets are not skewgate's.
	oc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	of, err := oc.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer of.Close()
	other := exec.Command("sleep", "30")
	other.ExtraFiles = []*os.File{of} // a socket of its own
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	if held := map[uint64]bool{}; addSocketInodes(held, strconv.Itoa(other.Process.Pid)) != nil || len(held) == 0 {
		t.Fatal("the other program holds no socket: the check below would prove nothing")
	}
	m := map[uint64]bool{}
	if err := predecessorSocketInodes(m, other.Process.Pid); err != nil || len(m) != 0 {
		t.Errorf("another program's process: %d sockets, %v; want none", len(m), err)
	}
	// Gone: nothing, no error.
	child.Process.Kill()
	child.Wait()
	m = map[uint64]bool{}
	if err := predecessorSocketInodes(m, child.Process.Pid); err != nil || len(m) != 0 {
		t.Errorf("a predecessor that exited: %d sockets, %v; want none", len(m), err)
	}
}
