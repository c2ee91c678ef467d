package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// kcmServerAnnotation marks a controller-manager's static pod whose
// kubeconfig the lab pointed elsewhere; its value is the server. Changing
// the manifest is what makes the kubelet restart the pod, which reads its
// kubeconfig only at start.
const kcmServerAnnotation = "skewlab.skewgate.io/apiserver"

// PointControllerManagers points every node's kube-controller-manager at
// server instead of its own node's address, as an operator whose
// controller-managers go through a load balancer edits
// /etc/kubernetes/controller-manager.conf: the server, and the name its
// certificate is checked against (kubeadm's apiserver certificate has
// none for a load balancer's address; "kubernetes" is one of its names).
// It restarts each controller-manager's static pod and returns when every
// one is Ready again. kubeadm's upgrades renew the file's certificate and
// keep its server.
func (p *Plane) PointControllerManagers(ctx context.Context, server, tlsServerName string, timeout time.Duration) error {
	for _, n := range p.Spec.Nodes {
		dir := p.KubeadmDir(n)
		if err := repointKubeconfig(filepath.Join(dir, "controller-manager.conf"), server, tlsServerName); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
		if err := annotateManifest(filepath.Join(dir, "manifests", "kube-controller-manager.yaml"), kcmServerAnnotation, server); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	return p.waitControllerManagers(ctx, server, timeout)
}

// repointKubeconfig sets every cluster of the kubeconfig at path to server
// and tlsServerName.
func repointKubeconfig(path, server, tlsServerName string) error {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return err
	}
	for _, c := range cfg.Clusters {
		c.Server, c.TLSServerName = server, tlsServerName
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// annotateManifest sets annotation key to value on the static pod of the
// manifest at path.
func annotateManifest(path, key, value string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[key] = value
	out, err := yaml.Marshal(&pod)
	if err != nil {
		return err
	}
	// A hidden name: the kubelet runs every other file in the directory.
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// waitControllerManagers waits until every node's controller-manager
// mirror pod carries the annotation for server and is Ready.
func (p *Plane) waitControllerManagers(ctx context.Context, server string, timeout time.Duration) error {
	c, err := p.AdminClient(p.Spec.Nodes[len(p.Spec.Nodes)-1])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		pods, err := c.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "component=kube-controller-manager"})
		ready := 0
		if err == nil {
			for _, pod := range pods.Items {
				if pod.Annotations[kcmServerAnnotation] == server && podReady(pod) {
					ready++
				}
			}
		}
		if ready == len(p.Spec.Nodes) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("controller-managers through %s: %d of %d Ready in %s", server, ready, len(p.Spec.Nodes), timeout)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func podReady(pod corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && pod.DeletionTimestamp == nil
		}
	}
	return false
}
