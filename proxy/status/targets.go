package status

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The DaemonSet of deploy/kubernetes/base.
const (
	DefaultNamespace = "kube-system"
	DefaultSelector  = "app.kubernetes.io/name=skewgate"
	// adminFlag is the flag whose port is the secure admin listener's.
	adminFlag = "--secure-admin-address"
)

// Target is one skewgate pod and where its secure admin listener is.
type Target struct {
	Node string
	Pod  string
	// URL is https://<host IP>:<port>; empty when Err says why there is
	// none.
	URL string
	Err error
}

// Targets lists the skewgate pods matching selector in namespace, by node
// name, and where each one's admin listener is: the pod's host IP (the
// pods run on the host network) and port, the port of its
// --secure-admin-address unless port is not 0. A pod without either is a
// Target with Err set; the error is for the list itself (RBAC, the
// apiserver).
func Targets(ctx context.Context, cs kubernetes.Interface, namespace, selector string, port int) ([]Target, error) {
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("list skewgate pods in %s (%s): %w", namespace, selector, err)
	}
	out := make([]Target, 0, len(pods.Items))
	for i := range pods.Items {
		out = append(out, target(&pods.Items[i], port))
	}
	slices.SortFunc(out, func(a, b Target) int {
		return strings.Compare(a.Node+"/"+a.Pod, b.Node+"/"+b.Pod)
	})
	return out, nil
}

func target(pod *corev1.Pod, port int) Target {
	t := Target{Node: pod.Spec.NodeName, Pod: pod.Name}
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
	t.URL = "https://" + net.JoinHostPort(pod.Status.HostIP, strconv.Itoa(port))
	return t
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
