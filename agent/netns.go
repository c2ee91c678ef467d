package agent

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// DefaultNetNS is the network namespace of the agent's process.
const DefaultNetNS = "/proc/self/ns/net"

func netnsInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat netns %s: %w", path, err)
	}
	return st.Ino, nil
}

// netnsCookie returns the cookie bpf_get_netns_cookie reports for sockets of
// the network namespace at path (SO_NETNS_COOKIE, Linux 5.14). For the
// caller's own namespace it does not setns, which needs CAP_SYS_ADMIN: an
// agent in a hostNetwork pod runs without it.
func netnsCookie(path string) (uint64, error) {
	var cookie uint64
	read := func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		cookie, err = unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
		return err
	}
	// This thread's namespace, not /proc/self's: the main thread may be
	// locked into another namespace by a goroutine.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var err error
	if sameNetNS(path, "/proc/thread-self/ns/net") {
		err = read()
	} else {
		err = inNetNS(path, read)
	}
	if err != nil {
		return 0, fmt.Errorf("netns cookie of %s: %w", path, err)
	}
	return cookie, nil
}

// sameNetNS reports whether a and b name one network namespace.
func sameNetNS(a, b string) bool {
	ia, erra := netnsInode(a)
	ib, errb := netnsInode(b)
	return erra == nil && errb == nil && ia == ib
}

// inNetNS runs fn on a locked OS thread that has entered the network
// namespace at path. If the thread cannot return to its namespace it stays
// locked, so the Go runtime discards it when the goroutine ends.
func inNetNS(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}
