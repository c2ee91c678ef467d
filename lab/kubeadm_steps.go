package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The operator's steps around kubeadm's: the kubelet upgraded after its
// node's control plane, and the rollback after a failed upgrade, as the
// kubeadm documentation describes them ("Upgrading kubeadm clusters",
// "Recovering from a failure state").

// KubeletVersion is the version of node name's kubelet in the kubeadm
// mode ("" before it started).
func (p *Plane) KubeletVersion(name string) string { return p.State.Kubelets[name] }

// SetKubelet replaces node name's kubelet by version's and restarts it, as
// an operator does with the kubelet package: `kubectl drain
// --ignore-daemonsets` (a control-plane node here runs only static pods
// and DaemonSets: drain only cordons), the package, `systemctl restart
// kubelet`, `kubectl uncordon`. It returns when the node is Ready again
// with that kubelet.
func (p *Plane) SetKubelet(ctx context.Context, name, version string, timeout time.Duration) error {
	n, err := p.kubeadmNode(ctx, name)
	if err != nil {
		return err
	}
	if _, ok := p.kubeadm.Kubelets[version]; !ok {
		return fmt.Errorf("no kubelet %s built for this plane", version)
	}
	c, err := p.AdminClient(n)
	if err != nil {
		return err
	}
	cordon := func(on bool) error {
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
		_, err := c.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			return fmt.Errorf("cordon %s %t: %w", name, on, err)
		}
		return nil
	}
	if err := cordon(true); err != nil {
		return err
	}
	if p.State.Kubelets == nil {
		p.State.Kubelets = map[string]string{}
	}
	p.State.Kubelets[name] = version
	if err := p.State.save(); err != nil {
		return err
	}
	f, err := p.nodeFiles(n)
	if err != nil {
		return err
	}
	if err := f.installKubelet(p.kubeadm.Kubelets[version]); err != nil {
		return err
	}
	if err := p.StartKubeadmKubelet(ctx, n); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := waitKubeletVersion(wctx, p, n, version); err != nil {
		return err
	}
	return cordon(false)
}

// waitKubeletVersion waits until node n is Ready with a kubelet of
// version.
func waitKubeletVersion(ctx context.Context, p *Plane, n Node, version string) error {
	c, err := p.AdminClient(n)
	if err != nil {
		return err
	}
	for {
		if err := waitNodeReady(ctx, c, n.Name); err != nil {
			return fmt.Errorf("kubelet %s on %s: %w", version, n.Name, err)
		}
		node, err := c.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err == nil && node.Status.NodeInfo.KubeletVersion == version {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubelet on %s: not reporting %s", n.Name, version)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// KubeadmRollback restores on node name the static-pod manifests the last
// `kubeadm upgrade` backed up (/etc/kubernetes/tmp/kubeadm-backup-manifests-*)
// and the kubelet configuration it backed up
// (/etc/kubernetes/tmp/kubeadm-kubelet-config-*/config.yaml), as an
// operator recovers from a failed upgrade, and waits until the node's
// apiserver is ready on version. The kubelet keeps running: SetKubelet
// downgrades it, the operator's next step. etcd's data is not restored
// (the etcd version did not change; a restore would lose every write
// since the upgrade).
func (p *Plane) KubeadmRollback(ctx context.Context, name, version string, timeout time.Duration) error {
	n, ok := p.Node(name)
	if !ok {
		return fmt.Errorf("no node %s", name)
	}
	dir := p.KubeadmDir(n)
	manifests, err := lastBackup(dir, "kubeadm-backup-manifests-")
	if err != nil {
		return fmt.Errorf("rollback %s: %w", name, err)
	}
	files, err := filepath.Glob(filepath.Join(manifests, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("rollback %s: no manifests in %s", name, manifests)
	}
	// The kubelet configuration first: the kubelet reads it when it
	// restarts, the manifests as soon as they change.
	if cfg, err := lastBackup(dir, "kubeadm-kubelet-config-"); err == nil {
		f, err := p.nodeFiles(n)
		if err != nil {
			return err
		}
		if err := copyFile(filepath.Join(cfg, "config.yaml"), f.path("kubelet/config.yaml")); err != nil {
			return fmt.Errorf("rollback %s: kubelet config: %w", name, err)
		}
	}
	for _, m := range files {
		// Written beside and renamed: the kubelet never reads half a file.
		dst := filepath.Join(dir, "manifests", filepath.Base(m))
		if err := copyFile(m, dst+".restore"); err != nil {
			return err
		}
		if err := os.Rename(dst+".restore", dst); err != nil {
			return err
		}
	}
	fmt.Fprintf(p.out, "lab: %s: restored %d manifests of %s\n", name, len(files), filepath.Base(manifests))
	if err := p.waitAPIServerVersion(ctx, n, version, timeout); err != nil {
		return err
	}
	return p.setVersion(name, version)
}

// lastBackup is the newest directory of kubeadm's under dir/tmp named
// prefix<timestamp> (kubeadm's timestamps sort by name).
func lastBackup(dir, prefix string) (string, error) {
	ds, err := filepath.Glob(filepath.Join(dir, "tmp", prefix+"*"))
	if err != nil || len(ds) == 0 {
		return "", fmt.Errorf("no %s* backup in %s", prefix, filepath.Join(dir, "tmp"))
	}
	slices.Sort(ds)
	return ds[len(ds)-1], nil
}

// waitAPIServerVersion waits until node n's apiserver passes /readyz and
// its /version is version.
func (p *Plane) waitAPIServerVersion(ctx context.Context, n Node, version string, timeout time.Duration) error {
	c, err := p.AdminHTTPClient()
	if err != nil {
		return err
	}
	ready := p.apiserverReady(n)
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		ok, detail := ready(ctx)
		last = detail
		if ok {
			if v, err := ServerVersion(ctx, c, n); err == nil {
				if v == version {
					return nil
				}
				last = "serving " + v
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: apiserver %s not ready in %s (%s)", n.Name, version, timeout, last)
}

// WaitPods waits until exactly n pods match selector in namespace, each
// Ready and not terminating; the error lists them as last seen.
func (p *Plane) WaitPods(ctx context.Context, namespace, selector string, n int, timeout time.Duration) error {
	c, err := p.AdminClient(p.Spec.Nodes[len(p.Spec.Nodes)-1])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var detail string
	for {
		pods, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil {
			ready := 0
			var b strings.Builder
			for _, pod := range pods.Items {
				for _, cond := range pod.Status.Conditions {
					if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && pod.DeletionTimestamp == nil {
						ready++
					}
				}
				fmt.Fprintf(&b, "%s on %s: %s %+v\n", pod.Name, pod.Spec.NodeName, pod.Status.Phase, pod.Status.ContainerStatuses)
			}
			if ready == n && len(pods.Items) == n {
				return nil
			}
			detail = b.String()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pods %s not Ready in %s:\n%s", selector, timeout, detail)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
