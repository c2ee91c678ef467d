package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/skewgate/skewgate/lab/testenv"
)

// installed are the kernel objects behind the pins of a pin path.
type installed struct {
	links []link.ID
	progs []ebpf.ProgramID
	maps  []ebpf.MapID
}

// pinnedObjects reads the IDs of every link, program and map pinned under
// pins, and of the programs the links run.
func pinnedObjects(t *testing.T, pins string) installed {
	t.Helper()
	entries, err := os.ReadDir(pins)
	if err != nil {
		t.Fatal(err)
	}
	var in installed
	for _, e := range entries {
		path := filepath.Join(pins, e.Name())
		if l, err := link.LoadPinnedLink(path, nil); err == nil {
			info, err := l.Info()
			l.Close()
			if err != nil {
				t.Fatal(err)
			}
			in.links, in.progs = append(in.links, info.ID), append(in.progs, info.Program)
			continue
		}
		m, err := ebpf.LoadPinnedMap(path, nil)
		if err != nil {
			t.Fatalf("pin %s is neither a link nor a map: %v", e.Name(), err)
		}
		info, err := m.Info()
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		id, _ := info.ID()
		in.maps = append(in.maps, id)
	}
	return in
}

// left lists the objects of in that still exist in the kernel.
func (in installed) left() []string {
	var left []string
	for _, id := range in.links {
		if l, err := link.NewFromID(id); err == nil {
			l.Close()
			left = append(left, "link "+strconv.FormatUint(uint64(id), 10))
		}
	}
	for _, id := range in.progs {
		if p, err := ebpf.NewProgramFromID(id); err == nil {
			p.Close()
			left = append(left, "program "+strconv.FormatUint(uint64(id), 10))
		}
	}
	for _, id := range in.maps {
		if m, err := ebpf.NewMapFromID(id); err == nil {
			m.Close()
			left = append(left, "map "+strconv.FormatUint(uint64(id), 10))
		}
	}
	return left
}

// netnsLinks lists the IDs of the links attached in the namespace at path.
func netnsLinks(t *testing.T, path string) []link.ID {
	t.Helper()
	ino, err := netnsInode(path)
	if err != nil {
		t.Fatal(err)
	}
	var ids []link.ID
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		if info, err := it.Link.Info(); err == nil && info.NetNs() != nil && uint64(info.NetNs().NetnsInode) == ino {
			ids = append(ids, it.ID)
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// bystanders are BPF objects next to skewgate's that are not skewgate's:
// an sk_lookup program attached in the same namespace and a map pinned
// beside the pin path. Uninstall must leave both.
type bystanders struct {
	link link.Link
	pin  string
}

func newBystanders(t *testing.T, n *node) bystanders {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.SkLookup, License: "GPL", AttachType: ebpf.AttachSkLookup,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()}, // SK_PASS
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	f, err := os.Open(n.ns.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, err := link.AttachNetNs(int(f.Fd()), prog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pin := n.pins + "-bystander"
	if err := m.Pin(pin); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(pin) })
	return bystanders{link: l, pin: pin}
}

func (b bystanders) check(t *testing.T, n *node) {
	t.Helper()
	info, err := b.link.Info()
	if err != nil {
		t.Fatal(err)
	}
	if got := netnsLinks(t, n.ns.path); !slices.Equal(got, []link.ID{info.ID}) {
		t.Errorf("links in the namespace after uninstall: %v, want only the bystander's %d", got, info.ID)
	}
	if _, err := os.Stat(b.pin); err != nil {
		t.Errorf("uninstall removed a bystander's pin: %v", err)
	}
}

// TestUninstall installs steering and connstat with the agent's code in a
// throwaway namespace and uninstalls them while the agent still holds its
// handles: new connections reach the apiserver at once, and once the agent
// is gone every link, program and map it created is gone from the kernel,
// the pin path too, and nothing else is touched.
func TestUninstall(t *testing.T) {
	testenv.RequireRoot(t)
	n := newNode(t)
	by := newBystanders(t, n)
	ln := listenIn(t, n.ns, proxyAddr)
	serveGreeter(t, "proxy", ln)
	s, err := StartSteering(context.Background(), n.steeringConfig(), ln)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, s, StateSteering)
	cs, err := StartConnStat(ConnStatConfig{PinPath: n.pins, NetNSPath: n.ns.path, ProxyPort: 16443})
	if err != nil || cs.Status().State == StateDisabled {
		t.Fatalf("connstat: %v %s", err, cs.Status())
	}
	if got := n.dial.who(t, targetAddr); got != "proxy" {
		t.Fatalf("installed: %s answered, want proxy", got)
	}
	ours := pinnedObjects(t, n.pins)
	if len(ours.links) != 2 || len(ours.maps) < 5 {
		t.Fatalf("installed %+v: want 2 links and the maps", ours)
	}

	r, err := Uninstall(n.pins)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("removed links %q, pins %q", r.Links, r.Pins)
	if len(r.Links) != 2 || !slices.Contains(r.Pins, pinLayout) || !slices.Contains(r.Pins, pinSteerLink) || !slices.Contains(r.Pins, pinConnLink) {
		t.Errorf("report %+v: want both links and every pin", r)
	}
	if got := n.dial.who(t, targetAddr); got != "origin" {
		t.Errorf("after uninstall, agent still running: %s answered, want the apiserver", got)
	}
	s.Close()
	cs.Close()
	if _, err := os.Stat(n.pins); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin path still there: %v", err)
	}
	// The kernel frees programs and then their maps after RCU grace periods.
	left := ours.left()
	for deadline := time.Now().Add(5 * time.Second); len(left) > 0 && time.Now().Before(deadline); left = ours.left() {
		time.Sleep(20 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("left in the kernel 5s after the agent exited: %v", left)
	}
	by.check(t, n)

	if _, err := Uninstall(n.pins); !errors.Is(err, ErrNotInstalled) {
		t.Errorf("second uninstall: %v, want ErrNotInstalled", err)
	}
}

// TestUninstallRefuses: a path off bpffs, and a bpffs directory without a
// layout pin (not skewgate's), are refused and left as they are.
func TestUninstallRefuses(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := Uninstall(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not on a bpffs") {
		t.Errorf("a tmp dir: err %v, want not on a bpffs", err)
	}
	dir := testPinPath(t)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	foreign := filepath.Join(dir, "someone_elses")
	if err := m.Pin(foreign); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(foreign) })
	if _, err := Uninstall(dir); err == nil || !strings.Contains(err.Error(), "not skewgate's") {
		t.Errorf("a foreign bpffs dir: err %v, want a refusal", err)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("refused uninstall removed a foreign pin: %v", err)
	}
	os.Remove(foreign)
}
