// Package drill runs the upgrade window skewgate exists for, on the lab: a
// three-node control plane rolls from one version to the next (a Pair:
// v1.35.4 → v1.36.3 by default, or another of Pairs) one node at a time
// and back, under a realistic workload spread by a load balancer, once
// without skewgate, once with kube-apiserver's in-tree Mixed Version Proxy,
// once with skewgate — and counts, per phase, every false 404.
package drill

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/skewgate/skewgate/deploy/image"
	"github.com/skewgate/skewgate/lab"
)

// Modes the drill compares.
const (
	ModeNone   = "no skewgate"
	ModeInTree = "in-tree proxy"
	// ModeSkewgate steers always (--steering-mode=always), as an operator
	// who armed the cluster before the upgrade runs it.
	ModeSkewgate = "skewgate"
	// ModeSkewgateAuto is the default, auto, not armed: steering engages
	// when the skew window opens, and connections made before are ended
	// once their client is quiet (--steering-reset-direct, the default),
	// or moved by the apiservers' GOAWAY (--goaway-chance), so their
	// clients reconnect through skewgate.
	ModeSkewgateAuto = "skewgate auto"
	// ModeSkewgateArmed is auto, armed before the upgrade through the
	// cluster's switch (the ConfigMap kube-system/skewgate, steering:
	// always), as the runbook says.
	ModeSkewgateArmed = "skewgate auto armed"
)

// skewgateModes are the modes that run skewgate, and its --steering-mode.
var skewgateModes = map[string]string{ModeSkewgate: "always", ModeSkewgateAuto: "auto", ModeSkewgateArmed: "auto"}

// AllModes are the modes a drill runs by default, in order.
var AllModes = []string{ModeNone, ModeInTree, ModeSkewgate, ModeSkewgateAuto, ModeSkewgateArmed}

// Options configure Run.
type Options struct {
	// From and To are the upgrade (a Pairs entry; default lab.OldVersion
	// → lab.NewVersion).
	From, To string
	Dir      string // lab state directory for each mode's plane
	CacheDir string
	Skewgate string   // skewgate binary, for ModeSkewgate
	Modes    []string // default: all three, in that order
	// Short upgrades and rolls back node-a only (CI); otherwise every node.
	Short bool
	// Steady is how long the plane runs between phases (default 10 s).
	Steady time.Duration
	// Hold keeps node-b's apiserver down this long in its upgrade (a slow
	// image pull), long enough for the peer-down alert (default 40 s;
	// Short: none).
	Hold time.Duration
	// Prometheus is the prometheus binary; with it, the skewgate mode is
	// scraped and the dashboard's queries and the alerts are checked.
	Prometheus string
	// MonitoringDir holds alerts.yaml (default deploy/monitoring).
	MonitoringDir string
	// Queries are the dashboard panels' queries to check ("" none).
	Queries []PanelQuery
	// OutDir receives the PNGs (default docs/drill).
	OutDir string
	// Kubeadm runs the drill on the kubeadm lab: `kubeadm upgrade apply`
	// and `upgrade node`, each node's kubelet after its control plane, the
	// rollback from kubeadm's backups, the real controller-manager and
	// scheduler, skewgate as its DaemonSet of Image (an archive of make
	// image) tagged ImageTag, and what users lose counted after Settle
	// (default 60 s).
	Kubeadm         bool
	Image, ImageTag string
	// SkewgateArgs are further `skewgate run` flags for the skewgate
	// modes (e.g. --rollback-grace=0), on the lab's skewgates or
	// appended to the DaemonSet's.
	SkewgateArgs []string
	Settle       time.Duration
	// HandBackWait bounds, on kubeadm in ModeSkewgateAuto, how long the
	// workload runs on after the last step for every node's steering to be
	// released and handed back (default 17 minutes: the window's default
	// hold of 10, the hand-back's 5 and a half, and the upgrade Lease's
	// minute).
	HandBackWait time.Duration
	// ControllerManagerLB points every kube-controller-manager (kubeadm:
	// its own node's address) at an L4 load balancer over the nodes
	// (kcmlb.go), as installations behind their own balancer do: the
	// garbage collector's case.
	ControllerManagerLB bool
	// GoawayChance is every apiserver's --goaway-chance (lab.Spec; 0:
	// unset, kube-apiserver's default).
	GoawayChance float64
	// KeepFailed leaves a mode's plane up when the mode fails, its logs
	// and node files there to read (`skewlab down --dir` removes it), and
	// runs no further mode.
	KeepFailed bool
	// KeepLast leaves the last mode's plane up even when it passes: its
	// controllers' logs, its etcd, its skewgate pods to read after the
	// report (`skewlab down --dir` removes it).
	KeepLast bool
	// keep: this mode's plane stays up (KeepLast, on the last mode).
	keep     bool
	Progress io.Writer
	// Build names what was measured, as the report says it (e.g.
	// skewgate's version).
	Build string

	pair Pair // From → To
}

// PanelQuery is one dashboard panel's PromQL, variables substituted.
type PanelQuery struct {
	Panel, Expr string
}

// Result is one mode's run.
type Result struct {
	Mode    string
	Start   time.Time
	End     time.Time
	Phases  []Phase
	events  []event
	gaps    map[string]int
	Monitor *Monitoring // modes skewgate and skewgate auto, with Prometheus only
	Loss    *Loss       // kubeadm only
	// nodes is every node's steering, followed on its pins (kubeadm,
	// skewgate modes), and its apiserver's comings and goings.
	nodes nodeHistory
	// KCM is what the controller-managers' load balancer saw
	// (ControllerManagerLB only).
	KCM *KCMBalancer
	// KubeletKept: no kubelet of the pair's To could be built, and the
	// nodes kept their From kubelet through the upgrade (kubeadm only).
	KubeletKept bool
}

// Phase is a named span of the drill.
type Phase struct {
	Name       string
	Start, End time.Time
}

func (o *Options) defaults() {
	if o.From == "" && o.To == "" {
		o.From, o.To = lab.OldVersion, lab.NewVersion
	}
	if len(o.Modes) == 0 {
		o.Modes = AllModes[:4]
		if o.Kubeadm {
			o.Modes = AllModes
		}
	}
	if o.Steady == 0 {
		o.Steady = 10 * time.Second
	}
	if o.Hold == 0 && !o.Short && !o.Kubeadm {
		o.Hold = 40 * time.Second
	}
	if o.Settle == 0 {
		o.Settle = time.Minute
	}
	if o.HandBackWait == 0 {
		o.HandBackWait = 17 * time.Minute
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.MonitoringDir == "" {
		o.MonitoringDir = filepath.Join("deploy", "monitoring")
	}
	if o.OutDir == "" {
		o.OutDir = filepath.Join("docs", "drill")
	}
}

// checkImage refuses, before any plane is built, a kubeadm drill whose
// skewgate modes would deploy a tag the image archive does not carry
// (the DaemonSet would wait out its rollout on ErrImagePull).
func checkImage(o Options) error {
	if !o.Kubeadm || !slices.ContainsFunc(o.Modes, func(m string) bool { _, ok := skewgateModes[m]; return ok }) {
		return nil
	}
	if o.Image == "" || o.ImageTag == "" {
		return fmt.Errorf("the kubeadm drill's skewgate modes need an image archive and its tag (--image, --tag: make image)")
	}
	_, tag, err := image.ArchiveName(o.Image)
	if err != nil {
		return err
	}
	if tag != o.ImageTag {
		return fmt.Errorf("%s carries tag %s, not %s: build the image at that version (make image VERSION=%s) or pass --tag %s",
			o.Image, tag, o.ImageTag, o.ImageTag, tag)
	}
	return nil
}

// Run runs the drill once per mode, each on a fresh plane torn down after.
func Run(ctx context.Context, o Options) ([]*Result, error) {
	o.defaults()
	var err error
	if o.pair, err = PairOf(o.From, o.To); err != nil {
		return nil, err
	}
	if err := checkImage(o); err != nil {
		return nil, err
	}
	var out []*Result
	for i, mode := range o.Modes {
		fmt.Fprintf(o.Progress, "drill: %s\n", mode)
		mo := o
		mo.keep = o.KeepLast && i == len(o.Modes)-1
		r, err := runMode(ctx, mo, mode)
		if err != nil {
			return out, fmt.Errorf("%s: %w", mode, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// steps are the rolling upgrade and rollback, one node at a time; with
// kubelets (kubeadm), each node's kubelet follows its control plane, but
// on the upgrade only with toKubelet (To's kubelet was built): without
// it the nodes keep From's, which kubeadm's skew policy allows, and the
// rollback's kubelet step restarts it (and replaces skewgate's pod).
func steps(p Pair, short, kubelets, toKubelet bool) []step {
	nodes := []string{"node-a", "node-b", "node-c"}
	if short {
		nodes = nodes[:1]
	}
	var s []step
	add := func(verb, n, version string) {
		up := verb == "upgrade"
		s = append(s, step{verb + " " + n, n, version, up, false})
		if kubelets && (toKubelet || !up) {
			s = append(s, step{verb + " kubelet " + n, n, version, up, true})
		}
	}
	for _, n := range nodes {
		add("upgrade", n, p.To)
	}
	s = append(s, step{name: "steady " + p.To})
	for i := len(nodes) - 1; i >= 0; i-- {
		add("rollback", nodes[i], p.From)
	}
	return append(s, step{name: "steady " + p.From + " again"})
}

type step struct {
	name, node, version string
	upgrade             bool // to the pair's To, not a rollback
	kubelet             bool // the node's kubelet, not its control plane
}

func runMode(ctx context.Context, o Options, mode string) (_ *Result, err error) {
	from, to := o.pair.From, o.pair.To
	spec, err := lab.ParseNodes("node-a=" + from + ",node-b=" + from + ",node-c=" + from)
	if err != nil {
		return nil, err
	}
	spec.InTreeProxy, spec.Kubeadm = mode == ModeInTree, o.Kubeadm
	spec.DefaultAPIs, spec.Upgrades = o.pair.DefaultAPIs, []string{to}
	spec.GoawayChance = o.GoawayChance
	lo := lab.Options{Dir: o.Dir, CacheDir: o.CacheDir, Spec: spec, Progress: o.Progress,
		Versions: []string{to}}
	if o.Kubeadm {
		lo.ReadyTimeout = 3 * time.Minute
	} else if steering, ok := skewgateModes[mode]; ok {
		lo.Skewgate, lo.SkewgateSteeringMode, lo.SkewgateArgs = o.Skewgate, steering, o.SkewgateArgs
	}
	plane, err := lab.Up(ctx, lo)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && o.KeepFailed {
			fmt.Fprintf(o.Progress, "drill: %s failed; its plane is left up in %s (skewlab down --dir %s)\n", mode, o.Dir, o.Dir)
			return
		}
		if o.keep {
			fmt.Fprintf(o.Progress, "drill: %s's plane is left up in %s (skewlab down --dir %s)\n", mode, o.Dir, o.Dir)
			return
		}
		if err := lab.Down(o.Dir); err != nil {
			fmt.Fprintf(o.Progress, "drill: lab down: %v\n", err)
		}
	}()
	var kcm *tcpBalancer
	if o.Kubeadm && o.ControllerManagerLB {
		if kcm, err = pointControllerManagers(ctx, plane, o); err != nil {
			return nil, err
		}
		defer func() {
			if kcm != nil {
				kcm.close(plane.Spec.Nodes)
			}
		}()
	}
	if _, ok := skewgateModes[mode]; ok && o.Kubeadm {
		if err := deploySkewgate(ctx, plane, o, mode); err != nil {
			return nil, err
		}
	}
	pres := newPresence()
	probe, err := probeClient(plane.PKI)
	if err != nil {
		return nil, err
	}
	for _, n := range plane.Spec.Nodes {
		pres.up(n.Name, n.Version)
	}
	if err := pres.learn(ctx, probe, plane.Spec.Nodes[0].URL(), from); err != nil {
		return nil, err
	}
	var mon *Monitoring
	// Prometheus runs beside skewgate always and the default mode: the
	// dashboard's window row shows something only where windows open.
	if (mode == ModeSkewgate || mode == ModeSkewgateAuto) && o.Prometheus != "" {
		if mon, err = startMonitoring(plane, o); err != nil {
			return nil, err
		}
	}
	res, err := drive(ctx, o, plane, pres, mode)
	if err != nil {
		return nil, err
	}
	res.Mode, res.Monitor = mode, mon
	if kcm != nil {
		// After the settle time: the controllers worked through it.
		res.KCM, kcm = kcm.close(plane.Spec.Nodes), nil
	}
	if mon != nil {
		mon.check(ctx, res, o)
	}
	return res, nil
}

// drive runs the workload through the steps and returns what it saw; in
// a skewgate mode on kubeadm it follows every node's steering and, in
// ModeSkewgateAuto, runs on until steering was handed back.
func drive(ctx context.Context, o Options, plane *lab.Plane, pres *presence, mode string) (*Result, error) {
	addrs := map[netip.Addr]string{}
	for _, n := range plane.Spec.Nodes {
		addrs[n.IP] = n.Name
	}
	rec := newRecorder(pres.served, addrs)
	lb := newBalancer(plane.Spec.Nodes)
	var loss *losses
	if o.Kubeadm {
		loss = &losses{}
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	pc, err := probeClient(plane.PKI)
	if err != nil {
		return nil, err
	}
	go lb.check(wctx, pc)
	var steer *steeringLog
	if _, ok := skewgateModes[mode]; ok && o.Kubeadm {
		steer = newSteeringLog()
		go steer.follow(wctx, plane.Spec.Nodes, func(n lab.Node) (bool, error) {
			st, err := lab.KubeletSteering(n)
			return st.Steering(), err
		})
	}
	res := &Result{Start: time.Now(), gaps: map[string]int{}}
	gaps := &gapCounter{counts: res.gaps, served: pres.servedAtAll, owned: o.pair.Owned.GVR}
	phase := func() string { rec.mu.Lock(); defer rec.mu.Unlock(); return rec.phase }
	gaps.phase = phase
	begin := func(name string) {
		now := time.Now()
		if n := len(res.Phases); n > 0 {
			res.Phases[n-1].End = now
		}
		res.Phases = append(res.Phases, Phase{Name: name, Start: now})
		rec.setPhase(name)
		fmt.Fprintf(o.Progress, "drill:   %s\n", name)
	}
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		for _, n := range plane.Spec.Nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				clients{pki: plane.PKI, lb: lb, rec: rec, pair: o.pair}.pinned(wctx, n)
			}()
		}
		clients{pki: plane.PKI, lb: lb, rec: rec, loss: loss, pair: o.pair}.workload(wctx, gaps)
		wg.Wait()
		close(done)
	}()
	begin("steady " + o.pair.From)
	sleep(ctx, o.Steady)
	res.KubeletKept = o.Kubeadm && !plane.HasKubelet(o.pair.To)
	if res.KubeletKept {
		fmt.Fprintf(o.Progress, "drill:   no kubelet %s was built: the nodes keep their %s kubelet through the upgrade\n", o.pair.To, o.pair.From)
	}
	for _, s := range steps(o.pair, o.Short, o.Kubeadm, !res.KubeletKept) {
		begin(s.name)
		if s.node == "" {
			sleep(ctx, o.Steady)
			continue
		}
		if err := move(ctx, o, plane, s, pres, pc); err != nil {
			return nil, err
		}
		if s.kubelet {
			continue
		}
		pres.up(s.node, s.version)
		n, _ := plane.Node(s.node)
		if err := pres.learn(ctx, pc, n.URL(), s.version); err != nil {
			fmt.Fprintf(o.Progress, "drill:   %v\n", err)
		}
		sleep(ctx, 3*time.Second) // the next node waits until this one serves
	}
	if steer != nil && mode == ModeSkewgateAuto {
		begin("hand-back")
		for deadline := time.Now().Add(o.HandBackWait); time.Now().Before(deadline) && !steer.handedBack(handBackSpan, time.Now()); {
			if !sleep(ctx, time.Second) {
				break
			}
		}
	}
	res.End = time.Now()
	res.Phases[len(res.Phases)-1].End = res.End
	stop()
	<-done
	res.events = rec.snapshot()
	res.nodes.stops, res.nodes.silent, res.nodes.ups = pres.history()
	if steer != nil {
		res.nodes.initial, res.nodes.changes = steer.snapshot()
	}
	if loss != nil {
		fmt.Fprintf(o.Progress, "drill:   counting what was lost, after %s\n", o.Settle)
		res.Loss = loss.count(ctx, plane, o.Settle)
	}
	return res, ctx.Err()
}

// move takes step s's node to s.version: on the binary-swap lab, its
// apiserver stopped and started on the other binary (node-b held down
// o.Hold in its upgrade); on kubeadm, kubeadm's and the operator's step.
func move(ctx context.Context, o Options, plane *lab.Plane, s step, pres *presence, pc *http.Client) error {
	if o.Kubeadm {
		return moveKubeadm(ctx, plane, s, pres, pc)
	}
	hold := time.Duration(0)
	if s.node == "node-b" && s.upgrade {
		hold = o.Hold
	}
	pres.down(s.node, time.Now())
	return plane.UpgradeNode(ctx, s.node, s.version, hold, 90*time.Second)
}
