package status

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The DaemonSet of deploy/kubernetes/base.
const (
	DefaultNamespace = "kube-system"
	DefaultSelector  = "app.kubernetes.io/name=skewgate"
	// DaemonSetName is the DaemonSet whose pods are skewgate's.
	DaemonSetName = "skewgate"
	// ControlPlaneLabel marks a control-plane node (kubeadm sets it). A
	// kubelet cannot set it on its own Node: NodeRestriction keeps
	// node-role.kubernetes.io/ labels from kubelets.
	ControlPlaneLabel = "node-role.kubernetes.io/control-plane"
	// adminFlag is the flag whose port is the secure admin listener's.
	adminFlag = "--secure-admin-address"
)

// Target is one skewgate pod and where its secure admin listener is.
type Target struct {
	Node      string
	Namespace string
	Pod       string
	// URL is https://<host IP>:<port>; empty when Err says why there is
	// none. Port is its port: where a port-forward to the pod goes.
	URL  string
	Port int
	Err  error
}

// Targets lists the skewgate pods matching selector in namespace, by node
// name, and where each one's admin listener is: the pod's host IP (the
// pods run on the host network) and port, the port of its
// --secure-admin-address unless port is not 0. A pod without either, or
// that is not proven skewgate's on a control-plane node (prove), is a
// Target with Err set, and nothing is sent to it: a label selector matches
// any pod anyone labels, a worker's kubelet's mirror pod included. The
// error is for the list itself (RBAC, the apiserver).
func Targets(ctx context.Context, cs kubernetes.Interface, namespace, selector string, port int) ([]Target, error) {
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("list skewgate pods in %s (%s): %w", namespace, selector, err)
	}
	ds, err := cs.AppsV1().DaemonSets(namespace).Get(ctx, DaemonSetName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		ds = nil // the static-pod form: only mirror pods
	case err != nil:
		return nil, fmt.Errorf("get the DaemonSet %s/%s its pods must belong to: %w", namespace, DaemonSetName, err)
	}
	nodes := map[string]*corev1.Node{}
	out := make([]Target, 0, len(pods.Items))
	for i := range pods.Items {
		p := &pods.Items[i]
		t := target(p, port)
		if t.Err == nil {
			t.Err = prove(ctx, cs, nodes, p, ds)
			if t.Err != nil {
				t.URL = ""
			}
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b Target) int {
		return strings.Compare(a.Node+"/"+a.Pod, b.Node+"/"+b.Pod)
	})
	return out, nil
}

func target(pod *corev1.Pod, port int) Target {
	t := Target{Node: pod.Spec.NodeName, Namespace: pod.Namespace, Pod: pod.Name}
	if t.Node == "" {
		t.Node = "(unscheduled)"
	}
	if port == 0 {
		p, err := adminPort(pod)
		if err != nil {
			t.Err = err
			return t
		}
		port = p
	}
	if pod.Status.HostIP == "" {
		t.Err = fmt.Errorf("pod %s has no host IP yet (phase %q)", pod.Name, pod.Status.Phase)
		return t
	}
	t.URL, t.Port = "https://"+net.JoinHostPort(pod.Status.HostIP, strconv.Itoa(port)), port
	return t
}

// prove reports why pod is not skewgate's on a control-plane node: it must
// be controlled by the DaemonSet ds (by UID), or be the mirror pod of a
// static pod (the kubelet's, controlled by its Node); its node must be a
// control-plane node (ControlPlaneLabel, which no kubelet sets on itself);
// and its host IP must be one of that node's addresses. The listener then
// proves itself in the handshake (Options.client). nodes caches the
// nodes read.
func prove(ctx context.Context, cs kubernetes.Interface, nodes map[string]*corev1.Node, pod *corev1.Pod, ds *appsv1.DaemonSet) error {
	owner := metav1.GetControllerOf(pod)
	_, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]
	switch {
	case owner != nil && owner.Kind == "DaemonSet" && ds != nil && owner.UID == ds.UID:
	case mirror && owner != nil && owner.Kind == "Node" && owner.Name == pod.Spec.NodeName:
	default:
		return fmt.Errorf("pod %s is neither the DaemonSet %s/%s's nor a static pod's mirror: not proven skewgate, no credential sent", pod.Name, pod.Namespace, DaemonSetName)
	}
	n, ok := nodes[pod.Spec.NodeName]
	if !ok {
		var err error
		if n, err = cs.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("pod %s: its node %s: %w", pod.Name, pod.Spec.NodeName, err)
		}
		nodes[pod.Spec.NodeName] = n
	}
	if _, ok := n.Labels[ControlPlaneLabel]; !ok {
		return fmt.Errorf("pod %s runs on %s, which is not a control-plane node (no %s): no credential sent", pod.Name, n.Name, ControlPlaneLabel)
	}
	if !slices.ContainsFunc(n.Status.Addresses, func(a corev1.NodeAddress) bool { return a.Address == pod.Status.HostIP }) {
		return fmt.Errorf("pod %s's host IP %s is none of node %s's addresses: no credential sent", pod.Name, pod.Status.HostIP, n.Name)
	}
	return nil
}

// adminPort is the port of the pod's --secure-admin-address (as
// "$(NODE_IP):16444", whose host the pod's host IP stands for).
func adminPort(pod *corev1.Pod) (int, error) {
	for _, c := range pod.Spec.Containers {
		args := slices.Concat(c.Command, c.Args)
		for i, a := range args {
			var addr string
			switch {
			case strings.HasPrefix(a, adminFlag+"="):
				addr = strings.TrimPrefix(a, adminFlag+"=")
			case a == adminFlag && i+1 < len(args):
				addr = args[i+1]
			default:
				continue
			}
			j := strings.LastIndex(addr, ":")
			port, err := strconv.Atoi(addr[j+1:])
			if addr == "" || j < 0 || err != nil || port <= 0 || port > 65535 {
				return 0, fmt.Errorf("pod %s: %s=%q: want host:port", pod.Name, adminFlag, addr)
			}
			return port, nil
		}
	}
	return 0, fmt.Errorf("pod %s has no %s: its admin endpoints are not served over HTTPS (give --admin-port)", pod.Name, adminFlag)
}
