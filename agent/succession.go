package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// handOverMsg names the sockets sent with it, in the order of their file
// descriptors.
type handOverMsg struct {
	Names []string `json:"names"`
}

// leaveMsg is what a successor that serves sends its predecessor.
const leaveMsg = "leave\n"

// maxHandOver bounds the sockets one hand-over carries.
const maxHandOver = 8

// Offer serves the listeners (by name) to successors on the unix socket at
// path until ctx ends or one asked the holder to leave: Left is closed then.
// A successor that goes away before asking (it crashed while starting) is
// forgotten and the next one is offered the same sockets.
type Offer struct {
	ln   *net.UnixListener
	left chan struct{}
	once sync.Once
	log  *slog.Logger
}

// Left is closed once a successor serves on the offered sockets and asked
// this process to leave.
func (o *Offer) Left() <-chan struct{} { return o.left }

// StartOffer listens on path (replacing a socket a predecessor left there:
// the one who inherited from it now offers) and serves listeners to one
// successor at a time.
func StartOffer(ctx context.Context, path string, listeners map[string]*net.TCPListener, log *slog.Logger) (*Offer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("hand-over socket %s: %w", path, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("hand-over socket: %w", err)
	}
	// A successor replaces the path with its own socket; this process's
	// exit must not remove that.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("hand-over socket: %w", err)
	}
	o := &Offer{ln: ln, left: make(chan struct{}), log: log}
	context.AfterFunc(ctx, func() { ln.Close() })
	go o.serve(listeners)
	return o, nil
}

func (o *Offer) serve(listeners map[string]*net.TCPListener) {
	defer o.ln.Close()
	for {
		c, err := o.ln.AcceptUnix()
		if err != nil {
			return
		}
		if o.handOver(c, listeners) {
			o.once.Do(func() { close(o.left) })
			return
		}
	}
}

// handOver sends the listeners to the successor on c and waits for it to
// ask this process to leave; false if it went away first.
func (o *Offer) handOver(c *net.UnixConn, listeners map[string]*net.TCPListener) bool {
	defer c.Close()
	var msg handOverMsg
	var fds []int
	var rcs []syscall.RawConn
	for name, ln := range listeners {
		rc, err := ln.SyscallConn()
		if err != nil {
			o.log.Warn("hand-over: listener not offered", "listener", name, "err", err)
			continue
		}
		msg.Names = append(msg.Names, name)
		rcs = append(rcs, rc)
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return false
	}
	// Each fd is valid while its Control runs: nest them, then send.
	var send func(i int) error
	send = func(i int) error {
		if i == len(rcs) {
			_, _, err := c.WriteMsgUnix(body, unix.UnixRights(fds...), nil)
			return err
		}
		var inner error
		if err := rcs[i].Control(func(fd uintptr) {
			fds = append(fds, int(fd))
			inner = send(i + 1)
		}); err != nil {
			return err
		}
		return inner
	}
	if err := send(0); err != nil {
		o.log.Warn("hand-over: sockets not sent", "err", err)
		return false
	}
	o.log.Info("hand-over: listening sockets sent to a successor; serving until it asks this process to leave", "listeners", msg.Names)
	buf := make([]byte, len(leaveMsg))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != leaveMsg {
		o.log.Warn("hand-over: the successor went away before it served; still serving, offering again", "err", err)
		return false
	}
	o.log.Info("hand-over: the successor serves; leaving")
	return true
}

// Inheritance is what a successor received from its predecessor.
type Inheritance struct {
	conn      *net.UnixConn
	listeners map[string]*net.TCPListener
	// pid is the predecessor's process ID as this process sees it
	// (SO_PEERCRED; 0 in another PID namespace).
	pid int
}

// Inherit asks the skewgate offering sockets at path for them. No offer
// there (no file, nobody listening: the first start, or after a crash) is
// (nil, nil): bind as usual.
func Inherit(path string, timeout time.Duration) (*Inheritance, error) {
	c, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return nil, nil
		}
		return nil, fmt.Errorf("hand-over socket %s: %w", path, err)
	}
	uc := c.(*net.UnixConn)
	_ = uc.SetReadDeadline(time.Now().Add(timeout))
	buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4*maxHandOver))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("hand-over socket %s: %w", path, err)
	}
	_ = uc.SetReadDeadline(time.Time{})
	fds, err := parseRights(oob[:oobn])
	if err != nil {
		uc.Close()
		return nil, fmt.Errorf("hand-over: %w", err)
	}
	in := &Inheritance{conn: uc, listeners: map[string]*net.TCPListener{}, pid: peerPID(uc)}
	var msg handOverMsg
	if err := json.Unmarshal(buf[:n], &msg); err != nil || len(msg.Names) != len(fds) {
		closeFDs(fds)
		uc.Close()
		return nil, fmt.Errorf("hand-over: %d sockets for names %q: %v", len(fds), buf[:n], err)
	}
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), msg.Names[i])
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			in.Close()
			closeFDs(fds[i+1:])
			return nil, fmt.Errorf("hand-over: %s: %w", msg.Names[i], err)
		}
		tl, ok := l.(*net.TCPListener)
		if !ok {
			l.Close()
			continue
		}
		in.listeners[msg.Names[i]] = tl
	}
	return in, nil
}

// peerPID is the process ID of c's other end (0: unknown, or in a PID
// namespace this process does not see).
func peerPID(c *net.UnixConn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var cred *unix.Ucred
	if err := raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cred == nil {
		return 0
	}
	return int(cred.Pid)
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			return nil, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Take returns the inherited listener name if it listens on addr's port,
// and hands it to the caller (a second Take of it returns nil). A listener
// on another port (the flags changed in the rollout) is closed: bind anew.
// One on the same port but another address (a release that listened on
// 0.0.0.0 before LoopbackBoth was the default) is kept, and moved says so:
// the new address could not be bound beside the predecessor's listener
// on the same port, and closing the inherited socket would close the
// steered one under every client. The new address applies at the next
// start without a predecessor.
func (in *Inheritance) Take(name, addr string) (l *net.TCPListener, moved bool) {
	if in == nil {
		return nil, false
	}
	l, ok := in.listeners[name]
	if !ok {
		return nil, false
	}
	delete(in.listeners, name)
	switch {
	case sameAddr(l.Addr(), addr):
		return l, false
	case samePort(l.Addr(), addr):
		return l, true
	}
	l.Close()
	return nil, false
}

// Names lists the listeners not taken yet.
func (in *Inheritance) Names() []string {
	var out []string
	if in != nil {
		for n := range in.listeners {
			out = append(out, n)
		}
	}
	return out
}

// sameAddr reports whether a listener on got is what binding addr would
// give: the same port and the same address, or both unspecified.
func sameAddr(got net.Addr, addr string) bool {
	g, ok := got.(*net.TCPAddr)
	if !ok {
		return false
	}
	want, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil || want.Port != g.Port {
		return false
	}
	if len(want.IP) == 0 || want.IP.IsUnspecified() {
		return g.IP.IsUnspecified()
	}
	return want.IP.Equal(g.IP)
}

// samePort reports whether a listener on got has addr's port.
func samePort(got net.Addr, addr string) bool {
	g, ok := got.(*net.TCPAddr)
	if !ok {
		return false
	}
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port == strconv.Itoa(g.Port)
}

// Release tells the predecessor that this process serves: it stops
// accepting and leaves. Listeners not taken are closed.
func (in *Inheritance) Release() error {
	if in == nil {
		return nil
	}
	defer in.Close()
	if _, err := in.conn.Write([]byte(leaveMsg)); err != nil {
		return fmt.Errorf("hand-over: the predecessor was not told to leave: %w", err)
	}
	return nil
}

// Close closes the connection to the predecessor (which then keeps serving
// and offers again) and the listeners not taken.
func (in *Inheritance) Close() {
	if in == nil {
		return
	}
	for _, l := range in.listeners {
		l.Close()
	}
	in.listeners = nil
	in.conn.Close()
}

// Succession hands a running skewgate's listening sockets to the next one
// on the node, so that a restart (a rollout, a deleted pod whose
// replacement the DaemonSet starts beside it) never lets a client
// connection fall open to the apiserver in between: the steered socket is
// never closed, so the SOCKMAP keeps it, and every connection made during
// the hand-over waits in its accept queue for whichever process accepts
// first.
//
// The predecessor offers its sockets on a unix socket (Offer). A successor
// that finds it (Inherit) receives them (SCM_RIGHTS) instead of binding,
// serves on them once it is ready, and then asks the predecessor to leave
// (Inheritance.Release): the predecessor stops accepting, ends its own
// connections gracefully (HTTP/2 GOAWAY, watches ended cleanly) and lets
// its steering lease go without withdrawing it. Both processes hold the
// sockets meanwhile; NewListener's rule — one holder, so a dead agent fails
// open — holds again once the predecessor left, or when a successor dies
// before it asked.
//
// A Succession is one skewgate's side of it, both ways: the sockets it
// inherited (or bound), offered in turn to its own successor.
type Succession struct {
	path string
	wait time.Duration
	log  *slog.Logger
	in   *Inheritance

	mu        sync.Mutex
	listeners map[string]*net.TCPListener
	offer     *Offer
	offered   chan struct{} // closed once offer is set

	handedOver atomic.Bool
}

// NewSuccession takes the sockets a running skewgate offers at path, if
// one does ("" : no hand-over, every socket is bound). wait is how long a
// SIGTERM waits for a successor (Context).
func NewSuccession(path string, wait time.Duration, log *slog.Logger) (*Succession, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Succession{path: path, wait: wait, log: log, listeners: map[string]*net.TCPListener{}, offered: make(chan struct{})}
	if path == "" {
		return s, nil
	}
	in, err := Inherit(path, 5*time.Second)
	if err != nil {
		return nil, err
	}
	if in != nil {
		log.Info("hand-over: inherited the listening sockets of the skewgate running on this node; it serves until this one does", "listeners", in.Names())
	}
	s.in = in
	return s, nil
}

// Listen is the listener name on addr: the inherited one, or a new one
// (NewListener). It is offered to the next successor.
func (s *Succession) Listen(name, addr string) (*net.TCPListener, error) {
	l, moved := s.in.Take(name, addr)
	if moved {
		s.log.Warn("hand-over: the inherited listener is kept on its address, not the one asked for; that one applies at the next start without a predecessor",
			"listener", name, "address", l.Addr().String(), "asked", addr)
	}
	if l == nil {
		var err error
		if l, err = NewListener(addr); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	s.listeners[name] = l
	s.mu.Unlock()
	return l, nil
}

// Serving is called once this process serves on its listeners: the
// predecessor, if any, is told to leave, and the listeners are offered to
// the next successor until ctx ends.
func (s *Succession) Serving(ctx context.Context) error {
	if s.path == "" {
		return nil
	}
	if err := s.in.Release(); err != nil {
		s.log.Warn("hand-over", "err", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, err := StartOffer(ctx, s.path, maps.Clone(s.listeners), s.log)
	if err != nil {
		return err
	}
	s.offer = o
	close(s.offered)
	return nil
}

// Inherited reports whether a predecessor handed its sockets over.
func (s *Succession) Inherited() bool { return s.in != nil }

// Predecessor is the process ID of the skewgate that handed its sockets
// over (0: none, or not visible from this PID namespace).
func (s *Succession) Predecessor() int {
	if s.in == nil {
		return 0
	}
	return s.in.pid
}

// HandedOver reports whether a successor took this process's sockets and
// serves on them: stop without withdrawing steering.
func (s *Succession) HandedOver() bool { return s.handedOver.Load() }

// Context is the context to run under: it ends once a successor asked
// this process to leave, or when sig ends (SIGTERM) — after waiting up to
// the configured wait for a successor to ask, which a DaemonSet with
// maxSurge starts beside a deleted pod.
func (s *Succession) Context(sig context.Context) context.Context {
	ctx, cancel := context.WithCancel(context.WithoutCancel(sig))
	go func() {
		defer cancel()
		select {
		case <-s.offered:
		case <-sig.Done():
			select {
			case <-s.offered:
			default:
				return // still starting: nothing offered, nobody to wait for
			}
		}
		select {
		case <-s.offer.Left():
			s.handedOver.Store(true)
			return
		case <-sig.Done():
		}
		if s.wait <= 0 {
			return
		}
		s.log.Info("stopping: waiting for a successor to take the listening sockets", "wait", s.wait)
		select {
		case <-s.offer.Left():
			s.handedOver.Store(true)
		case <-time.After(s.wait):
			s.log.Info("stopping: no successor came; steering is withdrawn")
		}
	}()
	return ctx
}
