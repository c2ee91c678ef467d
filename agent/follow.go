package agent

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
)

// maxTargets bounds the steered addresses (steer_targets holds 64).
const maxTargets = 64

// followAddresses keeps every global address of the node steered as
// addresses come and go: keepalived and kube-vip add the control plane's
// VIP as a secondary address (on an interface, or on lo for BGP) on the
// node that holds it and remove it when another takes over, so the VIP is
// steered within moments of arriving (and stays a target when it leaves:
// see follower.update). It follows netlink's address notifications, and
// re-reads once a second as well in case one was lost.
func (n *Node) followAddresses(ctx context.Context, st *Steering) {
	updates, done := make(chan netlink.AddrUpdate, 16), make(chan struct{})
	defer close(done)
	err := netlink.AddrSubscribeWithOptions(updates, done, netlink.AddrSubscribeOptions{
		ErrorCallback: func(err error) { n.cfg.Log.Warn("steering: address notifications", "err", err) },
	})
	if err != nil {
		n.cfg.Log.Warn("steering: no address notifications; re-reading every second", "err", err)
		updates = nil
	}
	f := follower{primary: n.target.Primary, list: nodeInterfaces, st: st, log: n.cfg.Log}
	f.run(ctx, n.target.All, updates, time.Second)
}

// follower steers what the node holds as it changes.
type follower struct {
	primary netip.AddrPort
	list    func() ([]Interface, error)
	st      *Steering
	log     *slog.Logger
}

// run updates the targets from last on, on every notification and every
// tick, until ctx ends.
func (f follower) run(ctx context.Context, last []netip.AddrPort, updates <-chan netlink.AddrUpdate, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		last = f.update(last)
		select {
		case <-ctx.Done():
			return
		case <-updates:
		case <-tick.C:
		}
	}
}

// update steers what the node holds now and keeps what it held before:
// sk_lookup only sees connections to addresses the node holds, so an
// address that left costs nothing, and when it comes back (a VIP moved
// back) it is steered from its first connection, not once its
// notification was handled. It returns what is steered.
func (f follower) update(last []netip.AddrPort) []netip.AddrPort {
	ifcs, err := f.list()
	if err != nil {
		return last
	}
	held := withPort(f.primary.Addr(), nodeAddrs(ifcs), f.primary.Port())
	want := held
	for _, a := range last {
		if !slices.Contains(want, a) && len(want) < maxTargets {
			want = append(want, a)
		}
	}
	if slices.Equal(want, last) {
		return last
	}
	if err := f.st.SetTargets(want); err != nil {
		f.log.Error("steering: targets not updated", "err", err)
		return last
	}
	f.log.Info("steering: addresses changed", "held", held, "targets", want)
	return want
}

var (
	descSteeringMode = prometheus.NewDesc("skewgate_steering_mode",
		"1 for the steering mode in force (always, auto or off): --steering-mode, or the cluster's kube-system/skewgate ConfigMap, which wins.",
		[]string{"mode"}, nil)
	descSkewWindow = prometheus.NewDesc("skewgate_skew_window",
		"1 while the apiservers are in a skew window (an upgrade or a rollback: their versions or what their binaries serve differ, or a node's apiserver upgrade has begun; and the hold time after): mode auto steers then.",
		nil, nil)
	descResetConnections = prometheus.NewDesc("skewgate_steering_reset_connections_total",
		"Connections the apiserver accepted directly, ended when steering engaged after a standby so their clients reconnect through skewgate (--steering-reset-direct).",
		nil, nil)
	descSteeredTargets = prometheus.NewDesc("skewgate_steering_targets",
		"How many addresses are steered (the node's addresses on the apiserver's port, a VIP while the node holds it, on any interface or lo).",
		nil, nil)
)

// modeCollector exports the node's metrics: the mode, the window, the
// targets, and steering's once installed. Before, every steering state
// is there at 0 and the lease at 0, so that a panel or an alert reading
// them has a series from start-up (the kernel's counters come with the
// program).
type modeCollector struct{ n *Node }

func (c modeCollector) Describe(ch chan<- *prometheus.Desc) {
	(*Steering)(nil).Describe(ch)
	ch <- descSteeringMode
	ch <- descSkewWindow
	ch <- descSteeredTargets
	ch <- descResetConnections
	ch <- descDirect
}

func (c modeCollector) Collect(ch chan<- prometheus.Metric) {
	mode, w := c.n.mode()
	for _, m := range Modes {
		v := 0.0
		if m == mode {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descSteeringMode, prometheus.GaugeValue, v, string(m))
	}
	open := 0.0
	if w.Open {
		open = 1
	}
	ch <- prometheus.MustNewConstMetric(descSkewWindow, prometheus.GaugeValue, open)
	ch <- prometheus.MustNewConstMetric(descResetConnections, prometheus.CounterValue, float64(c.n.resets.Load()))
	c.n.mu.Lock()
	st := c.n.st
	c.n.mu.Unlock()
	if st != nil {
		st.Collect(ch)
		ch <- prometheus.MustNewConstMetric(descSteeredTargets, prometheus.GaugeValue, float64(len(st.Targets())))
	} else {
		for _, name := range allStates {
			ch <- prometheus.MustNewConstMetric(descSteeringState, prometheus.GaugeValue, 0, string(name))
		}
		ch <- prometheus.MustNewConstMetric(descSteeringLease, prometheus.GaugeValue, 0)
		ch <- prometheus.MustNewConstMetric(descSteeredTargets, prometheus.GaugeValue, 0)
	}
	c.n.collectDirect(ch)
}
