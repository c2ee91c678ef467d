package drill

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skewgate/skewgate/deploy/image"
	"github.com/skewgate/skewgate/lab"
)

// stepTimeout bounds one operator step on kubeadm (kubeadm's own waits
// are longer; a step that takes this long has failed).
const stepTimeout = 5 * time.Minute

// deploySkewgate installs skewgate as a user does on the kubeadm lab: its
// image into every node's containerd, the DaemonSet of deploy/kubernetes
// (with --steering-mode=always for ModeSkewgate), and for
// ModeSkewgateArmed the cluster's switch armed before the upgrade. It
// returns once every pod is Ready and, where armed, every node steers.
func deploySkewgate(ctx context.Context, plane *lab.Plane, o Options, mode string) error {
	if o.Image == "" || o.ImageTag == "" {
		return errors.New("the kubeadm drill runs skewgate's DaemonSet: it needs its image archive and tag (make image)")
	}
	t0 := time.Now()
	if err := plane.ImportImage(ctx, o.Image); err != nil {
		return err
	}
	var args []string
	if skewgateModes[mode] == "always" {
		args = append(args, "--steering-mode=always")
	}
	args = append(args, o.SkewgateArgs...)
	base := filepath.Join(filepath.Dir(o.MonitoringDir), "kubernetes")
	// The repository the archive names its image in (make image's
	// REPOSITORY), as the nodes' containerd imported it.
	repo, _, err := image.ArchiveName(o.Image)
	if err != nil {
		return err
	}
	if _, err := plane.ApplyKustomize(ctx, base, repo, o.ImageTag, args...); err != nil {
		return err
	}
	if err := plane.WaitPods(ctx, "kube-system", "app.kubernetes.io/name=skewgate", len(plane.Spec.Nodes), 3*time.Minute); err != nil {
		return err
	}
	if mode == ModeSkewgateArmed {
		c, err := plane.AdminClient(plane.Spec.Nodes[0])
		if err != nil {
			return err
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "skewgate"}, Data: map[string]string{"steering": "always"}}
		if _, err := c.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("arm: %w", err)
		}
	}
	if skewgateModes[mode] == "always" || mode == ModeSkewgateArmed {
		if err := waitSteering(ctx, plane, 30*time.Second); err != nil {
			return err
		}
	}
	fmt.Fprintf(o.Progress, "drill:   skewgate's DaemonSet ready in %s\n", time.Since(t0).Round(100*time.Millisecond))
	return nil
}

// waitSteering waits until every node's pins say steering is on.
func waitSteering(ctx context.Context, plane *lab.Plane, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, n := range plane.Spec.Nodes {
		for {
			st, err := lab.KubeletSteering(n)
			if err == nil && st.Steering() {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: not steering after %s: %v", n.Name, timeout, err)
			}
			if !sleep(ctx, 100*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
	return nil
}

// moveKubeadm runs step s as the kubeadm documentation has the operator
// run it: `kubeadm upgrade apply` on the first node of the new version,
// `kubeadm upgrade node` on the others, the kubelet after its control
// plane; a rollback restores kubeadm's backups. Meanwhile presence follows
// the node's apiserver as clients see it: away from its first failed
// /readyz, back with the version it then serves.
func moveKubeadm(ctx context.Context, plane *lab.Plane, s step, pres *presence, pc *http.Client) error {
	fctx, stop := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() { defer close(followed); follow(fctx, plane, s.node, pres, pc) }()
	defer func() { stop(); <-followed }()
	switch {
	case s.kubelet && !s.upgrade:
		if err := plane.SetKubelet(ctx, s.node, s.version, stepTimeout); err != nil {
			return err
		}
		return replaceSkewgatePod(ctx, plane, s.node)
	case s.kubelet:
		return plane.SetKubelet(ctx, s.node, s.version, stepTimeout)
	case s.upgrade:
		apply := !slices.ContainsFunc(plane.Spec.Nodes, func(n lab.Node) bool { return n.Version == s.version })
		return plane.KubeadmUpgrade(ctx, s.node, s.version, apply)
	}
	_, err := plane.KubeadmRollback(ctx, s.node, s.version, stepTimeout)
	return err
}

// follow polls node's /readyz every 250 ms until ctx ends, marking it
// away in pres at its first failure and back, with the version it serves,
// when it passes again; and noting when it stops answering at all (a
// /readyz that fails or hangs while etcd restarts is not that: the
// apiserver runs).
func follow(ctx context.Context, plane *lab.Plane, node string, pres *presence, pc *http.Client) {
	n, _ := plane.Node(node)
	live, answering := true, true
	for ctx.Err() == nil {
		_, err := get(ctx, pc, n.URL()+"/readyz", "")
		switch silent := refused(err); {
		case silent && answering && ctx.Err() == nil:
			pres.stoppedAnswering(node, time.Now())
			answering = false
		case !silent:
			answering = true
		}
		switch {
		case err != nil && live:
			pres.down(node, time.Now())
			live = false
		case err == nil && !live:
			if v, err := lab.ServerVersion(ctx, pc, n); err == nil {
				// What a version serves is learned once, from its
				// first server up.
				_ = pres.learn(ctx, pc, n.URL(), v)
				pres.up(node, v)
				live = true
			}
		}
		sleep(ctx, 250*time.Millisecond)
	}
}

// refused reports whether err is a connection that could not be made:
// nothing listens (a timeout may be an apiserver that hangs).
func refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// replaceSkewgatePod deletes node's skewgate pod, if it runs one, right
// after its kubelet's downgrade, and waits until the DaemonSet's new one
// is Ready: skewgate restarted inside the rollback's grace, which the
// state file must carry over (an OOM, an eviction, a rollout at that
// moment). The drill counts every 404 meanwhile.
func replaceSkewgatePod(ctx context.Context, plane *lab.Plane, node string) error {
	c, err := plane.AdminClient(plane.Spec.Nodes[0])
	if err != nil {
		return err
	}
	pods := c.CoreV1().Pods("kube-system")
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=skewgate", FieldSelector: "spec.nodeName=" + node}
	list, err := pods.List(ctx, sel)
	if err != nil || len(list.Items) == 0 {
		return err // no skewgate in this mode
	}
	old := list.Items[0].Name
	if err := pods.Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("replace skewgate's pod on %s: %w", node, err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list, err := pods.List(ctx, sel)
		if err == nil && len(list.Items) == 1 && list.Items[0].Name != old && list.Items[0].DeletionTimestamp == nil &&
			slices.ContainsFunc(list.Items[0].Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			}) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: skewgate's pod %s not replaced by a Ready one in 2m", node, old)
		}
		if !sleep(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}
}
