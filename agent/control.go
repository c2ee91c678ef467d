package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/skewgate/skewgate/bpf/steer"
)

// Offsets of steer_config's fields (struct config in bpf/steer/steer.c).
const (
	offEnabled = unsafe.Offsetof(steer.SteerConfig{}.Enabled)
	offLease   = unsafe.Offsetof(steer.SteerConfig{}.LeaseUntilNs)
	offHold    = unsafe.Offsetof(steer.SteerConfig{}.HoldUntilNs)
)

// config is steer_config mapped into this process. The agent stores
// lease_until_ns and hold_until_ns and the operator stores enabled, each with one aligned
// atomic store; a read-modify-write of the whole value through the map
// syscalls could let the agent's renewal undo an operator's "off".
type config struct {
	mem []byte
}

func mapConfig(m *ebpf.Map) (*config, error) {
	mem, err := unix.Mmap(m.FD(), 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap steer_config: %w", err)
	}
	return &config{mem: mem}, nil
}

func (c *config) enabled() *uint32 { return (*uint32)(unsafe.Pointer(&c.mem[offEnabled])) }
func (c *config) lease() *uint64   { return (*uint64)(unsafe.Pointer(&c.mem[offLease])) }
func (c *config) hold() *uint64    { return (*uint64)(unsafe.Pointer(&c.mem[offHold])) }

func (c *config) Enabled() bool           { return atomic.LoadUint32(c.enabled()) != 0 }
func (c *config) LeaseUntil() uint64      { return atomic.LoadUint64(c.lease()) }
func (c *config) SetLeaseUntil(ns uint64) { atomic.StoreUint64(c.lease(), ns) }
func (c *config) HoldUntil() uint64       { return atomic.LoadUint64(c.hold()) }
func (c *config) SetHoldUntil(ns uint64)  { atomic.StoreUint64(c.hold(), ns) }
func (c *config) close() error            { return unix.Munmap(c.mem) }
func (c *config) SetEnabled(on bool) {
	var v uint32
	if on {
		v = 1
	}
	atomic.StoreUint32(c.enabled(), v)
}

// monotonicNow is the clock of bpf_ktime_get_ns. It is not adjusted by time
// namespaces the way CLOCK_MONOTONIC is for a process inside one, so the
// agent must not run in a time namespace with an offset.
func monotonicNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_MONOTONIC): %v", err))
	}
	return uint64(ts.Nano())
}

// Control reads and flips the pinned steering state directly, whether or not
// an agent runs. It is what `skewgate steer` uses.
type Control struct {
	cfg      *config
	cfgMap   *ebpf.Map
	socket   *ebpf.Map
	counters *ebpf.Map
	targets  *ebpf.Map
	exempt   *ebpf.Map
}

// OpenControl opens the steering pins under pinPath. It returns an error
// wrapping ErrNotInstalled when there are none, ErrLayout when they have
// another layout version, and ErrNotPermitted without privileges.
func OpenControl(pinPath string) (*Control, error) {
	if _, err := os.Stat(filepath.Join(pinPath, pinSteerConfig)); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w at %s", ErrNotInstalled, pinPath)
	}
	if err := checkLayoutReadOnly(pinPath); err != nil {
		return nil, err
	}
	c := &Control{}
	for name, dst := range map[string]**ebpf.Map{
		steer.SteerMapSteerConfig:   &c.cfgMap,
		steer.SteerMapSteerSocket:   &c.socket,
		steer.SteerMapSteerCounters: &c.counters,
		steer.SteerMapSteerTargets:  &c.targets,
		steer.SteerMapSteerExempt:   &c.exempt,
	} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, name), nil)
		if err != nil {
			c.Close()
			return nil, classify(fmt.Errorf("open pinned map %s: %w", name, err))
		}
		*dst = m
	}
	cfg, err := mapConfig(c.cfgMap)
	if err != nil {
		c.Close()
		return nil, classify(err)
	}
	c.cfg = cfg
	return c, nil
}

func checkLayoutReadOnly(pinPath string) error {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, pinLayout), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return classify(fmt.Errorf("open layout pin: %w", err))
	}
	defer m.Close()
	var version uint32
	if err := m.Lookup(uint32(0), &version); err != nil {
		return fmt.Errorf("read layout: %w", err)
	}
	if version != LayoutVersion {
		return fmt.Errorf("%w: %s has layout %d, this build uses %d", ErrLayout, pinPath, version, LayoutVersion)
	}
	return nil
}

// pinnedHold reports whether the pins under pinPath hold a kernel hold in
// the future: a predecessor (killed, or handing over) was steering inside
// a rollback grace. No pins, or unreadable ones, hold nothing.
func pinnedHold(pinPath string) bool {
	c, err := OpenControl(pinPath)
	if err != nil {
		return false
	}
	defer c.Close()
	return c.cfg.HoldUntil() > monotonicNow()
}

// ErrHeld is TurnOff's refusal while the agent's hold is live.
var ErrHeld = errors.New("a rollback grace holds a type on this node")

// TurnOff turns the kill switch off, as SetEnabled(false), unless the
// agent's hold is live and force is false: a rollback grace or its settle
// holds a type the local apiserver answers 404 for, and a client handed
// back to it (a garbage collector still mapping the type from skewgate's
// merged discovery) would act on that 404. The refusal wraps ErrHeld.
func (c *Control) TurnOff(force bool) error {
	if hold, now := c.cfg.HoldUntil(), monotonicNow(); !force && hold > now {
		return fmt.Errorf("%w (the agent's hold runs %s more, renewed while the grace lasts)", ErrHeld, time.Duration(hold-now).Round(time.Second))
	}
	c.SetEnabled(false)
	return nil
}

// SetEnabled flips the kill switch. Off takes effect for the next new
// connection (the program reads the flag on every lookup) and persists
// across agent restarts until switched on again. Established connections
// are never touched.
func (c *Control) SetEnabled(on bool) { c.cfg.SetEnabled(on) }

// State is a snapshot of the pinned steering state.
type State struct {
	Enabled bool
	// LeaseRemaining is how long steering holds without a renewal; zero or
	// negative when the lease has lapsed.
	LeaseRemaining time.Duration
	// HoldRemaining is how long the agent's hold still refuses new
	// connections to a target if its proxy is gone (see SteeringConfig.
	// Hold); zero or negative when there is none.
	HoldRemaining time.Duration
	// ListenerCookie is the socket cookie of the proxy's listener in the
	// SOCKMAP, 0 when the slot is empty (no agent, or its listener closed).
	ListenerCookie uint64
	// Lookups counts sk_lookup runs by outcome since the maps were created.
	Lookups map[string]uint64
	// Targets are the steered addresses; Exempt the sources never steered.
	Targets []netip.AddrPort
	Exempt  []netip.Prefix
}

// Steering reports whether new connections to a target are steered now.
func (s State) Steering() bool {
	return s.Enabled && s.LeaseRemaining > 0 && s.ListenerCookie != 0
}

func (s State) String() string {
	held := s.HoldRemaining > 0 && (s.ListenerCookie == 0 || s.LeaseRemaining <= 0)
	switch {
	case !s.Enabled:
		return "off (kill switch)"
	case held:
		return fmt.Sprintf("on, held: no live proxy, and a rollback grace holds a type; new connections are refused for %s more (a restarted skewgate takes them), then fall back",
			s.HoldRemaining.Round(time.Millisecond))
	case s.ListenerCookie == 0:
		return "on, but no listener in the SOCKMAP: connections fall back"
	case s.LeaseRemaining <= 0:
		return "on, but the lease has lapsed: connections fall back"
	}
	return fmt.Sprintf("steering (lease %s left)", s.LeaseRemaining.Round(time.Millisecond))
}

// State reads the pinned state.
func (c *Control) State() (State, error) {
	s := State{
		Enabled:        c.cfg.Enabled(),
		LeaseRemaining: time.Duration(int64(c.cfg.LeaseUntil() - monotonicNow())),
	}
	if lease := c.cfg.LeaseUntil(); lease < monotonicNow() {
		s.LeaseRemaining = 0
	}
	if hold, now := c.cfg.HoldUntil(), monotonicNow(); hold > now {
		s.HoldRemaining = time.Duration(hold - now)
	}
	err := c.socket.Lookup(uint32(0), &s.ListenerCookie)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return s, fmt.Errorf("read steer_socket: %w", err)
	}
	if s.Lookups, err = readReasons(c.counters); err != nil {
		return s, err
	}
	var target steer.SteerTarget
	var dest steer.SteerDest
	it := c.targets.Iterate()
	for it.Next(&target, &dest) {
		s.Targets = append(s.Targets, netip.AddrPortFrom(netip.AddrFrom16(target.Addr).Unmap(), target.Port))
	}
	if err := it.Err(); err != nil {
		return s, fmt.Errorf("read steer_targets: %w", err)
	}
	var prefix steer.SteerPrefixKey
	var ex steer.SteerExempt
	it = c.exempt.Iterate()
	for it.Next(&prefix, &ex) {
		s.Exempt = append(s.Exempt, fromPrefixKey(prefix))
	}
	if err := it.Err(); err != nil {
		return s, fmt.Errorf("read steer_exempt: %w", err)
	}
	slices.SortFunc(s.Targets, netip.AddrPort.Compare)
	slices.SortFunc(s.Exempt, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return s, nil
}

// Close releases the pins' file descriptors; the pins stay.
func (c *Control) Close() error {
	var errs []error
	if c.cfg != nil {
		errs = append(errs, c.cfg.close())
	}
	for _, m := range []*ebpf.Map{c.cfgMap, c.socket, c.counters, c.targets, c.exempt} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}
