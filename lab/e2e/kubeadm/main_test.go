// Package kubeadm is the CI-sized kubeadm check: a plane built by kubeadm
// itself (init on node-a, join --control-plane of node-b, both v1.35.4,
// stacked etcd, static pods of lab-built images, kubeadm's PKI), skewgate's
// DaemonSet from deploy/kubernetes on it, `kubeadm upgrade apply v1.36.3`
// on node-a with the DaemonSet running, a v1.36-only resource answered 200
// through old node-b's address, and a tear-down that leaves nothing.
package kubeadm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/deploy/image"
	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/labtest"
)

var (
	plane *lab.Plane
	// skewgateBin is the host's skewgate (steer).
	skewgateBin string
)

// imageTag is the skewgate image the DaemonSet runs.
const imageTag = "v0.0.1-kubeadm"

func TestMain(m *testing.M) {
	os.Exit(labtest.Exclusive(m, "kubeadm", run(m)))
}

func run(m *testing.M) func(dir string) int {
	return func(dir string) int {
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		before := hostDirsPresent()
		spec, err := lab.ParseNodes("node-a=" + lab.OldVersion + ",node-b=" + lab.OldVersion)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubeadm:", err)
			return 1
		}
		spec.Kubeadm = true
		code := func() int {
			p, err := lab.Up(ctx, lab.Options{Dir: dir, CacheDir: lab.DefaultCacheDir(), Spec: spec, Progress: os.Stderr, ReadyTimeout: 3 * time.Minute})
			if err != nil {
				fmt.Fprintln(os.Stderr, "kubeadm: lab up:", err)
				return 1
			}
			plane = p
			fmt.Fprintf(os.Stderr, "kubeadm: plane up in %s\n", time.Since(t0).Round(100*time.Millisecond))
			if err := setup(ctx, dir); err != nil {
				fmt.Fprintln(os.Stderr, "kubeadm:", err)
				return 1
			}
			return m.Run()
		}()
		if code != 0 {
			keepLogs(dir)
		}
		st, _ := lab.LoadState(dir)
		t1 := time.Now()
		if err := lab.Down(dir); err != nil {
			fmt.Fprintln(os.Stderr, "kubeadm: lab down:", err)
			return 1
		}
		if err := checkTornDown(st, before); err != nil {
			fmt.Fprintln(os.Stderr, "kubeadm: tear-down left", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "kubeadm: torn down cleanly in %s; package %s\n", time.Since(t1).Round(100*time.Millisecond), time.Since(t0).Round(time.Second))
		os.RemoveAll(dir)
		return code
	}
}

// setup builds the host's skewgate and skewgate's image, and imports the
// image into every node's containerd.
func setup(ctx context.Context, dir string) error {
	var err error
	if skewgateBin, err = labtest.BuildSkewgate(ctx, dir); err != nil {
		return err
	}
	if err := runbookTools(ctx, dir); err != nil {
		return err
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		return err
	}
	out := filepath.Join(dir, "skewgate-image.tar")
	b := image.GoBinary{Dir: root, Package: "./cmd/skewgate", Out: filepath.Join(dir, "skewgate-image"), LDFlags: "-s -w -X main.version=" + imageTag}
	s := image.Spec{Entrypoint: "/skewgate", Version: imageTag, Revision: "e2e", Created: time.Unix(0, 0).UTC()}
	if _, err := image.Archive(ctx, b, s, "skewgate:"+imageTag, out); err != nil {
		return err
	}
	return plane.ImportImage(ctx, out)
}

// hostDirs are the host paths the kubeadm mode may create; tear-down
// must leave each as it found it.
var hostDirs = []string{
	"/etc/kubernetes", "/var/lib/kubelet", "/var/lib/etcd", "/var/lib/skewgate", "/var/lib/cni",
	"/usr/libexec/kubernetes", "/etc/ca-certificates", "/usr/local/share/ca-certificates",
	"/usr/share/ca-certificates",
}

func hostDirsPresent() map[string]bool {
	m := map[string]bool{}
	for _, d := range hostDirs {
		_, err := os.Stat(d)
		m[d] = err == nil
	}
	return m
}

// checkTornDown: every recorded process gone, the nodes' namespaces,
// cgroups and bpffs roots gone, and the host's directories as before.
func checkTornDown(st *lab.State, before map[string]bool) error {
	var errs []error
	for _, p := range st.Procs {
		if !p.Gone() {
			errs = append(errs, fmt.Errorf("process %s (pid %d)", p.Name, p.PID))
		}
	}
	for _, n := range st.Spec.Nodes {
		paths := []string{lab.NetNSPath(n.Name), filepath.Dir(lab.KubeletPinPath(n))}
		cg, _ := filepath.Glob("/sys/fs/cgroup/*/skewlab-" + n.Name)
		cg2, _ := filepath.Glob("/sys/fs/cgroup/skewlab-" + n.Name)
		for _, p := range append(append(paths, cg...), cg2...) {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("%s", p))
			}
		}
	}
	for d, was := range hostDirsPresent() {
		if was != before[d] {
			errs = append(errs, fmt.Errorf("%s: present %t before, %t after", d, before[d], was))
		}
	}
	if _, err := os.Stat("/sys/class/net/" + lab.BridgeName); !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("bridge %s", lab.BridgeName))
	}
	if len(errs) > 0 {
		var s []string
		for _, e := range errs {
			s = append(s, e.Error())
		}
		return errors.New(strings.Join(s, "; "))
	}
	return nil
}

// keepLogs copies the lab's logs (kubeadm's, the kubelets', containerd's)
// out of dir before tear-down removes them, for a failed run.
func keepLogs(dir string) {
	dst, err := os.MkdirTemp("", "skewgate-kubeadm-logs-")
	if err == nil {
		err = os.CopyFS(dst, os.DirFS(filepath.Join(dir, "logs")))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeadm: keep logs:", err)
		return
	}
	fmt.Fprintln(os.Stderr, "kubeadm: failed; the lab's logs are in", dst)
}
