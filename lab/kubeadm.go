package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/mod/semver"

	"github.com/skewgate/skewgate/deploy/image"
)

// The kubeadm mode: every node runs containerd and a kubelet in its own
// namespaces (as the kubelet mode does), and kubeadm itself builds the
// control plane: `kubeadm init` on the first node, `kubeadm join
// --control-plane` on the others, stacked etcd, every control-plane
// component a static pod of an image the lab built and imported, the PKI
// kubeadm's own. The lab plays two parts a real node's packages play:
// systemd, which starts the kubelet with kubeadm's flags, and keepalived,
// which holds the controlPlaneEndpoint address (KubeadmVIP) on the first
// node.

// kubeadmHostDirs are host paths the kubeadm mode binds per node
// (/etc/kubernetes, /var/lib/kubelet, /var/lib/etcd, /var/lib/cni,
// skewgate's state) and
// those its static pods' DirectoryOrCreate hostPaths would create on the
// host: created and recorded before, removed at tear-down.
var kubeadmHostDirs = []string{
	"/etc/kubernetes", "/var/lib/kubelet", "/var/lib/etcd", "/var/lib/skewgate", "/var/lib/cni",
	"/usr/libexec/kubernetes/kubelet-plugins/volume/exec",
	"/etc/ca-certificates", "/usr/local/share/ca-certificates", "/usr/share/ca-certificates",
}

// kubeadmBinds are node f's private directories in its mount namespace.
func (f nodeFiles) kubeadmBinds() []bindMount {
	return []bindMount{
		{f.path("etc-kubernetes"), "/etc/kubernetes"},
		{f.path("kubelet"), "/var/lib/kubelet"},
		{f.path("etcd"), "/var/lib/etcd"},
		{f.path("skewgate"), "/var/lib/skewgate"},
		// containerd's CNI library caches each sandbox's result here.
		{f.path("cni-cache"), "/var/lib/cni"},
		{f.path("log"), "/var/log"},
		{kubeletBPFRoot(f.node), "/sys/fs/bpf"},
		{f.path("etc/hosts"), "/etc/hosts"},
		{f.path("etc/resolv.conf"), "/etc/resolv.conf"},
	}
}

// writeNodeEtc writes node f's /etc/hosts (its own name, as a real node
// resolves it: kubeadm's Hostname check looks it up) and a resolv.conf
// naming no server, so a lookup in the node goes to the node's loopback,
// never to the host's resolver outside the lab's network.
func (f nodeFiles) writeNodeEtc() error {
	if err := os.MkdirAll(f.path("etc"), 0o755); err != nil {
		return err
	}
	hosts := fmt.Sprintf("127.0.0.1 localhost\n%s %s\n%s kubeadm-vip\n", f.node.IP, f.node.Name, KubeadmVIP)
	if err := writeFile(f.path("etc/hosts"), hosts); err != nil {
		return err
	}
	return writeFile(f.path("etc/resolv.conf"), "# skewlab: no resolver outside the lab\n")
}

// installKubelet links node f's kubelet where kubeadm finds it (`kubelet
// --version` in its preflight and version skew checks), as the kubelet
// package would install it.
func (f nodeFiles) installKubelet(bin string) error {
	link := f.path("bin/kubelet")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return err
	}
	os.Remove(link)
	return os.Symlink(bin, link)
}

// KubeadmDir is node n's /etc/kubernetes as the host sees it.
func (p *Plane) KubeadmDir(n Node) string {
	return filepath.Join(p.Dir, "nodes", n.Name, "etc-kubernetes")
}

// kubeadmVersions are the versions the kubeadm mode prepares, so
// `kubeadm upgrade` finds its images: the nodes' and the spec's upgrades,
// or without those the lab's old and new.
func kubeadmVersions(spec Spec) []string {
	vs := spec.Upgrades
	if len(vs) == 0 {
		vs = []string{OldVersion, NewVersion}
	}
	vs = slices.Clone(vs)
	for _, n := range spec.Nodes {
		vs = append(vs, n.Version)
	}
	return sortedVersions(vs)
}

func (p *Plane) upKubeadm(ctx context.Context, timeout time.Duration) error {
	start := time.Now()
	if err := requireRuntime(); err != nil {
		return err
	}
	for _, plugin := range []string{"bridge", "host-local"} {
		if _, err := exec.LookPath(filepath.Join(cniBinDir, plugin)); err != nil {
			return fmt.Errorf("the kubeadm mode needs the CNI %s plugin in %s: apt-get install containernetworking-plugins", plugin, cniBinDir)
		}
	}
	// kubeadm builds a cluster of one version: every node starts at the
	// oldest (and its kubelet stays there), and nodes asked for newer ones
	// are upgraded as an operator would (upgrade apply on the first,
	// upgrade node on the others).
	want := slices.Clone(p.Spec.Nodes)
	versions := kubeadmVersions(p.Spec)
	for i := range p.Spec.Nodes {
		p.Spec.Nodes[i].Version = want[0].Version
	}
	kb, err := EnsureKubeadmBinaries(ctx, p.cache, versions, p.out)
	if err != nil {
		return err
	}
	p.kubeadm = &kb
	if p.kubeadmSecrets, err = newKubeadmSecrets(); err != nil {
		return err
	}
	p.State.Kubeadm = &p.kubeadmSecrets
	archives, pause, err := p.kubeadmImages(ctx, kb, versions)
	if err != nil {
		return err
	}
	if err := p.kubeadmNetwork(); err != nil {
		return err
	}
	if err := p.prepareHost(kubeadmHostDirs...); err != nil {
		return err
	}
	t0 := time.Now()
	for _, n := range p.Spec.Nodes {
		if err := p.startKubeadmRuntime(ctx, n, pause, archives, timeout); err != nil {
			return err
		}
	}
	fmt.Fprintf(p.out, "lab: containerd on %d nodes, %d images imported into each, in %s\n", len(p.Spec.Nodes), len(archives), time.Since(t0).Round(100*time.Millisecond))
	if err := p.kubeadmInit(ctx, p.Spec.Nodes[0]); err != nil {
		return err
	}
	for _, n := range p.Spec.Nodes[1:] {
		if err := p.kubeadmJoin(ctx, n); err != nil {
			return err
		}
	}
	if err := p.adoptKubeadmPKI(); err != nil {
		return err
	}
	applied := map[string]bool{}
	for _, n := range want {
		if n.Version == want[0].Version {
			continue
		}
		if err := p.KubeadmUpgrade(ctx, n.Name, n.Version, !applied[n.Version]); err != nil {
			return err
		}
		applied[n.Version] = true
	}
	if err := p.waitNodesReady(ctx, timeout); err != nil {
		return err
	}
	extra := p.KubeletEnv()
	extra["LAB_CONTROL_PLANE_ENDPOINT"] = KubeadmEndpoint()
	for _, n := range p.Spec.Nodes {
		extra["LAB_"+n.EnvName()+"_KUBEADM_DIR"] = p.KubeadmDir(n)
	}
	if err := p.writeClientFiles(extra); err != nil {
		return err
	}
	fmt.Fprintf(p.out, "lab: kubeadm plane of %d nodes ready in %s; env in %s\n", len(p.Spec.Nodes), time.Since(start).Round(100*time.Millisecond), EnvPath(p.Dir))
	return nil
}

// kubeadmNetwork creates the bridge and every node's namespace, and puts
// the VIP on the first node, as keepalived would.
func (p *Plane) kubeadmNetwork() error {
	p.State.Bridge = true
	if err := p.State.save(); err != nil {
		return err
	}
	if err := ensureBridge(); err != nil {
		return err
	}
	for _, n := range p.Spec.Nodes {
		p.State.NetNS = append(p.State.NetNS, n.Name)
		if err := p.State.save(); err != nil {
			return err
		}
		if err := createNodeNetwork(n); err != nil {
			return err
		}
	}
	return addVIP(p.Spec.Nodes[0])
}

// addVIP adds KubeadmVIP/32 to node n's eth0; it goes with the namespace.
func addVIP(n Node) error {
	ns, err := netns.GetFromName(n.Name)
	if err != nil {
		return fmt.Errorf("netns %s: %w", n.Name, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(KubeadmVIP.AsSlice()), Mask: net.CIDRMask(32, 32)}}
	if err := h.AddrAdd(eth0, addr); err != nil {
		return fmt.Errorf("VIP %s on %s: %w", KubeadmVIP, n.Name, err)
	}
	return nil
}

// kubeadmImages builds every image the kubeadm of each version lists for
// the lab's configuration, but the skipped addons', and returns their
// archives and the pause image's name (containerd's sandbox image).
func (p *Plane) kubeadmImages(ctx context.Context, kb KubeadmBinaries, versions []string) ([]string, string, error) {
	t0 := time.Now()
	dir, err := filepath.Abs(filepath.Join(p.Dir, "images"))
	if err != nil {
		return nil, "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	var archives []string
	var pause string
	seen := map[string]bool{}
	for _, v := range versions {
		cfg := filepath.Join(dir, "kubeadm-"+v+".yaml")
		vars := p.kubeadmVars(nodeFiles{node: p.Spec.Nodes[0], dir: dir}, p.kubeadmSecrets)
		vars.Version = v
		if err := renderFile(cfg, kubeadmInitConfig, vars); err != nil {
			return nil, "", err
		}
		refs, err := listKubeadmImages(ctx, kb.Kubeadm[v], cfg)
		if err != nil {
			return nil, "", err
		}
		for _, ref := range refs {
			if seen[ref] {
				continue
			}
			seen[ref] = true
			repoTag := ref[strings.LastIndex(ref, "/")+1:]
			if strings.HasPrefix(repoTag, "pause:") {
				out := filepath.Join(dir, repoTag+".tar")
				if err := buildPause(ctx, ref, out); err != nil {
					return nil, "", err
				}
				archives, pause = append(archives, out), ref
				continue
			}
			if strings.HasPrefix(repoTag, "etcd:") {
				// Built with the apiservers already, unless this kubeadm
				// lists another etcd than its constants name.
				if _, err := p.Bins.ensureEtcd(ctx, p.cache, etcdVersionOfTag(versionOf(repoTag)), p.out); err != nil {
					return nil, "", err
				}
			}
			cmd, bin, ok := kubeadmImageSources(p.Bins, kb, repoTag)
			if !ok || bin == "" {
				fmt.Fprintf(p.out, "lab: not building %s (its addon phase is skipped)\n", ref)
				continue
			}
			a, err := buildKubeadmImage(p.cache, ref, cmd, bin)
			if err != nil {
				return nil, "", err
			}
			archives = append(archives, a)
		}
	}
	if pause == "" {
		return nil, "", errors.New("kubeadm lists no pause image")
	}
	fmt.Fprintf(p.out, "lab: %d kubeadm images ready in %s\n", len(archives), time.Since(t0).Round(100*time.Millisecond))
	return archives, pause, nil
}

// buildPause writes the lab's pause image, named ref, to out.
func buildPause(ctx context.Context, ref, out string) error {
	b := image.GoBinary{Package: "github.com/skewgate/skewgate/deploy/image/pause", LDFlags: "-s -w", Out: strings.TrimSuffix(out, ".tar")}
	s := image.Spec{Entrypoint: "/pause", Version: "v1", Created: time.Unix(0, 0).UTC()}
	if _, err := image.Archive(ctx, b, s, ref, out); err != nil {
		return fmt.Errorf("pause image: %w", err)
	}
	return nil
}

// startKubeadmRuntime starts node n's containerd in a mount namespace of
// its own (the node's /etc/kubernetes, /var/lib/kubelet, /var/lib/etcd)
// and imports every image.
func (p *Plane) startKubeadmRuntime(ctx context.Context, n Node, pause string, archives []string, timeout time.Duration) error {
	f, err := p.nodeFiles(n)
	if err != nil {
		return err
	}
	if err := f.writeContainerdConfig(pause); err != nil {
		return err
	}
	if err := f.writeNodeEtc(); err != nil {
		return err
	}
	if err := f.installKubelet(p.kubeadm.Kubelets[n.Version]); err != nil {
		return err
	}
	for _, b := range f.kubeadmBinds() {
		if _, err := os.Stat(b.src); err == nil {
			continue // a file (hosts, resolv.conf) or a directory made before
		}
		if err := os.MkdirAll(b.src, 0o755); err != nil {
			return err
		}
	}
	ctrd, err := p.startLabProcess("containerd-"+n.Name, "containerd", []string{"--config", f.path("containerd.toml")},
		func(cmd *exec.Cmd) error { return startInNewMountNS(n, f.kubeadmBinds(), cmd) })
	if err != nil {
		return err
	}
	if err := waitReady(ctx, ctrd, timeout, containerdReady(f.path("containerd.sock"))); err != nil {
		return err
	}
	for _, a := range archives {
		if err := importImage(ctx, f.path("containerd.sock"), a); err != nil {
			return err
		}
	}
	return nil
}

// kubeadmInit runs `kubeadm init --upload-certs` on node n.
func (p *Plane) kubeadmInit(ctx context.Context, n Node) error {
	f, err := p.nodeFiles(n)
	if err != nil {
		return err
	}
	cfg := f.path("kubeadm-init.yaml")
	if err := renderFile(cfg, kubeadmInitConfig, p.kubeadmVars(f, p.kubeadmSecrets)); err != nil {
		return err
	}
	return p.runKubeadm(ctx, n, n.Version, "init", "--config", cfg, "--upload-certs")
}

// kubeadmJoin runs `kubeadm join --control-plane` on node n, discovering
// the cluster through the VIP with the bootstrap token and the CA's hash.
func (p *Plane) kubeadmJoin(ctx context.Context, n Node) error {
	f, err := p.nodeFiles(n)
	if err != nil {
		return err
	}
	hash, err := caCertHash(filepath.Join(p.KubeadmDir(p.Spec.Nodes[0]), "pki", "ca.crt"))
	if err != nil {
		return err
	}
	vars := p.kubeadmVars(f, p.kubeadmSecrets)
	vars.CAHash = hash
	cfg := f.path("kubeadm-join.yaml")
	if err := renderFile(cfg, kubeadmJoinConfig, vars); err != nil {
		return err
	}
	return p.runKubeadm(ctx, n, n.Version, "join", "--config", cfg)
}

// runKubeadm runs kubeadm of version with args in node n's namespaces
// (network, UTS, and its containerd's mount namespace), logging to
// logs/kubeadm-<node>.log. It plays systemd's part: when kubeadm says it
// starts the kubelet, the lab starts it with the flags kubeadm wrote.
func (p *Plane) runKubeadm(ctx context.Context, n Node, version string, args ...string) error {
	t0 := time.Now()
	ctrd, ok := p.State.Proc("containerd-" + n.Name)
	if !ok {
		return fmt.Errorf("kubeadm on %s: no containerd", n.Name)
	}
	logPath := p.logFile("kubeadm-" + n.Name)
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "+ kubeadm %s\n", strings.Join(args, " "))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	f, err := p.nodeFiles(n)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, p.kubeadm.Kubeadm[version], append(args, "--v=1")...)
	cmd.Env = append(os.Environ(), "PATH="+f.path("bin")+":"+os.Getenv("PATH"))
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.watchKubeadm(ctx, n, r, log, cancel)
	}()
	if err := startInMountNSOf(n, ctrd.PID, cmd); err != nil {
		w.Close()
		wg.Wait()
		return fmt.Errorf("start kubeadm on %s: %w", n.Name, err)
	}
	err = cmd.Wait()
	w.Close()
	wg.Wait()
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	if err != nil {
		return fmt.Errorf("kubeadm %s on %s: %w\n--- %s (tail) ---\n%s", subcommand(args), n.Name, err, logPath, logTail(logPath, 40))
	}
	fmt.Fprintf(p.out, "lab: kubeadm %s on %s (%s) in %s\n", subcommand(args), n.Name, version, time.Since(t0).Round(100*time.Millisecond))
	return nil
}

// subcommand is "init" or "upgrade apply" of kubeadm's args.
func subcommand(args []string) string {
	i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "-") })
	if i < 0 {
		i = len(args)
	}
	return strings.Join(args[:i], " ")
}

// watchKubeadm copies kubeadm's output to log and starts the kubelet when
// kubeadm asks for it (once per run); a kubelet that cannot start ends
// kubeadm's run.
func (p *Plane) watchKubeadm(ctx context.Context, n Node, r io.Reader, log io.Writer, cancel context.CancelCauseFunc) {
	started := false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(log, line)
		if started || !strings.Contains(line, "Starting the kubelet") {
			continue
		}
		started = true
		if err := p.StartKubeadmKubelet(ctx, n); err != nil {
			cancel(err)
		}
	}
	io.Copy(io.Discard, r)
}

// kubeadmKubeletArgs are the kubelet's arguments as kubeadm's systemd
// drop-in (10-kubeadm.conf) assembles them: the kubeconfigs, the config
// file, and $KUBELET_KUBEADM_ARGS from kubeadm-flags.env.
func kubeadmKubeletArgs(flagsEnv string) ([]string, error) {
	args := []string{
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
		"--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config=/var/lib/kubelet/config.yaml",
	}
	for _, line := range strings.Split(flagsEnv, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "KUBELET_KUBEADM_ARGS=")
		if !ok {
			continue
		}
		return append(args, strings.Fields(strings.Trim(v, `"`))...), nil
	}
	return nil, errors.New("kubeadm-flags.env has no KUBELET_KUBEADM_ARGS")
}

// StartKubeadmKubelet (re)starts node n's kubelet (of the node's version)
// with the flags kubeadm wrote, as `systemctl restart kubelet` would: the
// old one stopped for good, the new one restarted whenever it exits.
func (p *Plane) StartKubeadmKubelet(ctx context.Context, n Node) error {
	if old, ok := p.State.Proc("kubelet-" + n.Name); ok {
		if err := old.Stop(stopGrace); err != nil {
			return err
		}
	}
	f, err := p.nodeFiles(n)
	if err != nil {
		return err
	}
	env, err := os.ReadFile(f.path("kubelet/kubeadm-flags.env"))
	if err != nil {
		return fmt.Errorf("kubelet on %s: %w", n.Name, err)
	}
	args, err := kubeadmKubeletArgs(string(env))
	if err != nil {
		return err
	}
	ctrd, ok := p.State.Proc("containerd-" + n.Name)
	if !ok {
		return fmt.Errorf("kubelet on %s: no containerd", n.Name)
	}
	if p.State.Kubelets == nil {
		p.State.Kubelets = map[string]string{}
	}
	v, ok := p.State.Kubelets[n.Name]
	if !ok {
		v = n.Version // kubeadm init or join: the node's first kubelet
		p.State.Kubelets[n.Name] = v
	}
	bin, ok := p.kubeadm.Kubelets[v]
	if !ok {
		return fmt.Errorf("kubelet on %s: no kubelet %s built", n.Name, v)
	}
	_, err = p.startKubelet(n, bin, append(args, "--v=1"), ctrd)
	return err
}

// KubeadmUpgrade runs `kubeadm upgrade apply` (apply) or `kubeadm upgrade
// node` to version on node name with that version's kubeadm (the package
// upgrade of kubeadm comes first, as in kubeadm's documentation). Before it, what the lab's
// servers of version serve is switched on in the kubeadm-config
// ClusterConfiguration (an operator's `kubectl edit` of it): newAPIs, on
// 1.36 scheduling.k8s.io/v1alpha2 (GenericWorkload), which a 1.35 server
// refuses as an unknown group and gate. The kubelet keeps its version.
func (p *Plane) KubeadmUpgrade(ctx context.Context, name, version string, apply bool) error {
	n, err := p.kubeadmNode(ctx, name)
	if err != nil {
		return err
	}
	if _, ok := p.kubeadm.Kubeadm[version]; !ok {
		return fmt.Errorf("no kubeadm %s built for this plane", version)
	}
	if semver.Compare(version, n.Version) <= 0 {
		return fmt.Errorf("upgrade %s: %s is not newer than %s", name, version, n.Version)
	}
	if apply {
		if err := p.enableNewAPIs(ctx, version); err != nil {
			return err
		}
	}
	f, err := p.nodeFiles(n)
	if err != nil {
		return err
	}
	vars := p.kubeadmVars(f, p.kubeadmSecrets)
	vars.Version, vars.Ignore = version, kubeadmUpgradeIgnorePreflight
	cfg := f.path("kubeadm-upgrade.yaml")
	if err := renderFile(cfg, kubeadmUpgradeConfig, vars); err != nil {
		return err
	}
	args := []string{"upgrade", "node", "--config", cfg}
	if apply {
		args = []string{"upgrade", "apply", "--config", cfg, "--yes"}
	}
	if err := p.runKubeadm(ctx, n, version, args...); err != nil {
		return err
	}
	return p.setVersion(name, version)
}

// setVersion records that node name's control plane runs version.
func (p *Plane) setVersion(name, version string) error {
	for i := range p.Spec.Nodes {
		if p.Spec.Nodes[i].Name == name {
			p.Spec.Nodes[i].Version = version
		}
	}
	p.State.Spec = p.Spec
	return p.State.save()
}

// kubeadmNode is node name of a kubeadm plane, its binaries found.
func (p *Plane) kubeadmNode(ctx context.Context, name string) (Node, error) {
	n, ok := p.Node(name)
	if !ok {
		return Node{}, fmt.Errorf("no node %s", name)
	}
	return n, p.ensureKubeadm(ctx)
}

// ensureKubeadm finds the kubeadm mode's binaries of a plane Open
// returned.
func (p *Plane) ensureKubeadm(ctx context.Context) error {
	if p.kubeadm != nil {
		return nil
	}
	cache := p.cache
	if cache == "" {
		cache = DefaultCacheDir()
	}
	kb, err := EnsureKubeadmBinaries(ctx, cache, kubeadmVersions(p.Spec), p.out)
	if err != nil {
		return err
	}
	p.kubeadm = &kb
	return nil
}
