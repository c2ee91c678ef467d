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
// Only a connection with nothing in flight — the apiserver spoke last, at
// least settle ago (see idle) — is ended, so no request is cut in its
// middle (a watch is, and its reflector resumes from its
// resourceVersion); the others are counted busy, for the caller to try
// again. A connection not yet accepted (inode 0: in an accept queue,
// skewgate's own included), from loopback, or one notDirect's answer
// names (skewgate's
// own sockets — steered connections have the target as their local
// address too — and peer apiservers') is left alone. A connection that
// closes before its turn is counted gone, and the sweep goes on. Both
// families are searched: Go servers such as kube-apiserver listen on
// 0.0.0.0 with a dual-stack IPv6 socket, whose IPv4 connections are
// AF_INET6 with mapped addresses. It needs CONFIG_INET_DIAG_DESTROY and
// CAP_NET_ADMIN.
func resetDirect(ctx context.Context, targets []netip.AddrPort, settle time.Duration, notDirect func() (func(remote netip.AddrPort, inode uint32) bool, error)) (sweep, error) {
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
		if !idle(r, settle) {
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

// idle reports whether nothing is in flight on the connection: no byte
// queued either way or unacknowledged, and the apiserver spoke last — its
// last data sent at least settle ago, and no byte received since. That is
// a client between two requests (a controller asking ten times a second
// is, most of the time, and is never quiet for long), or a watch whose
// last event or bookmark was sent. A request the apiserver is still
// computing shows as data received after the last sent, however long ago
// (a request hung for seconds while etcd restarts is not idle: the
// kubeadm drill saw such requests cut when a quiet second counted).
func idle(r *netlink.InetDiagTCPInfoResp, settle time.Duration) bool {
	s, ti := r.InetDiagMsg, r.TCPInfo
	if ti == nil || s.RQueue != 0 || s.WQueue != 0 || ti.Unacked != 0 {
		return false
	}
	// Equal: sent and received in one jiffy — a quick answer to the
	// last request (tcp_info counts in jiffies).
	return ti.Last_data_sent <= ti.Last_data_recv && ti.Last_data_sent >= uint32(settle/time.Millisecond)
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
