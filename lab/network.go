package lab

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netnsDir is where named network namespaces are bind-mounted, so `ip netns`
// lists the lab's nodes too.
const netnsDir = "/var/run/netns"

// NetNSPath is the bind mount of node n's network namespace.
func NetNSPath(name string) string { return filepath.Join(netnsDir, name) }

// InNode runs f on a thread inside node name's network namespace: the
// sockets f opens (a listener, a dial) live there, and serve from any
// goroutine after.
func InNode(name string, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	ns, err := netns.GetFromPath(NetNSPath(name))
	if err != nil {
		return err
	}
	defer ns.Close()
	if err := netns.Set(ns); err != nil {
		return fmt.Errorf("enter %s's network namespace: %w", name, err)
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		// This thread must serve no one else: panic while it is locked.
		panic(fmt.Sprintf("back from %s's network namespace: %v", name, err))
	}
	return ferr
}

// vethName is the root-namespace end of node name's link.
func vethName(name string) string { return "sl-" + name }

// ensureBridge creates the lab bridge with BridgeAddr, or reuses it.
func ensureBridge() error {
	br, err := netlink.LinkByName(BridgeName)
	if err != nil {
		br = &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: BridgeName}}
		if err := netlink.LinkAdd(br); err != nil {
			return fmt.Errorf("add bridge %s: %w", BridgeName, err)
		}
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(BridgeAddr.AsSlice()), Mask: net.CIDRMask(Subnet.Bits(), 32)}}
	if err := netlink.AddrReplace(br, addr); err != nil {
		return fmt.Errorf("address bridge %s: %w", BridgeName, err)
	}
	if err := netlink.LinkSetUp(br); err != nil {
		return fmt.Errorf("up bridge %s: %w", BridgeName, err)
	}
	return nil
}

// createNodeNetwork creates node n's named network namespace and wires it to
// the bridge as eth0 with n.IP. It fails if the namespace already exists, so
// a second lab never takes over the first one's nodes.
func createNodeNetwork(n Node) error {
	if _, err := os.Stat(NetNSPath(n.Name)); err == nil {
		return fmt.Errorf("network namespace %s exists: another lab is up (run `make lab-down`)", n.Name)
	}
	ns, err := newNamedNetNS(n.Name)
	if err != nil {
		return err
	}
	defer ns.Close()
	br, err := netlink.LinkByName(BridgeName)
	if err != nil {
		return fmt.Errorf("find bridge: %w", err)
	}
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: vethName(n.Name), MasterIndex: br.Attrs().Index},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(ns)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth for %s: %w", n.Name, err)
	}
	if err := netlink.LinkSetUp(veth); err != nil {
		return fmt.Errorf("up %s: %w", veth.Name, err)
	}
	return configureInside(ns, n)
}

// newNamedNetNS creates a named namespace without leaving the calling
// goroutine's thread in it: netns.NewNamed switches the current thread.
func newNamedNetNS(name string) (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return 0, fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name)
	if err != nil {
		return 0, fmt.Errorf("create netns %s: %w", name, err)
	}
	if err := netns.Set(orig); err != nil {
		ns.Close()
		return 0, fmt.Errorf("return from netns %s: %w", name, err)
	}
	return ns, nil
}

// configureInside brings lo and eth0 up inside ns and gives eth0 n.IP.
func configureInside(ns netns.NsHandle, n Node) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", n.Name, err)
	}
	defer h.Close()
	for _, name := range []string{"lo", "eth0"} {
		link, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("%s in %s: %w", name, n.Name, err)
		}
		if name == "eth0" {
			addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(n.IP.AsSlice()), Mask: net.CIDRMask(Subnet.Bits(), 32)}}
			if err := h.AddrAdd(link, addr); err != nil {
				return fmt.Errorf("address eth0 in %s: %w", n.Name, err)
			}
		}
		if err := h.LinkSetUp(link); err != nil {
			return fmt.Errorf("up %s in %s: %w", name, n.Name, err)
		}
	}
	return addNodeExtras(h, n)
}

// addNodeExtras makes a node namespace look like a real node's: a default
// route over its node address, and a second interface with a global
// address of its own, as cni0 or docker0 have on a node. Nothing is sent
// to either; skewgate must still pick the node address as the one it
// probes through (it steers cni0's too: the apiserver serves it).
func addNodeExtras(h *netlink.Handle, n Node) error {
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	gw := net.IP(BridgeAddr.AsSlice())
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: gw}); err != nil {
		return fmt.Errorf("default route in %s: %w", n.Name, err)
	}
	cni := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "cni0"}}
	if err := h.LinkAdd(cni); err != nil {
		return fmt.Errorf("cni0 in %s: %w", n.Name, err)
	}
	last := n.IP.As4()[3]
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 244, last, 1), Mask: net.CIDRMask(24, 32)}}
	if err := h.AddrAdd(cni, addr); err != nil {
		return fmt.Errorf("address cni0 in %s: %w", n.Name, err)
	}
	return h.LinkSetUp(cni)
}

// deleteNodeNetwork removes node name's namespace (its veth goes with it)
// and the root end of the veth if the namespace was already gone. Missing
// pieces are not errors: tear-down must work after a crash.
func deleteNodeNetwork(name string) error {
	var errs []error
	if _, err := os.Stat(NetNSPath(name)); err == nil {
		if err := netns.DeleteNamed(name); err != nil {
			errs = append(errs, fmt.Errorf("delete netns %s: %w", name, err))
		}
	}
	// The root end usually dies with the namespace, possibly between the
	// lookup and the delete.
	if link, err := netlink.LinkByName(vethName(name)); err == nil {
		if err := netlink.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("delete %s: %w", vethName(name), err))
		}
	}
	return errors.Join(errs...)
}

// deleteBridge removes the lab bridge if it exists.
func deleteBridge() error {
	link, err := netlink.LinkByName(BridgeName)
	if err != nil {
		return nil
	}
	if err := netlink.LinkDel(link); err != nil {
		return fmt.Errorf("delete bridge %s: %w", BridgeName, err)
	}
	return nil
}
