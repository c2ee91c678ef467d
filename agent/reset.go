package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// resetPace is how many connections are ended per resetTick: a node's
// clients reconnect over a second or so, not all at once.
const (
	resetPace = 20
	resetTick = 100 * time.Millisecond
)

// MinResetQuiet is the least quiet time ResetQuiet picks by default.
const MinResetQuiet = 90 * time.Second

// ResetQuiet is how long a direct connection's client must have sent no
// data before a sweep may end it (--steering-reset-quiet; 0: the default,
// the apiserver's request timeout × 1.5 and at least MinResetQuiet). srv
// is the local apiserver's manifest; nil means kube-apiserver's default
// --request-timeout. A flag at or below the request timeout is an error:
// the quiet time is what proves no request in flight (isQuiet).
//
// The proof is kube-apiserver's handler chain (k8s.io/apiserver
// pkg/server/config.go DefaultBuildHandlerChain): WithRequestDeadline
// gives every request that is not long-running a deadline of at most
// --request-timeout, and WithTimeoutForNonLongRunningRequests answers 504
// at that deadline (or resets the stream if the answer had begun); both
// wrap WithPriorityAndFairness, so the time a request waits in APF's
// queues counts against the same deadline. A client silent for longer
// than the request timeout therefore has an answer to every short request
// it sent.
func ResetQuiet(flag time.Duration, srv *Serving) (time.Duration, error) {
	timeout, from := DefaultRequestTimeout, "kube-apiserver's default --request-timeout"
	if srv != nil {
		timeout, from = srv.RequestTimeout, "--request-timeout in "+srv.Manifest
	}
	if flag == 0 {
		return max(timeout*3/2, MinResetQuiet), nil
	}
	if flag <= timeout {
		return 0, fmt.Errorf("--steering-reset-quiet=%s: want more than the apiserver's request timeout, %s (%s): "+
			"a client silent for less may still wait for an answer, and its request would be cut", flag, timeout, from)
	}
	return flag, nil
}

// sweep is one pass of resetDirect.
type sweep struct {
	ended int // connections ended
	busy  int // left because something was in flight on them
	gone  int // closed by their owners before their turn
}

// resetDirect ends, paced, the established TCP connections to targets that
// the apiserver accepted directly and that carry nothing in flight: made
// before steering engaged, they would otherwise stay on one server for as
// long as they live. Ended, their clients reconnect through skewgate.
//
// Only a connection the kernel shows quiet — nothing queued or
// unacknowledged, and no data from its client for quiet (see isQuiet) —
// is ended, so no request is cut in its middle (a quiet watch is, and its
// reflector resumes from its resourceVersion); the others are counted
// busy, for the caller to try again. A connection not yet accepted (inode
// 0: in an accept queue, skewgate's own included), from loopback, or one
// notDirect's answer names (skewgate's own sockets — steered connections
// have the target as their local address too — and peer apiservers') is
// left alone. A connection that closes before its turn is counted gone,
// and the sweep goes on. Both families are searched: Go servers such as
// kube-apiserver listen on 0.0.0.0 with a dual-stack IPv6 socket, whose
// IPv4 connections are AF_INET6 with mapped addresses. It needs
// CONFIG_INET_DIAG_DESTROY and CAP_NET_ADMIN.
func resetDirect(ctx context.Context, targets []netip.AddrPort, quiet time.Duration, notDirect func() (func(remote netip.AddrPort, inode uint32) bool, error)) (sweep, error) {
	var socks []*netlink.InetDiagTCPInfoResp
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		list, err := netlink.SocketDiagTCPInfo(family)
		if err != nil {
			return sweep{}, fmt.Errorf("list tcp sockets: %w", err)
		}
		socks = append(socks, list...)
	}
	// Whose they are, asked after they are listed: a connection listed
	// with an inode was accepted, so its owner holds it by now. Asked
	// before, one accepted in between would be nobody's, and ended.
	skip, err := notDirect()
	if err != nil {
		return sweep{}, err
	}
	want := map[netip.AddrPort]bool{}
	for _, t := range targets {
		want[netip.AddrPortFrom(t.Addr().Unmap(), t.Port())] = true
	}
	var out sweep
	for _, r := range socks {
		s := r.InetDiagMsg
		local, ok1 := addrPort(s.ID.Source, s.ID.SourcePort)
		remote, ok2 := addrPort(s.ID.Destination, s.ID.DestinationPort)
		if !ok1 || !ok2 || s.State != netlink.TCP_ESTABLISHED || !want[local] || s.INode == 0 ||
			remote.Addr().IsLoopback() || skip(remote, s.INode) {
			continue
		}
		if !isQuiet(r, quiet) {
			out.busy++
			continue
		}
		switch err := destroy(s); {
		case errors.Is(err, unix.ENOENT):
			out.gone++
			continue
		case err != nil:
			return out, fmt.Errorf("end %s→%s: %w", remote, local, err)
		}
		out.ended++
		if out.ended%resetPace == 0 {
			select {
			case <-ctx.Done():
				return out, ctx.Err()
			case <-time.After(resetTick):
			}
		}
	}
	return out, nil
}

// isQuiet reports whether the kernel proves nothing in flight on the
// connection: no byte queued either way or unacknowledged, and no data
// from its client for quiet (tcp_info last_data_recv: data only, not ACKs
// or TCP keepalives). quiet must exceed the apiserver's --request-timeout
// (see ResetQuiet): by then every request that is not long-running was
// answered or ended by the apiserver itself, so what a quiet connection
// can still carry is a watch or another stream its client does not speak
// on, and a watch resumes from its resourceVersion.
//
// Who spoke last proves nothing under TLS and HTTP/2: Go's HTTP/2 server
// sends SETTINGS and WINDOW_UPDATE frames on its own while a handler still
// works, so a write whose body was read looked answered (the rule before
// this one cut such writes in the 1.37 drill, after the apiserver applied
// them). A client that keeps a connection alive with PINGs is never quiet:
// only its apiserver moves it (GOAWAY, its idle timeout).
func isQuiet(r *netlink.InetDiagTCPInfoResp, quiet time.Duration) bool {
	s, ti := r.InetDiagMsg, r.TCPInfo
	if ti == nil || s.RQueue != 0 || s.WQueue != 0 || ti.Unacked != 0 {
		return false
	}
	return time.Duration(ti.Last_data_recv)*time.Millisecond >= quiet
}

func addrPort(ip net.IP, port uint16) (netip.AddrPort, bool) {
	a, ok := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), port), ok
}

// ownSocketInodes are the inodes of this process's sockets.
func ownSocketInodes() (map[uint64]bool, error) {
	out := map[uint64]bool{}
	return out, addSocketInodes(out, "self")
}

// addSocketInodes adds to out the inodes of the sockets process pid ("self"
// or a number) holds.
func addSocketInodes(out map[uint64]bool, pid string) error {
	dir := filepath.Join("/proc", pid, "fd")
	fds, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		var ino uint64
		if _, err := fmt.Sscanf(link, "socket:[%d]", &ino); err == nil {
			out[ino] = true
		}
	}
	return nil
}

// predecessorSocketInodes adds to out the sockets of the skewgate this
// process took its listening sockets from (pid), while it runs: it still
// serves the connections it accepted — steered ones, whose local address
// is the apiserver's too — until they drained. A pid that is gone, or that
// now names another program, adds nothing.
func predecessorSocketInodes(out map[uint64]bool, pid int) error {
	p := strconv.Itoa(pid)
	comm, err := os.ReadFile(filepath.Join("/proc", p, "comm"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("the predecessor's process %d: %w", pid, err)
	}
	own, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		return err
	}
	if !bytes.Equal(comm, own) {
		return nil
	}
	if err := addSocketInodes(out, p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("the predecessor's sockets (process %d): %w", pid, err)
	}
	return nil
}

// destroy ends the socket s (as listed by a dump: its family, and its ID
// with cookie) with SOCK_DESTROY. netlink's SocketDestroy takes only IPv4.
func destroy(s *netlink.Socket) error {
	req := nl.NewNetlinkRequest(nl.SOCK_DESTROY, unix.NLM_F_ACK)
	req.AddData(&diagRequest{family: s.Family, id: s.ID})
	_, err := req.Execute(unix.NETLINK_INET_DIAG, 0)
	return err
}

// diagRequest is struct inet_diag_req_v2 (linux/inet_diag.h) for TCP.
type diagRequest struct {
	family uint8
	id     netlink.SocketID
}

func (r *diagRequest) Len() int { return 56 }

func (r *diagRequest) Serialize() []byte {
	b := make([]byte, r.Len())
	b[0], b[1] = r.family, unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(b[4:], 0xfff) // every state
	binary.BigEndian.PutUint16(b[8:], r.id.SourcePort)
	binary.BigEndian.PutUint16(b[10:], r.id.DestinationPort)
	addr := func(ip net.IP) []byte {
		if r.family == unix.AF_INET {
			return ip.To4()
		}
		return ip.To16()
	}
	copy(b[12:28], addr(r.id.Source))
	copy(b[28:44], addr(r.id.Destination))
	binary.NativeEndian.PutUint32(b[44:], r.id.Interface)
	binary.NativeEndian.PutUint32(b[48:], r.id.Cookie[0])
	binary.NativeEndian.PutUint32(b[52:], r.id.Cookie[1])
	return b
}

// ProbeSweep returns nil if this kernel can end a socket with SOCK_DESTROY
// (CONFIG_INET_DIAG_DESTROY, Linux 4.5), which the sweep needs, and an
// error wrapping ErrNotSupported if it cannot. It asks to end a socket that
// does not exist: a kernel that can answers ENOENT, one built without the
// option EOPNOTSUPP, before any socket is looked up.
func ProbeSweep() error {
	none := &netlink.Socket{Family: unix.AF_INET, ID: netlink.SocketID{
		Source: net.IPv4zero, Destination: net.IPv4zero, Cookie: [2]uint32{^uint32(0), ^uint32(0)}}}
	return sweepSupport(destroy(none))
}

// sweepSupport reads the answer to ProbeSweep's request.
func sweepSupport(err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case err == nil:
		return errors.New("SOCK_DESTROY of no socket succeeded: cannot tell")
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOTSUP):
		return fmt.Errorf("%w: SOCK_DESTROY (CONFIG_INET_DIAG_DESTROY): %w", ErrNotSupported, err)
	}
	return fmt.Errorf("SOCK_DESTROY: %w", err)
}
