package agent

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// The test namespaces use only loopback and 198.18.1.0/24, and names
// starting with sgt-; the lab owns 198.18.0.0/24 and node-*.
var nodeAddr = netip.MustParseAddr("198.18.1.1")

func randomSuffix(t testing.TB) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// testNetNS is a throwaway network namespace with lo up.
type testNetNS struct {
	name    string
	path    string
	deleted bool
}

// newTestNetNS creates a named namespace sgt-<random> with lo up and addrs
// on lo, and deletes it when the test ends.
func newTestNetNS(t testing.TB, addrs ...netip.Prefix) *testNetNS {
	t.Helper()
	name := "sgt-" + randomSuffix(t)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		ns, err := netns.NewNamed(name)
		if err != nil {
			errc <- err
			return
		}
		ns.Close()
		err = setupLo(addrs)
		if serr := netns.Set(orig); serr != nil {
			errc <- errors.Join(err, serr) // thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	if err := <-errc; err != nil {
		netns.DeleteNamed(name)
		t.Fatalf("create netns %s: %v", name, err)
	}
	n := &testNetNS{name: name, path: filepath.Join("/run/netns", name)}
	t.Cleanup(func() { n.delete(t) })
	return n
}

// delete removes the namespace's name; the kernel destroys it once no
// socket or thread refers to it any more.
func (n *testNetNS) delete(t testing.TB) {
	if n.deleted {
		return
	}
	n.deleted = true
	if err := netns.DeleteNamed(n.name); err != nil {
		t.Errorf("delete netns %s: %v", n.name, err)
	}
}

func setupLo(addrs []netip.Prefix) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return err
	}
	for _, p := range addrs {
		a, err := netlink.ParseAddr(p.String())
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(lo, a); err != nil {
			return fmt.Errorf("add %s: %w", p, err)
		}
	}
	return nil
}

// do runs fn in the namespace on a locked thread (see inNetNS).
func (n *testNetNS) do(t testing.TB, fn func() error) {
	t.Helper()
	if err := inNetNS(n.path, fn); err != nil {
		t.Fatal(err)
	}
}

// greeter accepts on ln and greets each connection with its name, then
// echoes lines until the peer closes, so a test can tell which socket took a
// connection and that it stays up.
type greeter struct {
	name string
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	conn []net.Conn
}

func serveGreeter(t testing.TB, name string, ln net.Listener) *greeter {
	g := &greeter{name: name, ln: ln}
	g.wg.Add(1)
	go g.serve()
	t.Cleanup(g.close)
	return g
}

func (g *greeter) serve() {
	defer g.wg.Done()
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		g.conn = append(g.conn, c)
		g.mu.Unlock()
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			defer c.Close()
			fmt.Fprintf(c, "%s\n", g.name)
			io.Copy(c, c)
		}()
	}
}

func (g *greeter) close() {
	g.ln.Close()
	g.mu.Lock()
	for _, c := range g.conn {
		c.Close()
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// listenIn listens on addr inside ns with NewListener (no MPTCP).
func listenIn(t testing.TB, ns *testNetNS, addr string) *net.TCPListener {
	t.Helper()
	var ln *net.TCPListener
	ns.do(t, func() (err error) {
		ln, err = NewListener(addr)
		return err
	})
	t.Cleanup(func() { ln.Close() })
	return ln
}

// dialer dials from inside a namespace on one locked thread.
type dialer struct {
	reqs chan dialReq
	stop chan struct{}
}

type dialReq struct {
	addr  string
	reply chan dialResult
}

type dialResult struct {
	conn  net.Conn
	greet string
	err   error
}

func newDialer(t testing.TB, ns *testNetNS) *dialer {
	d := &dialer{reqs: make(chan dialReq), stop: make(chan struct{})}
	ready := make(chan struct{})
	go inNetNS(ns.path, func() error {
		close(ready)
		for {
			select {
			case <-d.stop:
				return nil
			case r := <-d.reqs:
				r.reply <- dialGreet(r.addr)
			}
		}
	})
	<-ready
	t.Cleanup(func() { close(d.stop) })
	return d
}

func dialGreet(addr string) dialResult {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return dialResult{err: err}
	}
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		c.Close()
		return dialResult{err: fmt.Errorf("read greeting: %w", err)}
	}
	c.SetDeadline(time.Time{})
	return dialResult{conn: c, greet: strings.TrimSpace(line)}
}

// dial opens a connection to addr from the namespace and returns who greeted.
func (d *dialer) dial(addr string) dialResult {
	r := dialReq{addr: addr, reply: make(chan dialResult, 1)}
	d.reqs <- r
	return <-r.reply
}

// who dials addr, closes the connection and returns the greeting.
func (d *dialer) who(t testing.TB, addr string) string {
	t.Helper()
	r := d.dial(addr)
	if r.err != nil {
		t.Fatalf("dial %s: %v", addr, r.err)
	}
	r.conn.Close()
	return r.greet
}

// echo checks that an established connection still carries data.
func echo(c net.Conn) error {
	c.SetDeadline(time.Now().Add(2 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return fmt.Errorf("echo %q", line)
	}
	return nil
}

// stream dials addr back to back from ns until stopped, recording every
// outcome with its start and end time.
type stream struct {
	mu      sync.Mutex
	results []streamResult
	stop    chan struct{}
	done    chan struct{}
}

type streamResult struct {
	start, end time.Time // dial began; greeting read or failure seen
	greet      string
	err        error
}

// overlaps reports whether the connection was open at some moment in
// [from, to].
func (r streamResult) overlaps(from, to time.Time) bool {
	return r.start.Before(to) && r.end.After(from)
}

func startStream(t testing.TB, ns *testNetNS, addr string, limit int) *stream {
	s := &stream{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		inNetNS(ns.path, func() error {
			for i := 0; i < limit; i++ {
				select {
				case <-s.stop:
					return nil
				default:
				}
				start := time.Now()
				r := dialGreet(addr)
				if r.conn != nil {
					r.conn.Close()
				}
				s.mu.Lock()
				s.results = append(s.results, streamResult{start: start, end: time.Now(), greet: r.greet, err: r.err})
				s.mu.Unlock()
				time.Sleep(time.Millisecond)
			}
			return nil
		})
	}()
	t.Cleanup(s.halt)
	return s
}

func (s *stream) halt() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

func (s *stream) snapshot() []streamResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]streamResult(nil), s.results...)
}

// waitGreet polls until a stream result started after since was greeted by
// want, or fails after the deadline.
func (s *stream) waitGreet(t testing.TB, want string, since time.Time, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, r := range s.snapshot() {
			if r.start.After(since) && r.greet == want {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no connection greeted by %s within %s", want, timeout)
}

// testPinPath returns a fresh pin path on the bpffs, removed at the end.
func testPinPath(t testing.TB) string {
	t.Helper()
	p := filepath.Join(DefaultBPFFS, "sgt-"+randomSuffix(t))
	t.Cleanup(func() {
		if err := RemovePins(p); err != nil {
			t.Errorf("remove pins: %v", err)
		}
	})
	return p
}
