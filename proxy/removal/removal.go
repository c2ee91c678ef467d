// Package removal takes skewgate off a cluster once its DaemonSet is
// deleted: a Job per control-plane node that runs the image's own
// `skewgate uninstall` (pins, state file, hand-over socket), then the
// cluster's objects skewgate or its operator left — the switch ConfigMap
// and the upgrade Leases — and the Jobs themselves.
package removal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/proxy/status"
	"github.com/skewgate/skewgate/proxy/upgrade"
)

const (
	// SwitchConfigMap is the cluster switch in kube-system
	// (proxy.SwitchConfigMap; TestNames holds them equal).
	SwitchConfigMap = "skewgate"
	// switchNamespace is where the switch lives, whatever --namespace says.
	switchNamespace = "kube-system"
	// oldLeaseNamespace held the upgrade Leases before they moved to
	// upgrade.LeaseNamespace; it goes when agents stop reading it.
	oldLeaseNamespace = upgrade.LegacyLeaseNamespace
	// ControlPlaneLabel marks the nodes skewgate runs on.
	ControlPlaneLabel = "node-role.kubernetes.io/control-plane"
	// JobLabel marks the Jobs (and their pods) Uninstall starts.
	JobLabel = "app.kubernetes.io/name=skewgate-uninstall"
)

// ErrStillRunning is returned while the DaemonSet or a pod of skewgate
// that is not terminating is still there: removing its pins and state
// under it would only make it fail (and its DaemonSet would start it
// again).
var ErrStillRunning = errors.New("skewgate still runs")

// Options say where skewgate was and what to run.
type Options struct {
	// Namespace of the DaemonSet, its pods and the Jobs (kube-system).
	Namespace string
	// Selector of skewgate's pods.
	Selector string
	// Image runs `skewgate uninstall`; empty: the image of the deleted
	// DaemonSet's pods while they terminate, else an error.
	Image string
	// PinPath and StateFile are the DaemonSet's --pin-path and
	// --state-file on the host.
	PinPath, StateFile string
	// Timeout bounds the wait for terminating pods and for the Jobs.
	Timeout time.Duration
	// Poll is how often to look (default a second).
	Poll time.Duration
}

// Defaults are the shipped manifests' paths and namespace.
func Defaults() Options {
	return Options{
		Namespace: status.DefaultNamespace, Selector: status.DefaultSelector,
		PinPath: "/sys/fs/bpf/skewgate", StateFile: "/var/lib/skewgate/state.json",
		Timeout: 3 * time.Minute, Poll: time.Second,
	}
}

// Uninstall removes skewgate from every control-plane node and the
// cluster, and writes to w what it removed. It returns ErrStillRunning
// (wrapped, naming what runs) before it changes anything; a Job that
// fails is reported with its log, and the cluster's objects are then
// left for a second run.
func Uninstall(ctx context.Context, cs kubernetes.Interface, o Options, w io.Writer) error {
	if o.Poll == 0 {
		o.Poll = time.Second
	}
	image, err := waitGone(ctx, cs, o)
	if err != nil {
		return err
	}
	if o.Image == "" {
		o.Image = image
	}
	if o.Image == "" {
		return fmt.Errorf("no image to run skewgate uninstall with: the DaemonSet's pods are gone; name it with --image (the image the DaemonSet ran)")
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: ControlPlaneLabel})
	if err != nil {
		return fmt.Errorf("list control-plane nodes: %w", err)
	}
	if len(nodes.Items) == 0 {
		return fmt.Errorf("no node labelled %s", ControlPlaneLabel)
	}
	jobs, err := runJobs(ctx, cs, o, nodes.Items, w)
	if err != nil {
		return err
	}
	return errors.Join(deleteObjects(ctx, cs, w), deleteJobs(ctx, cs, o, jobs, w))
}

// waitGone refuses while skewgate runs and waits for its terminating pods
// to go; it returns their image.
func waitGone(ctx context.Context, cs kubernetes.Interface, o Options) (string, error) {
	_, err := cs.AppsV1().DaemonSets(o.Namespace).Get(ctx, status.DaemonSetName, metav1.GetOptions{})
	switch {
	case err == nil:
		return "", fmt.Errorf("%w: the DaemonSet %s/%s exists; delete it first (kubectl delete -k deploy/kubernetes, or helm uninstall)", ErrStillRunning, o.Namespace, status.DaemonSetName)
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("get the DaemonSet %s/%s: %w", o.Namespace, status.DaemonSetName, err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var image string
	for {
		pods, err := cs.CoreV1().Pods(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: o.Selector})
		if err != nil {
			return "", fmt.Errorf("list skewgate's pods: %w", err)
		}
		var running, terminating []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				running = append(running, p.Name+" on "+p.Spec.NodeName)
				continue
			}
			terminating = append(terminating, p.Name)
			if c := container(&p); c != nil && image == "" {
				image = c.Image
			}
		}
		if len(running) > 0 {
			return "", fmt.Errorf("%w: pods %s are not being deleted (a static pod? remove its manifest first)", ErrStillRunning, strings.Join(running, ", "))
		}
		if len(terminating) == 0 {
			return image, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("skewgate's pods %s still terminating: %w", strings.Join(terminating, ", "), ctx.Err())
		case <-time.After(o.Poll):
		}
	}
}

// container is the pod's skewgate container.
func container(p *corev1.Pod) *corev1.Container {
	i := slices.IndexFunc(p.Spec.Containers, func(c corev1.Container) bool { return c.Name == "skewgate" })
	if i < 0 {
		return nil
	}
	return &p.Spec.Containers[i]
}

// deleteObjects deletes the switch ConfigMap and every upgrade Lease.
func deleteObjects(ctx context.Context, cs kubernetes.Interface, w io.Writer) error {
	err := cs.CoreV1().ConfigMaps(switchNamespace).Delete(ctx, SwitchConfigMap, metav1.DeleteOptions{})
	switch {
	case err == nil:
		fmt.Fprintf(w, "deleted configmap %s/%s\n", switchNamespace, SwitchConfigMap)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("delete configmap %s/%s: %w", switchNamespace, SwitchConfigMap, err)
	}
	var errs []error
	for _, ns := range []string{upgrade.LeaseNamespace, oldLeaseNamespace} {
		if ns != oldLeaseNamespace {
			gone, err := namespaceGone(ctx, cs, ns)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if gone {
				fmt.Fprintf(w, "namespace %s is gone or going, and its Leases with it\n", ns)
				continue
			}
		}
		errs = append(errs, deleteLeases(ctx, cs, ns, w))
	}
	return errors.Join(errs...)
}

// namespaceGone reports whether ns is deleted or being deleted:
// `kubectl delete -k` and `helm uninstall` delete skewgate's own
// namespace, whose controller then deletes its Leases — and every
// RoleBinding there, so an operator whose rights there came from one
// would be refused the list.
func namespaceGone(ctx context.Context, cs kubernetes.Interface, ns string) (bool, error) {
	n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("get namespace %s: %w", ns, err)
	}
	return n.DeletionTimestamp != nil || n.Status.Phase == corev1.NamespaceTerminating, nil
}

func deleteLeases(ctx context.Context, cs kubernetes.Interface, ns string, w io.Writer) error {
	leases, err := cs.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("list leases in %s: %w", ns, err)
	}
	var errs []error
	for _, l := range leases.Items {
		if !strings.HasPrefix(l.Name, upgrade.LeasePrefix) {
			continue
		}
		err := cs.CoordinationV1().Leases(ns).Delete(ctx, l.Name, metav1.DeleteOptions{})
		switch {
		case err == nil:
			fmt.Fprintf(w, "deleted lease %s/%s\n", ns, l.Name)
		case !apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("delete lease %s/%s: %w", ns, l.Name, err))
		}
	}
	return errors.Join(errs...)
}
