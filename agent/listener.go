package agent

import (
	"context"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// NewListener listens on addr (host:port) for the proxy, in a form steer can
// hold in its SOCKMAP:
//
//   - without MPTCP: Go 1.24+ listens with MPTCP by default, and an MPTCP
//     socket cannot enter a SOCKMAP (the update fails with EOPNOTSUPP);
//   - without SO_REUSEPORT: sk_lookup rejects reuseport groups.
//
// The SOCKMAP entry disappears when the socket's last file descriptor
// closes; that is how a dead agent fails open. So do not duplicate the fd
// (TCPListener.File, passing it to a child): keep the listener the only
// holder. The listener is created in the calling thread's network
// namespace.
func NewListener(addr string) (*net.TCPListener, error) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return l.(*net.TCPListener), nil
}

// socketCookie returns the kernel's cookie for ln's socket: what a SOCKMAP
// lookup from user space returns, and what BPF_PROG_RUN reports as the
// selected socket.
func socketCookie(ln *net.TCPListener) (uint64, error) {
	var cookie uint64
	err := controlFD(ln, func(fd int) (err error) {
		cookie, err = unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("socket cookie: %w", err)
	}
	return cookie, nil
}

// controlFD runs fn on ln's fd without duplicating it.
func controlFD(ln *net.TCPListener, fn func(fd int) error) error {
	rc, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
