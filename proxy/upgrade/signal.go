// Package upgrade answers one question: is some node's apiserver upgrade
// (or rollback) under way? Two signals, earliest first: kubeadm's
// announcement, the Job its `kubeadm upgrade apply` preflight creates in
// kube-system seconds to minutes before it changes any manifest
// (announce.go; every agent follows kube-system's Jobs); and each node's
// static-pod manifest, which `kubeadm upgrade apply/node` rewrites with
// the new image the instant before the kubelet restarts the apiserver (a
// rollback restores the old one): each agent watches its own node's and,
// while it names another version than the apiserver runs, keeps a Lease
// in skewgate's namespace (LeaseNamespace) fresh; every agent watches those Leases (and, for one
// release, reads older builds' in LegacyLeaseNamespace), so the manifest
// reaches every node within tens of milliseconds of the old apiserver's
// SIGTERM (the kubeadm drill: 10 ms on the node, 70 ms on the others).
package upgrade

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
)

// Config configures a Signal.
type Config struct {
	// Node is this node's name (the kubelet's): its lease's holder.
	Node string
	// Manifest is the kube-apiserver static-pod manifest's path; empty:
	// this node publishes nothing, and only other nodes' leases count.
	Manifest string
	// Running is the local apiserver's /version gitVersion as last read,
	// "" when not known yet.
	Running func() string
	// OnChange, if set, is called after Signal's answer changed, so the
	// caller re-evaluates at once rather than at its next poll.
	OnChange func()
	// PollInterval is how often the manifest is read besides its
	// directory's events (default 1 s). The kubelet watches that
	// directory and stops the apiserver within a moment of a new
	// manifest, so the manifest is read on the same event (inotify), and
	// the poll only covers a directory that cannot be watched or an
	// event lost (with the poll alone, the kubeadm drill saw the window
	// open 0.07–0.7 s after the old apiserver stopped).
	PollInterval time.Duration
	// RenewInterval and LeaseDuration: the lease is renewed this often
	// while the upgrade lasts and holds this long after the last renewal
	// (defaults 10 s and 60 s).
	RenewInterval, LeaseDuration time.Duration
	// Announcements: a kubeadm upgrade's preflight Job
	// (kube-system/upgrade-health-check-*) counts from its creation for
	// AnnounceFor (default 2 min) while it exists — the first sign of an
	// upgrade, before any manifest changes (announce.go).
	Announcements bool
	AnnounceFor   time.Duration
	Log           *slog.Logger
}

func (c *Config) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&c.PollInterval, time.Second)
	set(&c.RenewInterval, 10*time.Second)
	set(&c.LeaseDuration, time.Minute)
	set(&c.AnnounceFor, 2*time.Minute)
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Running == nil {
		c.Running = func() string { return "" }
	}
}

// Signal is whether some node's apiserver upgrade is under way.
type Signal struct {
	cfg   Config
	watch *manifestWatch
	// pollOnly: no directory events (tests in a synctest bubble, where a
	// goroutine reading inotify is never durably blocked).
	pollOnly bool

	mu    sync.Mutex
	local Condition
	// decided: the manifest watch has decided local at least once. Until
	// then (the local apiserver's version not read yet: an agent
	// restarted mid-upgrade, its apiserver down) this node's own lease,
	// kept by its predecessor, still counts.
	decided bool
	leases  []coordinationlisters.LeaseNamespaceLister // by namespace; none until Run has a client
	jobs    batchlisters.JobNamespaceLister            // nil until Run has a client, or without Announcements
	on      bool
	reason  string
	expiry  *time.Timer // re-evaluates when the next fresh lease expires
	// seen: when each lease's renewal and Job's creation was first seen.
	seen firstSeen
	// stopped: Run has ended, no timer is armed again.
	stopped bool
}

// New returns a Signal for cfg, or an error if cfg.Node cannot name a
// lease (empty, or too long with the prefix).
func New(cfg Config) (*Signal, error) {
	cfg.defaults()
	if cfg.Node == "" {
		return nil, fmt.Errorf("upgrade signal: no node name")
	}
	if errs := validation.IsDNS1123Subdomain(LeaseName(cfg.Node)); len(errs) > 0 {
		return nil, fmt.Errorf("upgrade signal: node %q: lease name %s: %s", cfg.Node, LeaseName(cfg.Node), strings.Join(errs, "; "))
	}
	s := &Signal{cfg: cfg, local: Condition{Node: cfg.Node}, seen: firstSeen{}}
	if cfg.Manifest != "" {
		s.watch = &manifestWatch{node: cfg.Node, path: cfg.Manifest, running: cfg.Running, log: cfg.Log}
	}
	return s, nil
}

// Signal reports whether some node's upgrade is under way, and which
// ("; "-separated, by node), as of now.
func (s *Signal) Signal() (on bool, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evaluate(time.Now())
}

// evaluate is on while this node's condition is, or while another node's
// lease holds (leaseUntil). This node's own lease is left out once its
// manifest decided: the manifest is the fresher truth, and a lease whose
// deletion failed must not outlive it.
func (s *Signal) evaluate(now time.Time) (bool, string) {
	var reasons []string
	if s.local.On {
		reasons = append(reasons, s.local.Reason())
	}
	for _, l := range s.fresh(now) {
		reasons = append(reasons, l.Reason())
	}
	for _, a := range s.announcements(now) {
		reasons = append(reasons, a.reason())
	}
	slices.Sort(reasons)
	// A node whose lease is in both namespaces (its agent replaced
	// mid-upgrade by a newer one) is one reason.
	reasons = slices.Compact(reasons)
	return len(reasons) > 0, strings.Join(reasons, "; ")
}

// fresh are the other nodes' conditions whose leases hold at now.
func (s *Signal) fresh(now time.Time) []Condition {
	var out []Condition
	for _, l := range s.list() {
		c, until, ok := s.leaseUntil(l, now)
		if ok && now.Before(until) && !(s.decided && c.Node == s.cfg.Node) {
			out = append(out, c)
		}
	}
	return out
}

// leaseUntil is until when l holds, by this agent's clock: from its
// renewal, or from when this agent first saw that renewal if it claims a
// later time, for its duration capped at MaxLeaseFor. A skew of seconds
// between nodes' clocks against a minute's lease does not matter; a
// renewal dated years ahead, or a duration of years, holds a minute.
func (s *Signal) leaseUntil(l *coordinationv1.Lease, now time.Time) (Condition, time.Time, bool) {
	c, renewed, d, ok := leaseCondition(l)
	if !ok {
		return c, time.Time{}, false
	}
	return c, s.seen.since(leaseKey(l), renewed, now).Add(d), true
}

// leaseKey names a lease among both namespaces' (seen).
func leaseKey(l *coordinationv1.Lease) string { return "lease/" + l.Namespace + "/" + l.Name }

// list is every agent's lease, in LeaseNamespace and LegacyLeaseNamespace.
func (s *Signal) list() []*coordinationv1.Lease {
	var out []*coordinationv1.Lease
	for _, l := range s.leases {
		ls, _ := l.List(labels.Everything()) // a cache lister does not fail
		out = append(out, ls...)
	}
	return out
}

// forgetGone drops what was first seen of objects no longer listed.
func (s *Signal) forgetGone() {
	live := map[string]bool{}
	for _, l := range s.list() {
		live[leaseKey(l)] = true
	}
	for _, j := range s.listJobs() {
		live["job/"+j.Name] = true
	}
	s.seen.keep(live)
}

// changed re-evaluates, arms the timer for the next lease or
// announcement to expire (informers say nothing when an object merely
// ages), and calls OnChange
// when the answer moved.
func (s *Signal) changed() {
	now := time.Now()
	s.mu.Lock()
	on, reason := s.evaluate(now)
	s.armExpiry(now)
	s.forgetGone()
	moved := on != s.on || reason != s.reason
	s.on, s.reason = on, reason
	s.mu.Unlock()
	if !moved {
		return
	}
	if on {
		s.cfg.Log.Info("upgrade signal on", "reason", reason)
	} else {
		s.cfg.Log.Info("upgrade signal off")
	}
	if s.cfg.OnChange != nil {
		s.cfg.OnChange()
	}
}

func (s *Signal) armExpiry(now time.Time) {
	var next time.Time
	for _, l := range s.list() {
		if _, until, ok := s.leaseUntil(l, now); ok && now.Before(until) && (next.IsZero() || until.Before(next)) {
			next = until
		}
	}
	for _, a := range s.announcements(now) {
		if next.IsZero() || a.until.Before(next) {
			next = a.until
		}
	}
	s.stopExpiryLocked()
	if !next.IsZero() && !s.stopped {
		// A timer fires no earlier than asked, when now is no longer
		// before the lease's end: the re-evaluation sees it expired.
		s.expiry = time.AfterFunc(next.Sub(now), s.changed)
	}
}

// Run watches this node's manifest and, with a client, publishes this
// node's condition as a lease and follows every node's, until ctx ends.
// Without a client only this node's manifest counts. Failures to write
// the lease are logged (once until it succeeds again) and retried at the
// next renewal; Run returns only when ctx ends.
func (s *Signal) Run(ctx context.Context, client kubernetes.Interface) {
	defer s.stopExpiry()
	if s.watch == nil {
		if client != nil {
			s.follow(ctx, client)
		}
		<-ctx.Done()
		return
	}
	p := &publisher{s: s, client: client, published: true} // a lease of an earlier run may be there
	// This node's first decision before any lease is seen: a lease its
	// predecessor left would otherwise count for a moment.
	s.poll(ctx, p)
	if client != nil {
		s.follow(ctx, client)
	}
	var events <-chan struct{} // nil: never ready
	if !s.pollOnly {
		events = manifestEvents(ctx, s.cfg.Manifest, s.cfg.Log)
	}
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-events:
		}
		s.poll(ctx, p)
	}
}

// poll reads this node's manifest, re-evaluates and publishes.
func (s *Signal) poll(ctx context.Context, p *publisher) {
	c, decided := s.watch.check()
	s.mu.Lock()
	s.local = c
	s.decided = s.decided || decided
	s.mu.Unlock()
	s.changed()
	p.sync(ctx, c, decided, time.Now())
}

// follow starts an informer on the agents' leases in each namespace
// (read only in LegacyLeaseNamespace); it does not wait for their sync:
// until then only this node's manifest counts.
func (s *Signal) follow(ctx context.Context, client kubernetes.Interface) {
	for _, ns := range []string{LeaseNamespace, LegacyLeaseNamespace} {
		f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = Label + "=true" }))
		inf := f.Coordination().V1().Leases()
		changed := func(any) { s.changed() }
		inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: changed,
			UpdateFunc: func(_, obj any) { s.changed() }, DeleteFunc: changed})
		s.mu.Lock()
		s.leases = append(s.leases, inf.Lister().Leases(ns))
		s.mu.Unlock()
		f.Start(ctx.Done())
		context.AfterFunc(ctx, f.Shutdown)
	}
	if s.cfg.Announcements {
		s.followJobs(ctx, client)
	}
}

// followJobs starts an informer on kube-system's Jobs, for kubeadm's
// announcement. Their names cannot be selected by prefix: every Job is
// listed (not by the leases' label), and the cache keeps its name and
// creation only.
func (s *Signal) followJobs(ctx context.Context, client kubernetes.Interface) {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(metav1.NamespaceSystem))
	inf := f.Batch().V1().Jobs()
	changed := func(any) { s.changed() }
	i := inf.Informer()
	if err := i.SetTransform(jobMeta); err != nil {
		s.cfg.Log.Warn("kubeadm's upgrade announcement: whole Jobs cached", "err", err)
	}
	w := &watchErrors{s: s}
	if err := i.SetWatchErrorHandler(w.handle); err != nil {
		s.cfg.Log.Warn("kubeadm's upgrade announcement: its watch errors are logged by client-go", "err", err)
	}
	i.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: changed,
		UpdateFunc: func(_, obj any) { s.changed() }, DeleteFunc: changed})
	s.mu.Lock()
	s.jobs = inf.Lister().Jobs(metav1.NamespaceSystem)
	s.mu.Unlock()
	f.Start(ctx.Done())
	context.AfterFunc(ctx, f.Shutdown)
}

// publisher keeps this node's lease in step with its condition.
type publisher struct {
	s         *Signal
	client    kubernetes.Interface
	published bool          // a lease may exist that the condition does not want
	renewed   time.Time     // zero: renew at the next sync
	as        Condition     // what the lease last said
	failing   string        // the last failure logged
	retryAt   time.Time     // after a failure, no attempt before this
	backoff   time.Duration // the wait after the last failure
}

// firstRetry is the wait after a lease write's first failure: the write
// that tells other nodes of an upgrade is made as the local apiserver is
// stopped for it, and may reach it shutting down (the client fails over
// to a peer once membership sees the local one away, within a second or
// two); the wait doubles up to the renewal interval.
const firstRetry = time.Second

// sync renews the lease every RenewInterval while c is on, at once when
// c changed, and deletes it once c is decided off: an undecided off (the
// apiserver's version not read yet) is no evidence the upgrade ended.
func (p *publisher) sync(ctx context.Context, c Condition, decided bool, now time.Time) {
	if p.client == nil || now.Before(p.retryAt) {
		return
	}
	var err error
	switch {
	case c.On && (c != p.as || now.Sub(p.renewed) >= p.s.cfg.RenewInterval):
		if err = renew(ctx, p.client, c, p.s.cfg.LeaseDuration, now); err == nil {
			p.published, p.renewed, p.as = true, now, c
		}
	case !c.On && decided && p.published:
		if err = release(ctx, p.client, c.Node); err == nil {
			p.published, p.as = false, Condition{}
		}
	}
	if err != nil {
		// Not every poll: a forbidden or unreachable apiserver would get
		// a request a second from every node.
		p.backoff = min(max(2*p.backoff, firstRetry), p.s.cfg.RenewInterval)
		p.retryAt = now.Add(p.backoff)
	} else {
		p.backoff = 0
	}
	p.report(err)
}

func (p *publisher) report(err error) {
	switch {
	case err == nil && p.failing != "":
		p.s.cfg.Log.Info("upgrade lease written again", "lease", LeaseName(p.s.cfg.Node))
		p.failing = ""
	case err != nil && err.Error() != p.failing:
		p.s.cfg.Log.Warn("upgrade lease not written; other nodes learn of this node's upgrade only when its apiserver restarts", "err", err)
		p.failing = err.Error()
	}
}

// stopExpiry ends the expiry timer: after Run, nothing calls OnChange.
func (s *Signal) stopExpiry() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopExpiryLocked()
	s.stopped = true
}

func (s *Signal) stopExpiryLocked() {
	if s.expiry != nil {
		s.expiry.Stop()
		s.expiry = nil
	}
}
