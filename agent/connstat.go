package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/skewgate/skewgate/bpf/connstat"
)

// ConnStatConfig configures StartConnStat. Zero values take the defaults.
type ConnStatConfig struct {
	// PinPath is the pin directory shared with steering, so connstat finds
	// the flows steer recorded (steered_flows).
	PinPath string
	// NetNSPath is the network namespace whose sockets are counted;
	// DefaultNetNS if empty.
	NetNSPath string
	// CgroupPath is the cgroup v2 directory to attach to, resolved by
	// CgroupRoot: the cgroup v2 root from /proc/self/mountinfo if empty
	// (/sys/fs/cgroup or, on hybrid hosts, /sys/fs/cgroup/unified). The
	// root sees every socket on the host.
	CgroupPath string
	// UpstreamPort is the apiservers' port, 6443 if zero: outgoing
	// connections to it are proxy→local or proxy→peer hops.
	UpstreamPort uint16
	// ProxyPort is the proxy listener's port: connections accepted on it
	// directly (not steered) count as client→proxy too. Zero: none.
	ProxyPort uint16
	// Local lists the addresses of the local apiserver; 127.0.0.0/8 and ::1
	// if empty. Every other address at UpstreamPort is a peer.
	Local []netip.Prefix
	// ProxyTGID is the process whose outgoing connections are proxy hops
	// (others that dial UpstreamPort — a kubelet, a controller-manager —
	// are not), as the initial PID namespace numbers it; zero counts every
	// process. OwnTGID gives the caller's, when it can.
	ProxyTGID uint32
	// Clients lists addresses whose outgoing connections are not a hop:
	// the steered targets, which the proxy's own probe or a node-local
	// client dials and which connstat counts on the accepting side.
	Clients []netip.Prefix
	// Log receives what is worth an operator's attention once, such as
	// pins of another layout replaced (nil: discarded).
	Log *slog.Logger
}

func (c *ConnStatConfig) setDefaults() error {
	if c.PinPath == "" {
		return errors.New("connstat config: empty PinPath")
	}
	if c.NetNSPath == "" {
		c.NetNSPath = DefaultNetNS
	}
	if c.UpstreamPort == 0 {
		c.UpstreamPort = 6443
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if len(c.Local) == 0 {
		c.Local = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	}
	return nil
}

// ConnStat is the attached connstat program. It is a prometheus.Collector
// for the per-hop TCP metrics.
type ConnStat struct {
	cfg   ConnStatConfig
	objs  connstat.ConnstatObjects
	link  link.Link
	stats io.Closer

	mu     sync.Mutex
	status Status
	errs   counter
}

// StartConnStat loads, pins and attaches connstat to the cgroup v2 root,
// counting sockets of cfg.NetNSPath only.
//
// Like StartSteering it returns an error only for an invalid cfg; when
// this machine cannot run it, the ConnStat's Status is disabled with the
// reason and the collector exports no TCP metrics. A pinned link is updated
// in place with the new program.
func StartConnStat(cfg ConnStatConfig) (*ConnStat, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	c := &ConnStat{cfg: cfg, status: Status{State: StateRunning}}
	if err := c.install(); err != nil {
		c.release()
		c.status = Status{State: StateDisabled, Err: fmt.Errorf("connstat: %w", err)}
	}
	return c, nil
}

func (c *ConnStat) install() error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return classify(fmt.Errorf("remove memlock rlimit: %w", err))
	}
	if err := ensurePinDir(c.cfg.PinPath); err != nil {
		return classify(err)
	}
	if err := checkLayout(c.cfg.PinPath, c.cfg.Log); err != nil {
		return classify(err)
	}
	p, err := CgroupRoot(c.cfg.CgroupPath)
	if err != nil {
		return classify(err)
	}
	c.cfg.CgroupPath = p
	spec, err := connstat.LoadConnstat()
	if err != nil {
		return err
	}
	if err := loadPinned(spec, c.cfg.PinPath, &c.objs); err != nil {
		return err
	}
	if err := c.writeConfig(); err != nil {
		return err
	}
	if c.stats, err = ebpf.EnableStats(unix.BPF_STATS_RUN_TIME); err != nil {
		c.stats = nil // run time metrics stay 0
	}
	c.link, err = c.attach()
	return err
}

func (c *ConnStat) writeConfig() error {
	cookie, err := netnsCookie(c.cfg.NetNSPath)
	if err != nil {
		return classify(err)
	}
	cfg := connstat.ConnstatConfig{NetnsCookie: cookie, UpstreamPort: c.cfg.UpstreamPort, ProxyPort: c.cfg.ProxyPort, ProxyTgid: c.cfg.ProxyTGID}
	if err := c.objs.ConnstatConfig.Put(uint32(0), cfg); err != nil {
		return fmt.Errorf("write connstat_config: %w", err)
	}
	up := map[connstat.ConnstatPrefixKey]connstat.ConnstatHop{
		cPrefixKey(netip.MustParsePrefix("0.0.0.0/0")): connstat.ConnstatHopHOP_PROXY_PEER,
		cPrefixKey(netip.MustParsePrefix("::/0")):      connstat.ConnstatHopHOP_PROXY_PEER,
	}
	for _, p := range c.cfg.Local {
		up[cPrefixKey(p)] = connstat.ConnstatHopHOP_PROXY_LOCAL
	}
	for _, p := range c.cfg.Clients {
		up[cPrefixKey(p)] = connstat.ConnstatHopHOP_NONE
	}
	return syncUpstreams(c.objs.ConnstatUpstreams, up)
}

func syncUpstreams(m *ebpf.Map, want map[connstat.ConnstatPrefixKey]connstat.ConnstatHop) error {
	keys := make(map[connstat.ConnstatPrefixKey]bool, len(want))
	for k := range want {
		keys[k] = true
	}
	if err := syncKeys(m, keys, connstat.ConnstatUpstream{}); err != nil {
		return fmt.Errorf("write connstat_upstreams: %w", err)
	}
	for k, hop := range want {
		if err := m.Put(k, connstat.ConnstatUpstream{Hop: hop}); err != nil {
			return fmt.Errorf("write connstat_upstreams: %w", err)
		}
	}
	return nil
}

func cPrefixKey(p netip.Prefix) connstat.ConnstatPrefixKey {
	k := prefixKey(p)
	return connstat.ConnstatPrefixKey{Prefixlen: k.Prefixlen, Addr: k.Addr}
}

func (c *ConnStat) attach() (link.Link, error) {
	var st unix.Stat_t
	if err := unix.Stat(c.cfg.CgroupPath, &st); err != nil {
		return nil, fmt.Errorf("stat cgroup %s: %w", c.cfg.CgroupPath, err)
	}
	want := func(info *link.Info) bool {
		cg := info.Cgroup()
		return cg != nil && cg.CgroupId == st.Ino
	}
	return updateOrAttach(filepath.Join(c.cfg.PinPath, pinConnLink), c.objs.Connstat, want, func() (link.Link, error) {
		return link.AttachCgroup(link.CgroupOptions{
			Path:    c.cfg.CgroupPath,
			Attach:  ebpf.AttachCGroupSockOps,
			Program: c.objs.Connstat,
		})
	})
}

// CgroupRoot resolves the cgroup connstat attaches to: dir itself when it
// is a cgroup v2 mount, dir/unified when dir is a cgroup v1 hybrid host's
// /sys/fs/cgroup (a pod mounts the host's /sys/fs/cgroup, whichever layout
// the host has), and this mount namespace's cgroup2 mount when dir is
// empty. Anything else is an error naming dir.
func CgroupRoot(dir string) (string, error) {
	if dir == "" {
		return cgroup2Root()
	}
	for _, p := range []string{dir, filepath.Join(dir, "unified")} {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return p, nil
		}
	}
	return "", fmt.Errorf("cgroup root %s: neither it nor %s/unified is a cgroup v2 mount", dir, dir)
}

// cgroup2Root finds the cgroup v2 mount of this mount namespace.
func cgroup2Root() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "36 25 0:30 / /sys/fs/cgroup/unified rw,... - cgroup2 cgroup2 rw"
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && fields[3] == "/" {
				return fields[4], nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%w: no cgroup2 mount", ErrNotSupported)
}

// Status reports whether connstat runs, and why not.
func (c *ConnStat) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Close releases this process's handles. The program stays attached
// through its pinned link; RemovePins detaches it.
func (c *ConnStat) Close() error { return c.release() }

func (c *ConnStat) release() error {
	var errs []error
	if c.link != nil {
		errs = append(errs, c.link.Close())
	}
	if c.stats != nil {
		errs = append(errs, c.stats.Close())
	}
	errs = append(errs, c.objs.Close())
	return errors.Join(errs...)
}

// initialPIDNamespace is /proc/self/ns/pid's inode in the initial PID
// namespace (PROC_PID_INIT_INO): bpf_get_current_pid_tgid numbers
// processes as that namespace does.
const initialPIDNamespace = 0xEFFFFFFC

// OwnTGID is this process's ID as BPF programs see it, or 0 when this
// process runs in another PID namespace (a pod without hostPID), whose IDs
// BPF does not see: connstat then counts every process's connections.
func OwnTGID() uint32 {
	ino, err := netnsInode("/proc/self/ns/pid")
	if err != nil || ino != initialPIDNamespace {
		return 0
	}
	return uint32(os.Getpid())
}
