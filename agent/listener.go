package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

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
//
// A v4-mapped address (LoopbackBoth) gets an AF_INET6 socket that is not
// v6only, bound to the v4-mapped address: sk_lookup assigns it connections
// of both families (the kernel gives no IPv6 connection to an AF_INET
// socket and no IPv4 one to a v6only socket), while the kernel's own
// lookup reaches it only from 127.0.0.1. Go alone would make that an
// AF_INET socket ("tcp") or refuse the address ("tcp6"). Where the kernel
// has no IPv6 (ipv6.disable=1) it is 127.0.0.1 on an AF_INET socket: no
// IPv6 connection exists to steer.
func NewListener(addr string) (*net.TCPListener, error) {
	if ap, err := netip.ParseAddrPort(addr); err == nil && ap.Addr().Is4In6() {
		l, err := listenMapped(ap)
		if !errors.Is(err, unix.EAFNOSUPPORT) {
			return l, err
		}
		addr = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	}
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return l.(*net.TCPListener), nil
}

// LoopbackBoth is the proxy's default address with steering: 127.0.0.1 on
// an IPv6 socket that takes both families' steered connections (see
// NewListener). Nothing reaches it from outside the node but through
// steering. Not ::1: a v6only socket there (as Go makes it) gets no IPv4
// connection, and a host that disabled IPv6 on lo has no ::1 to bind,
// while a v4-mapped address needs only the kernel's IPv6 sockets.
const LoopbackBoth = "::ffff:127.0.0.1"

// listenMapped listens on the v4-mapped ap with an AF_INET6 socket that is
// not v6only, as Go listens (SO_REUSEADDR, non-blocking, close-on-exec;
// no MPTCP, no SO_REUSEPORT). The socket's first fd is closed before it
// returns: the listener's is the only one (see NewListener).
func listenMapped(ap netip.AddrPort) (*net.TCPListener, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return nil, fmt.Errorf("listen %s: socket: %w", ap, err)
	}
	f := os.NewFile(uintptr(fd), "tcp6 "+ap.String())
	defer f.Close()
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
		return nil, fmt.Errorf("listen %s: clear IPV6_V6ONLY: %w", ap, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return nil, fmt.Errorf("listen %s: SO_REUSEADDR: %w", ap, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}); err != nil {
		return nil, fmt.Errorf("listen %s: bind: %w", ap, err)
	}
	// The kernel caps the backlog at net.core.somaxconn, which Go asks for.
	if err := unix.Listen(fd, 65535); err != nil {
		return nil, fmt.Errorf("listen %s: %w", ap, err)
	}
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", ap, err)
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
