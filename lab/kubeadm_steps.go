package lab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// The operator's steps around kubeadm's: the kubelet upgraded after its
// node's control plane, and the rollback after a failed upgrade, as the
// kubeadm documentation describes them ("Upgrading kubeadm clusters",
// "Recovering from a failure state").

// KubeletVersion is the version of node name's kubelet in the kubeadm
// mode ("" before it started).
func (p *Plane) KubeletVersion(name string) string { return p.State.Kubelets[name] }

// HasKubelet says whether the plane has a kubelet of version (kubelet
// v1.38.0-beta.0 cannot be built from the module proxy: EnsureKubeadm).
func (p *Plane) HasKubelet(version string) bool {
	_, ok := p.kubeadm.Kubelets[version]
	return ok
}

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
	// A kubelet of another version may recreate every static pod of its
	// node (1.36.3 → 1.37.2 does: new sandboxes, the old containers
	// stopped), the apiserver and etcd included, a few seconds after it
	// registered: the next step (a `kubeadm upgrade node` reading the
	// cluster's configuration through the endpoint on node-a) must not
	// start in the middle of that.
	if err := p.waitControlPlaneSettled(wctx, n, settleQuiet); err != nil {
		return fmt.Errorf("kubelet %s on %s: %w", version, name, err)
	}
	return cordon(false)
}

// settleQuiet is how long a node's control plane must stay ready before
// it counts as settled.
const settleQuiet = 15 * time.Second

// waitControlPlaneSettled waits until node n's apiserver passes /readyz
// and each of its static control-plane pods (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler) is Ready, without a break, for
// quiet.
func (p *Plane) waitControlPlaneSettled(ctx context.Context, n Node, quiet time.Duration) error {
	c, err := p.AdminClient(n)
	if err != nil {
		return err
	}
	ready := p.apiserverReady(n)
	var since time.Time
	last := "not checked"
	for {
		ok, detail := ready(ctx)
		last = detail
		if ok {
			ok, last = controlPlanePodsReady(ctx, c, n.Name)
		}
		switch {
		case !ok:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= quiet:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("control plane of %s not settled (%s)", n.Name, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// controlPlanePodsReady reports whether every static control-plane pod
// kubeadm runs on node is Ready, and if not, which is not.
func controlPlanePodsReady(ctx context.Context, c kubernetes.Interface, node string) (bool, string) {
	pods, err := c.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "tier=control-plane", FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return false, err.Error()
	}
	seen := map[string]bool{}
	for _, pod := range pods.Items {
		if !podReady(pod) {
			return false, pod.Name + " not Ready"
		}
		seen[pod.Labels["component"]] = true
	}
	for _, component := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if !seen[component] {
			return false, "no " + component + " pod on " + node
		}
	}
	return true, "ready"
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

// KubeadmRollback runs on node name the runbook's rollback of a node
// (docs/runbook.md, step 7, its first block, as written): the static-pod
// manifests of the control plane that the last `kubeadm upgrade` backed
// up (/etc/kubernetes/tmp/kubeadm-backup-manifests-*) copied back, etcd's
// compared, not copied, and the kubelet configuration it backed up
// (/etc/kubernetes/tmp/kubeadm-kubelet-config-*/config.yaml) — and waits
// until the node's apiserver is ready on version. The kubelet keeps
// running: SetKubelet downgrades it, the operator's next step. It returns
// what the commands printed. etcd stays at the version the upgrade gave it
// (kubeadm 1.36 upgrades 3.6.6 to 3.6.8, 1.37 3.6.8 to 3.7.0): an older
// etcd on data a newer one wrote is etcd's downgrade procedure, not a
// manifest copy (the runbook's etcd caveat), and the rolled-back apiserver
// runs on the newer etcd as kubeadm itself pairs them (its etcd table maps
// the older minors to its own etcd).
func (p *Plane) KubeadmRollback(ctx context.Context, name, version string, timeout time.Duration) (string, error) {
	n, ok := p.Node(name)
	if !ok {
		return "", fmt.Errorf("no node %s", name)
	}
	out, err := p.NodeShell(ctx, name, RunbookStep("7")[0])
	if err != nil {
		return out, fmt.Errorf("rollback %s: %w", name, err)
	}
	fmt.Fprintf(p.out, "lab: %s: the runbook's rollback ran:\n%s", name, indent(out))
	if err := p.waitAPIServerVersion(ctx, n, version, timeout); err != nil {
		return out, err
	}
	return out, p.setVersion(name, version)
}

// indent prefixes every line of s with two spaces.
func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ") + "\n"
}

// NodeShell runs script with `sh -e` on node name as its operator would
// in a root shell: in the node's network and mount namespaces (its
// /etc/kubernetes, /var/lib/kubelet, bpffs), KUBECONFIG kubeadm's
// admin.conf, and on PATH the node's binaries, then dirs (kubectl,
// skewgate: whatever the script calls). It returns stdout and stderr
// together.
func (p *Plane) NodeShell(ctx context.Context, name, script string, dirs ...string) (string, error) {
	n, ok := p.Node(name)
	if !ok {
		return "", fmt.Errorf("no node %s", name)
	}
	ctrd, ok := p.State.Proc("containerd-" + n.Name)
	if !ok {
		return "", fmt.Errorf("shell on %s: no containerd (not a kubeadm or kubelet plane)", n.Name)
	}
	f, err := p.nodeFiles(n)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-ec", script)
	path := strings.Join(append(append([]string{f.path("bin")}, dirs...), os.Getenv("PATH")), ":")
	cmd.Env = append(os.Environ(), "PATH="+path, "KUBECONFIG=/etc/kubernetes/admin.conf")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := startInMountNSOf(n, ctrd.PID, cmd); err != nil {
		return "", fmt.Errorf("shell on %s: %w", n.Name, err)
	}
	if err := cmd.Wait(); err != nil {
		return out.String(), fmt.Errorf("shell on %s: %w\n--- script ---\n%s--- output ---\n%s", n.Name, err, script, out.String())
	}
	return out.String(), nil
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
