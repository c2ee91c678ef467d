package agent

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
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

// resetDirect ends, paced, the established TCP connections to targets that
// the apiserver accepted directly: made before steering engaged (mode
// auto, before the skew window opened), they would otherwise stay on one
// server for as long as they live, and a client with several connections
// could read discovery from a new server and then ask an old one directly
// — a false 404. Ended, their clients reconnect through skewgate. What a
// client sees: a reset connection; a request in flight on it fails
// (client-go retries reads, not writes). Connections from loopback and
// those skip names (skewgate's own sockets — steered connections have the
// target as their local address too — and peer apiservers') are left
// alone. Both families are searched: Go servers such as kube-apiserver
// listen on 0.0.0.0 with a dual-stack IPv6 socket, whose IPv4 connections
// are AF_INET6 with mapped addresses. It needs CONFIG_INET_DIAG_DESTROY
// and CAP_NET_ADMIN. It returns how many it ended.
func resetDirect(ctx context.Context, targets []netip.AddrPort, skip func(remote netip.AddrPort, inode uint32) bool) (int, error) {
	var socks []*netlink.Socket
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		list, err := netlink.SocketDiagTCP(family)
		if err != nil {
			return 0, fmt.Errorf("list tcp sockets: %w", err)
		}
		socks = append(socks, list...)
	}
	want := map[netip.AddrPort]bool{}
	for _, t := range targets {
		want[netip.AddrPortFrom(t.Addr().Unmap(), t.Port())] = true
	}
	ended := 0
	for _, s := range socks {
		local, ok1 := addrPort(s.ID.Source, s.ID.SourcePort)
		remote, ok2 := addrPort(s.ID.Destination, s.ID.DestinationPort)
		if !ok1 || !ok2 || s.State != netlink.TCP_ESTABLISHED || !want[local] ||
			remote.Addr().IsLoopback() || skip != nil && skip(remote, s.INode) {
			continue
		}
		if err := destroy(s); err != nil {
			return ended, fmt.Errorf("end %s→%s: %w", remote, local, err)
		}
		ended++
		if ended%resetPace == 0 {
			select {
			case <-ctx.Done():
				return ended, ctx.Err()
			case <-time.After(resetTick):
			}
		}
	}
	return ended, nil
}

func addrPort(ip net.IP, port uint16) (netip.AddrPort, bool) {
	a, ok := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), port), ok
}

// ownSocketInodes are the inodes of this process's sockets.
func ownSocketInodes() (map[uint64]bool, error) {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	out := map[uint64]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		var ino uint64
		if _, err := fmt.Sscanf(link, "socket:[%d]", &ino); err == nil {
			out[ino] = true
		}
	}
	return out, nil
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
