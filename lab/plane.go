package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// Options configure Up.
type Options struct {
	Dir          string // state, PKI, logs and env of the plane
	CacheDir     string // built binaries
	Spec         Spec
	ReadyTimeout time.Duration
	Progress     io.Writer
	// Skewgate, if set, is the skewgate binary to run on every node,
	// steering the node's addresses into itself.
	Skewgate string
	// SkewgateSteeringMode is those skewgates' --steering-mode ("": the
	// default, auto).
	SkewgateSteeringMode string
	// SkewgateArgs are further `skewgate run` flags for those skewgates.
	SkewgateArgs []string
	// Versions are more kube-apiserver versions to have built, for
	// UpgradeNode.
	Versions []string
}

// Plane is a running lab control plane.
type Plane struct {
	Dir   string
	Spec  Spec
	PKI   *PKI
	Bins  Binaries
	State *State
	out   io.Writer
	cache string // CacheDir
	// skewgateMode is how Up runs skewgate on every node.
	skewgateMode SkewgateMode
	// kubeadm are the kubeadm mode's binaries, once known.
	kubeadm        *KubeadmBinaries
	kubeadmSecrets kubeadmSecrets
}

// stopGrace is how long a process gets to exit after SIGTERM.
const stopGrace = 10 * time.Second

// Up builds what is missing and brings up etcd and every node's
// kube-apiserver, oldest version first, each waited for until ready. On any
// failure it prints what failed with the log tail, tears down what it
// started, and returns the error.
func Up(ctx context.Context, o Options) (*Plane, error) {
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 90 * time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	// Every path the lab writes (kubeconfigs, .lab/env) is absolute, so
	// it works from any folder: kubectl resolves a kubeconfig's relative
	// paths from the kubeconfig's own folder, not the caller's.
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("lab dir %s: %w", o.Dir, err)
	}
	o.Dir = dir
	if err := refuseIfUp(o.Dir); err != nil {
		return nil, err
	}
	if o.Spec.Kubeadm && (o.Spec.NoEndpoints || o.Spec.Kubelet) {
		return nil, errors.New("lab: the kubeadm mode configures the apiservers and kubelets itself (no endpoint reconciler choice, not with --kubelet)")
	}
	if o.Skewgate != "" && (o.Spec.Kubelet || o.Spec.Kubeadm) {
		return nil, errors.New("lab: skewgate runs either as lab processes or as the DaemonSet on the kubelets, not both (they would steer the same addresses)")
	}
	versions := append(slices.Clone(o.Versions), o.Spec.Upgrades...)
	for _, n := range o.Spec.Nodes {
		versions = append(versions, n.Version)
	}
	if o.Spec.Kubeadm {
		versions = append(versions, kubeadmVersions(o.Spec)...)
	}
	bins, err := EnsureBinaries(ctx, o.CacheDir, versions, o.Progress)
	if err != nil {
		return nil, err
	}
	p := &Plane{Dir: o.Dir, Spec: o.Spec, Bins: bins, out: o.Progress, cache: o.CacheDir}
	p.skewgateMode = SkewgateMode{Steering: true, SteeringMode: o.SkewgateSteeringMode, Extra: o.SkewgateArgs}
	if err := p.up(ctx, o.ReadyTimeout, o.Skewgate); err != nil {
		if derr := down(o.Dir, true); derr != nil {
			return nil, errors.Join(err, fmt.Errorf("tear down after failure: %w", derr))
		}
		return nil, fmt.Errorf("%w\n(torn down; logs kept in %s until `make lab-down`)", err, filepath.Join(o.Dir, "logs"))
	}
	return p, nil
}

func refuseIfUp(dir string) error {
	st, err := LoadState(dir)
	if err != nil {
		return err
	}
	if !st.Empty() {
		return fmt.Errorf("a lab is already up in %s (run `make lab-down` first)", dir)
	}
	return nil
}

func (p *Plane) up(ctx context.Context, readyTimeout time.Duration, skewgate string) error {
	start := time.Now()
	for _, sub := range []string{"pki", "logs"} {
		if err := os.MkdirAll(filepath.Join(p.Dir, sub), 0o755); err != nil {
			return err
		}
	}
	p.State = &State{Spec: p.Spec, path: statePath(p.Dir)}
	if p.Spec.Kubeadm {
		return p.upKubeadm(ctx, readyTimeout)
	}
	pki, err := GeneratePKI(filepath.Join(p.Dir, "pki"), p.Spec.Nodes)
	if err != nil {
		return err
	}
	p.PKI = pki
	if err := p.startEtcd(ctx, readyTimeout); err != nil {
		return err
	}
	for _, n := range p.Spec.Nodes {
		if err := p.addNode(ctx, n, readyTimeout); err != nil {
			return err
		}
	}
	var extra map[string]string
	if p.Spec.Kubelet {
		if err := p.startKubelets(ctx, readyTimeout); err != nil {
			return err
		}
		extra = p.KubeletEnv()
	}
	if skewgate != "" {
		for _, n := range p.Spec.Nodes {
			if _, err := p.StartSkewgate(ctx, n.Name, skewgate, p.skewgateMode, readyTimeout); err != nil {
				return err
			}
			fmt.Fprintf(p.out, "lab: %s skewgate steering %s (pins %s)\n", n.Name, n.Addr(), SkewgatePinPath(n))
		}
		extra = p.SkewgateEnv()
	}
	if err := p.writeClientFiles(extra); err != nil {
		return err
	}
	fmt.Fprintf(p.out, "lab: plane ready in %s; env in %s\n", time.Since(start).Round(100*time.Millisecond), EnvPath(p.Dir))
	return nil
}

func (p *Plane) startEtcd(ctx context.Context, timeout time.Duration) error {
	p.State.Bridge = true // recorded before it exists: tear-down tolerates absence
	if err := p.State.save(); err != nil {
		return err
	}
	if err := ensureBridge(); err != nil {
		return err
	}
	proc, err := startProcess("etcd", p.Bins.EtcdFor(p.Spec.EtcdRelease()), EtcdArgs(filepath.Join(p.Dir, "etcd")), "", "", p.logFile("etcd"))
	if err != nil {
		return err
	}
	if err := p.State.setProc(proc); err != nil {
		return err
	}
	return waitReady(ctx, proc, timeout, etcdHealthy)
}

// addNode creates node n's namespace and starts and waits for its apiserver.
func (p *Plane) addNode(ctx context.Context, n Node, timeout time.Duration) error {
	p.State.NetNS = append(p.State.NetNS, n.Name)
	if err := p.State.save(); err != nil {
		return err
	}
	if err := createNodeNetwork(n); err != nil {
		return err
	}
	return p.StartNode(ctx, n.Name, timeout)
}

// StartNode (re)starts node name's kube-apiserver and waits until it is
// ready. Its namespace must exist.
func (p *Plane) StartNode(ctx context.Context, name string, timeout time.Duration) error {
	n, ok := p.Node(name)
	if !ok {
		return fmt.Errorf("no node %s", name)
	}
	t0 := time.Now()
	bin := p.Bins.APIServers[n.Version]
	proc, err := startProcess(n.Name, bin, APIServerArgs(p.Spec, n, p.PKI), NetNSPath(n.Name), n.Name, p.logFile(n.Name))
	if err != nil {
		return err
	}
	if err := p.State.setProc(proc); err != nil {
		return err
	}
	if err := waitReady(ctx, proc, timeout, p.apiserverReady(n)); err != nil {
		return err
	}
	fmt.Fprintf(p.out, "lab: %s (%s, kube-apiserver %s) ready in %s\n", n.Name, n.IP, n.Version, time.Since(t0).Round(100*time.Millisecond))
	return nil
}

// StopNode stops node name's kube-apiserver (SIGTERM, a graceful shutdown)
// and leaves its namespace in place so StartNode can bring it back.
func (p *Plane) StopNode(name string) error {
	proc, ok := p.State.Proc(name)
	if !ok {
		return fmt.Errorf("no process for node %s", name)
	}
	return proc.Stop(stopGrace)
}

// Node returns the node called name.
func (p *Plane) Node(name string) (Node, bool) {
	for _, n := range p.Spec.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

func (p *Plane) logFile(name string) string { return filepath.Join(p.Dir, "logs", name+".log") }

// Down tears down the lab recorded in dir: every process by recorded PID,
// every namespace, the bridge, and the files it wrote. It is idempotent and
// works on what a crash or an interrupted Up left behind.
func Down(dir string) error { return down(dir, false) }

func down(dir string, keepLogs bool) error {
	st, err := LoadState(dir)
	if err != nil {
		return err
	}
	// The kubelets and their pods first, then everything at once but
	// etcd, which goes last so no apiserver logs a storm of etcd errors
	// while it shuts down.
	errs := stopKubeletMode(st)
	errs = append(errs, stopAll(st.Procs, func(p Proc) bool { return p.Name != "etcd" })...)
	errs = append(errs, stopAll(st.Procs, func(p Proc) bool { return p.Name == "etcd" })...)
	for _, name := range st.NetNS {
		if err := deleteNodeNetwork(name); err != nil {
			errs = append(errs, err)
		}
	}
	if st.Bridge {
		if err := deleteBridge(); err != nil {
			errs = append(errs, err)
		}
	}
	// Unlinking a pin detaches what it holds once nothing else does: the
	// skewgates are gone, so their programs and maps go with the pins.
	for _, dir := range st.Pins {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove pins %s: %w", dir, err))
		}
	}
	errs = append(errs, cleanKubeletHost(st.Kubelet)...)
	if err := errors.Join(errs...); err != nil {
		return err // keep the state so a second Down can finish the job
	}
	return removeFiles(dir, keepLogs)
}

// removeFiles deletes what Up wrote into dir (but the logs, if asked), and
// dir itself if it is then empty; anything else a user put there stays.
func removeFiles(dir string, keepLogs bool) error {
	names := []string{"pki", "etcd", "kubeconfig", "env", "state.json", skewgateStateDir, "nodes", "images", "overlay"}
	if !keepLogs {
		names = append(names, "logs")
	}
	for _, name := range names {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	_ = os.Remove(dir) // fails harmlessly when not empty
	return nil
}

// DefaultDir is $SKEWGATE_LAB_DIR, or .lab in the working directory.
func DefaultDir() string {
	if d := os.Getenv("SKEWGATE_LAB_DIR"); d != "" {
		return d
	}
	return ".lab"
}

// Open returns the plane that Up left running in dir.
func Open(ctx context.Context, dir, cacheDir string) (*Plane, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("lab dir: %w", err)
	}
	st, err := LoadState(dir)
	if err != nil {
		return nil, err
	}
	if st.Empty() {
		return nil, fmt.Errorf("no lab is up in %s (run `make lab-up`)", dir)
	}
	versions := slices.Clone(st.Spec.Upgrades)
	for _, n := range st.Spec.Nodes {
		versions = append(versions, n.Version)
	}
	bins, err := EnsureBinaries(ctx, cacheDir, versions, io.Discard)
	if err != nil {
		return nil, err
	}
	p := &Plane{
		Dir: dir, Spec: st.Spec, Bins: bins, State: st, out: io.Discard, cache: cacheDir,
		PKI: NewPKIPaths(filepath.Join(dir, "pki"), st.Spec.Nodes),
	}
	if st.Kubeadm != nil {
		p.kubeadmSecrets = *st.Kubeadm
	}
	return p, nil
}

// KillNode SIGKILLs node name's kube-apiserver, a crash: it deletes
// nothing on its way out, unlike StopNode's graceful shutdown.
func (p *Plane) KillNode(name string) error {
	proc, ok := p.State.Proc(name)
	if !ok {
		return fmt.Errorf("no process for node %s", name)
	}
	if err := syscall.Kill(proc.PID, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", name, err)
	}
	if !proc.waitGone(10 * time.Second) {
		return fmt.Errorf("%s (pid %d) still there after SIGKILL", name, proc.PID)
	}
	return nil
}

// UpgradeNode replaces node name's kube-apiserver with version, as a
// rolling upgrade (or rollback) does: a graceful stop, hold (an image
// pull, say), then the new binary, waited for until ready. The version must
// be one the plane was built with (Options.Versions).
func (p *Plane) UpgradeNode(ctx context.Context, name, version string, hold, timeout time.Duration) error {
	if _, ok := p.Bins.APIServers[version]; !ok {
		return fmt.Errorf("kube-apiserver %s not built for this plane", version)
	}
	i := slices.IndexFunc(p.Spec.Nodes, func(n Node) bool { return n.Name == name })
	if i < 0 {
		return fmt.Errorf("no node %s", name)
	}
	if err := p.StopNode(name); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(hold):
	}
	p.Spec.Nodes[i].Version = version
	p.State.Spec = p.Spec
	if err := p.State.save(); err != nil {
		return err
	}
	return p.StartNode(ctx, name, timeout)
}

// StartAux starts a helper process of the lab's (a Prometheus, say) in
// the root namespace, logging to logs/<name>.log; lab-down stops it.
func (p *Plane) StartAux(name, bin string, args []string) (Proc, error) {
	proc, err := startProcess(name, bin, args, "", "", p.logFile(name))
	if err != nil {
		return Proc{}, err
	}
	return proc, p.State.setProc(proc)
}

// FreezeNode stops node name's kube-apiserver with SIGSTOP: a hung server
// whose kernel still holds its connections open but answers nothing on
// them, like a black-holed peer. ThawNode resumes it.
func (p *Plane) FreezeNode(name string) error { return p.signalNode(name, syscall.SIGSTOP) }

// ThawNode resumes a frozen node's kube-apiserver (SIGCONT).
func (p *Plane) ThawNode(name string) error { return p.signalNode(name, syscall.SIGCONT) }

func (p *Plane) signalNode(name string, sig syscall.Signal) error {
	proc, ok := p.State.Proc(name)
	if !ok {
		return fmt.Errorf("no process for node %s", name)
	}
	if err := syscall.Kill(proc.PID, sig); err != nil {
		return fmt.Errorf("signal %s %s: %w", sig, name, err)
	}
	return nil
}

// AddNode adds a node running kube-apiserver version to the running plane,
// on the next free address, and waits until it is ready. The version must
// be one the plane was built with.
func (p *Plane) AddNode(ctx context.Context, name, version string, timeout time.Duration) (Node, error) {
	if _, ok := p.Bins.APIServers[version]; !ok {
		return Node{}, fmt.Errorf("add %s: no kube-apiserver %s built for this plane", name, version)
	}
	if _, ok := p.Node(name); ok || !validNodeName(name) {
		return Node{}, fmt.Errorf("add %s: name taken or invalid", name)
	}
	ip := Subnet.Addr().As4()
	ip[3] = byte(len(p.Spec.Nodes) + 1)
	n := Node{Name: name, IP: netip.AddrFrom4(ip), Version: version}
	ca, err := LoadCA(p.PKI.CAFile, p.PKI.CAKey)
	if err != nil {
		return Node{}, err
	}
	serving := pair(p.PKI.Dir, name+"-serving")
	if err := (issuance{ca, servingLeaf(n), serving}).write(); err != nil {
		return Node{}, err
	}
	p.PKI.Serving[name] = serving
	p.Spec.Nodes = append(p.Spec.Nodes, n)
	p.State.Spec = p.Spec
	if err := p.addNode(ctx, n, timeout); err != nil {
		return Node{}, err
	}
	return n, writeKubeconfig(KubeconfigPath(p.Dir, n.Name), n, p.PKI)
}

// stopAll stops the processes pick selects, concurrently.
func stopAll(procs []Proc, pick func(Proc) bool) []error {
	errc := make(chan error, len(procs))
	n := 0
	for _, p := range procs {
		if pick(p) {
			n++
			go func() { errc <- p.Stop(stopGrace) }()
		}
	}
	var errs []error
	for i := 0; i < n; i++ {
		if err := <-errc; err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
