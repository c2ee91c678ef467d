package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/skewgate/skewgate/bpf/steer"
)

// SteeringConfig configures StartSteering. Zero durations take the defaults.
type SteeringConfig struct {
	// PinPath is the directory on a bpffs for the pins, e.g.
	// /sys/fs/bpf/skewgate. A bpffs is mounted at /sys/fs/bpf if needed.
	PinPath string
	// NetNSPath is the network namespace to steer in; DefaultNetNS if empty.
	NetNSPath string
	// Targets are the addresses whose new TCP connections go to the proxy,
	// e.g. node-ip:6443. IPv4 targets match IPv4 connections, IPv6 targets
	// IPv6 ones.
	Targets []netip.AddrPort
	// Exempt lists source prefixes never steered: peer agents, so a
	// forwarded request never enters a second proxy. SetExempt changes it.
	Exempt []netip.Prefix
	// Lease is how long one renewal keeps steering on (default 2s).
	Lease time.Duration
	// Renew is the probe and renewal interval (default 500ms); it must be
	// shorter than Lease. A probe gets Lease-Renew as its deadline: what
	// the lease has left when the next renewal is due, so a slow proxy (a
	// starved machine) keeps steering, while one that stopped answering
	// loses it when the kernel's lease runs out, as soon as with any
	// shorter deadline.
	Renew time.Duration
	// Retry is how long steering stays lapsed after a probe through the
	// steered path failed, before a successful direct probe may grant a new
	// lease (default 10s); see Probe.
	Retry time.Duration
	// Probe checks the proxy. With steered true (kill switch on, lease
	// live) it must check the steered path end to end, e.g. an HTTPS
	// request to a target that must be answered by the proxy. With steered
	// false a request to a target reaches the apiserver, so it must check
	// the proxy's listener directly. The lease is renewed only after the
	// listener is found in the SOCKMAP and the probe succeeds. A lapsed
	// lease is granted again on a direct probe, at start at once and after
	// an end-to-end failure no sooner than Retry: clients are never sent to
	// a proxy that has not just answered, and a path that fails only when
	// steered flaps at most once per Retry. A nil Probe always succeeds.
	Probe func(ctx context.Context, steered bool) error
	// Want says whether steering is wanted now, and why (nil: always).
	// While it is not, the lease is withdrawn at once, so new connections
	// reach the apiserver directly, and no probe runs: a standby is no
	// failure, and steering engages on the next renewal once wanted.
	Want func() (bool, string)
	// Hold, if set, says why new connections must not reach the apiserver
	// directly even if this agent dies ("": nothing holds): a rollback
	// grace or its settle holds a type the local apiserver answers 404
	// for. While it says so, each renewal of the lease also sets the
	// kernel's hold HoldFor ahead: if the proxy is gone (killed, OOM)
	// within it, new connections are refused rather than passed, and the
	// clients retry until a restarted skewgate takes them (steer.c,
	// held). Anything else — not wanted, a failed probe, Withdraw — clears
	// the hold at once.
	Hold func() string
	// HoldFor is how far ahead each renewal sets the hold (default 15 s):
	// how long connections are refused at most after the agent died.
	HoldFor time.Duration
	// OnEngage, if set, runs (in its own goroutine) when steering engages
	// after a standby or at start (fresh: connections made meanwhile went
	// to the apiserver directly), and again, not fresh, when why it steers
	// changes while it steers (rule 3a engaged it, then a window opened):
	// the callee decides what the new reason warrants.
	OnEngage func(fresh bool)
	// Log receives every change of steering state, once (nil: discarded).
	Log *slog.Logger
}

func (c *SteeringConfig) setDefaults() error {
	if c.PinPath == "" {
		return errors.New("steering config: empty PinPath")
	}
	if len(c.Targets) == 0 {
		return errors.New("steering config: no targets")
	}
	if c.NetNSPath == "" {
		c.NetNSPath = DefaultNetNS
	}
	if c.Lease == 0 {
		c.Lease = 2 * time.Second
	}
	if c.Renew == 0 {
		c.Renew = 500 * time.Millisecond
	}
	if c.Retry == 0 {
		c.Retry = 10 * time.Second
	}
	if c.HoldFor == 0 {
		c.HoldFor = 15 * time.Second
	}
	if c.Hold == nil {
		c.Hold = func() string { return "" }
	}
	if c.Renew >= c.Lease {
		return fmt.Errorf("steering config: renew interval %s not shorter than lease %s", c.Renew, c.Lease)
	}
	if c.Probe == nil {
		c.Probe = func(context.Context, bool) error { return nil }
	}
	if c.Want == nil {
		c.Want = func() (bool, string) { return true, "" }
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Steering is a running steering attachment and its lease. It is also a
// prometheus.Collector for the steering state and counters.
type Steering struct {
	cfg    SteeringConfig
	objs   steer.SteerObjects
	link   link.Link
	conf   *config
	cookie uint64
	stats  io.Closer

	mu      sync.Mutex
	status  Status
	targets []netip.AddrPort

	cancel context.CancelFunc
	done   chan struct{}
	errs   counter
}

// StartSteering loads, pins and attaches steer in cfg.NetNSPath, puts ln
// into the SOCKMAP, and renews the lease while cfg.Probe succeeds, until
// Close or ctx ends.
//
// It returns an error only for an invalid cfg or a nil listener. When this
// machine cannot steer (no privileges, a kernel without sk_lookup, a bpffs
// that cannot be mounted, pins of another layout version that cannot be
// removed), it returns a Steering whose Status is disabled with the reason,
// and no error: the proxy keeps serving clients that reach it directly.
// Pins of another layout version are replaced (see checkLayout).
//
// A pin path used before is re-opened: its maps keep their contents (and so
// the operator's kill switch), and the pinned link is updated in place with
// the new program, so steering never lapses across an agent restart. The
// kill switch starts on only when the pins are created.
func StartSteering(ctx context.Context, cfg SteeringConfig, ln *net.TCPListener) (*Steering, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if ln == nil {
		return nil, errors.New("steering: nil listener")
	}
	s := &Steering{cfg: cfg, done: make(chan struct{}), targets: slices.Clone(cfg.Targets)}
	if err := s.install(ln); err != nil {
		s.release()
		s.status = Status{State: StateDisabled, Err: err}
		close(s.done)
		return s, nil
	}
	ctx, s.cancel = context.WithCancel(ctx)
	go s.run(ctx)
	return s, nil
}

func (s *Steering) install(ln *net.TCPListener) error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return classify(fmt.Errorf("remove memlock rlimit: %w", err))
	}
	if err := ensurePinDir(s.cfg.PinPath); err != nil {
		return classify(err)
	}
	if err := checkLayout(s.cfg.PinPath, s.cfg.Log); err != nil {
		return classify(err)
	}
	_, statErr := os.Stat(filepath.Join(s.cfg.PinPath, pinSteerConfig))
	fresh := errors.Is(statErr, os.ErrNotExist)

	spec, err := steer.LoadSteer()
	if err != nil {
		return err
	}
	if err := loadPinned(spec, s.cfg.PinPath, &s.objs); err != nil {
		return err
	}
	if s.conf, err = mapConfig(s.objs.SteerConfig); err != nil {
		return classify(err)
	}
	if fresh {
		s.conf.SetEnabled(true)
	}
	if err := s.writeTargets(); err != nil {
		return err
	}
	if err := s.insertListener(ln); err != nil {
		return err
	}
	if s.stats, err = ebpf.EnableStats(unix.BPF_STATS_RUN_TIME); err != nil {
		// Run time metrics are a nicety; steering works without them.
		s.stats = nil
	}
	s.link, err = s.attach()
	return err
}

// attach swaps the program into the pinned link, or attaches a new link
// when there is none or the pinned one was severed (its netns died, or it
// belongs to another netns).
func (s *Steering) attach() (link.Link, error) {
	ino, err := netnsInode(s.cfg.NetNSPath)
	if err != nil {
		return nil, err
	}
	want := func(info *link.Info) bool {
		ns := info.NetNs()
		return ns != nil && uint64(ns.NetnsInode) == ino
	}
	return updateOrAttach(filepath.Join(s.cfg.PinPath, pinSteerLink), s.objs.Steer, want, func() (link.Link, error) {
		f, err := os.Open(s.cfg.NetNSPath)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return link.AttachNetNs(int(f.Fd()), s.objs.Steer)
	})
}

// SetTargets replaces the steered addresses, e.g. as a VIP arrives on or
// leaves the node. Addresses in both sets stay steered throughout. It does
// nothing on a disabled Steering.
func (s *Steering) SetTargets(targets []netip.AddrPort) error {
	if s.Status().State == StateDisabled {
		return nil
	}
	keys := map[steer.SteerTarget]bool{}
	for _, ap := range targets {
		keys[targetKey(ap)] = true
	}
	if err := syncKeys(s.objs.SteerTargets, keys, steer.SteerDest{}); err != nil {
		return fmt.Errorf("write steer_targets: %w", err)
	}
	s.mu.Lock()
	s.targets = slices.Clone(targets)
	s.mu.Unlock()
	return nil
}

// Targets is what is steered now.
func (s *Steering) Targets() []netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.targets)
}

// SetExempt replaces the exempt source prefixes, e.g. as peers join and
// leave. Prefixes in both the old and the new set stay in the map
// throughout. It does nothing on a disabled Steering.
func (s *Steering) SetExempt(prefixes []netip.Prefix) error {
	if s.Status().State == StateDisabled {
		return nil
	}
	if err := syncKeys(s.objs.SteerExempt, exemptKeys(prefixes), steer.SteerExempt{}); err != nil {
		return fmt.Errorf("write steer_exempt: %w", err)
	}
	return nil
}

func exemptKeys(prefixes []netip.Prefix) map[steer.SteerPrefixKey]bool {
	keys := map[steer.SteerPrefixKey]bool{}
	for _, p := range prefixes {
		keys[prefixKey(p)] = true
	}
	return keys
}

// writeTargets makes steer_targets and steer_exempt equal to the config.
func (s *Steering) writeTargets() error {
	targets := map[steer.SteerTarget]bool{}
	for _, ap := range s.cfg.Targets {
		targets[targetKey(ap)] = true
	}
	if err := syncKeys(s.objs.SteerTargets, targets, steer.SteerDest{}); err != nil {
		return fmt.Errorf("write steer_targets: %w", err)
	}
	if err := syncKeys(s.objs.SteerExempt, exemptKeys(s.cfg.Exempt), steer.SteerExempt{}); err != nil {
		return fmt.Errorf("write steer_exempt: %w", err)
	}
	return nil
}

// syncKeys puts every key of want with value v and deletes other keys, so
// a restarted agent with a new config leaves no stale entry.
func syncKeys[K comparable, V any](m *ebpf.Map, want map[K]bool, v V) error {
	var stale []K
	var k K
	var old V
	it := m.Iterate()
	for it.Next(&k, &old) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	for k := range want {
		if err := m.Put(k, v); err != nil {
			return err
		}
	}
	return nil
}

func (s *Steering) insertListener(ln *net.TCPListener) error {
	var err error
	if s.cookie, err = socketCookie(ln); err != nil {
		return err
	}
	err = controlFD(ln, func(fd int) error {
		return s.objs.SteerSocket.Update(uint32(0), uint64(fd), ebpf.UpdateAny)
	})
	if err != nil {
		return classify(fmt.Errorf("put listener into steer_socket: %w", err))
	}
	return nil
}

func targetKey(ap netip.AddrPort) steer.SteerTarget {
	family := uint16(unix.AF_INET6)
	if ap.Addr().Unmap().Is4() {
		family = unix.AF_INET
	}
	return steer.SteerTarget{Addr: ap.Addr().As16(), Port: ap.Port(), Family: family}
}

// fromPrefixKey undoes prefixKey.
func fromPrefixKey(k steer.SteerPrefixKey) netip.Prefix {
	a, bits := netip.AddrFrom16(k.Addr), int(k.Prefixlen)
	if a.Is4In6() && bits >= 96 {
		a, bits = a.Unmap(), bits-96
	}
	return netip.PrefixFrom(a, bits)
}

func prefixKey(p netip.Prefix) steer.SteerPrefixKey {
	p = p.Masked()
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	return steer.SteerPrefixKey{Prefixlen: uint32(bits), Addr: p.Addr().As16()}
}

func (s *Steering) run(ctx context.Context) {
	defer close(s.done)
	var l lease
	tick := time.NewTicker(s.cfg.Renew)
	defer tick.Stop()
	for {
		if want, why := s.cfg.Want(); !want {
			// The hold first: a lapsed lease under a live hold refuses.
			s.conf.SetHoldUntil(0)
			s.conf.SetLeaseUntil(0)
			s.standby(why)
		} else {
			now := monotonicNow()
			steered := s.conf.Enabled() && s.conf.LeaseUntil() > now
			err := s.check(ctx, steered)
			switch {
			case l.renew(now, steered, err == nil, uint64(s.cfg.Retry)):
				s.conf.SetHoldUntil(s.holdUntil(now))
				s.conf.SetLeaseUntil(now + uint64(s.cfg.Lease))
			case err == nil:
				err = fmt.Errorf("held off until %s after the last failed probe through the steered path", s.cfg.Retry)
				fallthrough
			default:
				// A live agent whose proxy fails its probe steps aside
				// as ever: the hold is for an agent that cannot decide.
				s.conf.SetHoldUntil(0)
			}
			s.setStatus(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// holdUntil is the kernel's hold for a renewal at now: HoldFor ahead
// while Hold says something holds, else none.
func (s *Steering) holdUntil(now uint64) uint64 {
	if s.cfg.Hold() == "" {
		return 0
	}
	return now + uint64(s.cfg.HoldFor)
}

// lease decides renewals from probe outcomes.
type lease struct {
	failedAt uint64 // monotonic ns of the last failed end-to-end probe; 0: none
}

// renew reports whether the lease is to be extended after a probe at now
// (monotonic ns) that went through the steered path (steered) or to the
// listener directly, and passed (ok). A direct probe renews unless an
// end-to-end probe failed less than retry ago.
func (l *lease) renew(now uint64, steered, ok bool, retry uint64) bool {
	switch {
	case steered && !ok:
		l.failedAt = now
		return false
	case !ok:
		return false
	case steered:
		return true
	}
	return l.failedAt == 0 || now-l.failedAt >= retry
}

// check verifies the kernel half of the path (our listener is in the
// SOCKMAP) and then runs the caller's probe.
func (s *Steering) check(ctx context.Context, steered bool) error {
	var cookie uint64
	if err := s.objs.SteerSocket.Lookup(uint32(0), &cookie); err != nil || cookie != s.cookie {
		return fmt.Errorf("%w: listener not in steer_socket (closed?)", errNoListener)
	}
	pctx, cancel := context.WithTimeout(ctx, s.cfg.Lease-s.cfg.Renew)
	defer cancel()
	if err := s.cfg.Probe(pctx, steered); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	return nil
}

var errNoListener = errors.New("no listener")

// withdraw stops renewing, withdraws the lease and takes the listener out
// of the SOCKMAP: new connections reach the apiserver from now on. The
// pins stay, as with Close.
func (s *Steering) withdraw() {
	if s.Status().State == StateDisabled {
		return
	}
	if s.cancel != nil {
		s.cancel()
	}
	<-s.done
	s.conf.SetHoldUntil(0) // a deliberate withdrawal: fail open at once
	s.conf.SetLeaseUntil(0)
	if err := s.objs.SteerSocket.Delete(uint32(0)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		s.cfg.Log.Warn("steering: listener not taken out of steer_socket; new connections fall back when it closes", "err", err)
	}
	s.cfg.Log.Info("steering withdrawn: new connections reach the apiserver directly")
}

// Close stops renewing the lease and releases this process's handles. The
// pins stay and steering stays attached: it falls back to the apiserver when
// the lease lapses (within SteeringConfig.Lease) or at once when the caller
// closes the listener. Use RemovePins to uninstall.
func (s *Steering) Close() error {
	if s.cancel != nil {
		s.cancel()
	}
	<-s.done
	return s.release()
}

func (s *Steering) release() error {
	var errs []error
	if s.link != nil {
		errs = append(errs, s.link.Close())
	}
	if s.conf != nil {
		errs = append(errs, s.conf.close())
	}
	if s.stats != nil {
		errs = append(errs, s.stats.Close())
	}
	errs = append(errs, s.objs.Close())
	return errors.Join(errs...)
}
