package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/deploy/image"
)

// ControlPlaneLabel is the role label and taint key kubeadm gives
// control-plane nodes; the lab's nodes carry both in the kubelet mode.
const ControlPlaneLabel = "node-role.kubernetes.io/control-plane"

// startKubelets runs containerd and a kubelet on every node, each in the
// node's namespaces and a mount namespace of its own, and the
// controller-manager and scheduler once, on the first node; it waits until
// every node is Ready and labelled as a control-plane node.
func (p *Plane) startKubelets(ctx context.Context, timeout time.Duration) error {
	start := time.Now()
	if err := requireRuntime(); err != nil {
		return err
	}
	var versions []string
	for _, n := range p.Spec.Nodes {
		versions = append(versions, n.Version)
	}
	kb, err := EnsureKubeletBinaries(ctx, p.cache, versions, p.out)
	if err != nil {
		return err
	}
	pause, err := p.buildPauseImage(ctx)
	if err != nil {
		return err
	}
	if err := p.prepareHost("/etc/kubernetes/pki", "/etc/kubernetes/manifests", "/var/lib/skewgate"); err != nil {
		return err
	}
	for _, n := range p.Spec.Nodes {
		if err := p.startNodeRuntime(ctx, n, kb.Kubelets[n.Version], pause, timeout); err != nil {
			return err
		}
	}
	if err := p.startControllers(ctx, kb); err != nil {
		return err
	}
	if err := p.waitNodesReady(ctx, timeout); err != nil {
		return err
	}
	fmt.Fprintf(p.out, "lab: kubelets Ready on %d nodes in %s\n", len(p.Spec.Nodes), time.Since(start).Round(100*time.Millisecond))
	return nil
}

// buildPauseImage builds the sandbox image from deploy/image/pause.
func (p *Plane) buildPauseImage(ctx context.Context) (string, error) {
	dir, err := filepath.Abs(filepath.Join(p.Dir, "images"))
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "pause.tar")
	b := image.GoBinary{Package: "github.com/skewgate/skewgate/deploy/image/pause", LDFlags: "-s -w", Out: filepath.Join(dir, "pause")}
	s := image.Spec{Entrypoint: "/pause", Version: "v1", Created: time.Unix(0, 0).UTC()}
	if _, err := image.Archive(ctx, b, s, PauseImage, out); err != nil {
		return "", fmt.Errorf("pause image: %w", err)
	}
	return out, nil
}

// startNodeRuntime starts node n's containerd, imports the pause image and
// starts its kubelet.
func (p *Plane) startNodeRuntime(ctx context.Context, n Node, kubelet, pause string, timeout time.Duration) error {
	f, err := p.nodeFiles(n)
	if err != nil {
		return err
	}
	if err := p.prepareNode(f); err != nil {
		return err
	}
	ctrd, err := p.startLabProcess("containerd-"+n.Name, "containerd", []string{"--config", f.path("containerd.toml")},
		func(cmd *exec.Cmd) error { return startInNewMountNS(n, f.nodeBinds(), cmd) })
	if err != nil {
		return err
	}
	if err := waitReady(ctx, ctrd, timeout, containerdReady(f.path("containerd.sock"))); err != nil {
		return err
	}
	if err := importImage(ctx, f.path("containerd.sock"), pause); err != nil {
		return err
	}
	_, err = p.startKubelet(n, kubelet, kubeletArgs(f), ctrd)
	return err
}

// startKubelet starts node n's kubelet bin with args in the mount
// namespace of its containerd, under a supervisor that restarts it as
// kubelet.service does (supervise.go); the supervisor is the recorded
// process, and the kubelet's log records each exit.
func (p *Plane) startKubelet(n Node, bin string, args []string, ctrd Proc) (Proc, error) {
	path, args, env := superviseArgs(bin, args, kubeletRestartDelay)
	return p.startLabProcessEnv("kubelet-"+n.Name, path, args, env,
		func(cmd *exec.Cmd) error { return startInMountNSOf(n, ctrd.PID, cmd) })
}

// prepareNode writes node f's files: kubeadm's pki, configs, the kubelet's
// kubeconfig (system:node:<name>), and the directories bound in its mount
// namespace.
func (p *Plane) prepareNode(f nodeFiles) error {
	if err := f.writeKubeadmPKI(p.PKI); err != nil {
		return err
	}
	if err := f.writeRuntimeConfigs(p.PKI.CAFile); err != nil {
		return err
	}
	err := writeClientKubeconfig(f.path("kubelet.kubeconfig"), f.node.URL(), p.PKI,
		"system:node:"+f.node.Name, "system:nodes")
	if err != nil {
		return err
	}
	for _, b := range f.nodeBinds() {
		if err := os.MkdirAll(b.src, 0o755); err != nil {
			return err
		}
	}
	return nil
}

func kubeletArgs(f nodeFiles) []string {
	return []string{
		"--config=" + f.path("kubelet.yaml"),
		"--kubeconfig=" + f.path("kubelet.kubeconfig"),
		"--cert-dir=" + f.path("kubelet-pki"),
		"--root-dir=" + f.path("kubelet"),
		"--hostname-override=" + f.node.Name,
		"--node-ip=" + f.node.IP.String(),
		"--v=1",
	}
}

// startLabProcess starts a recorded lab process with start, logging to
// logs/<name>.log.
func (p *Plane) startLabProcess(name, bin string, args []string, start func(*exec.Cmd) error) (Proc, error) {
	return p.startLabProcessEnv(name, bin, args, nil, start)
}

// startLabProcessEnv is startLabProcess with env added to this process's
// environment.
func (p *Plane) startLabProcessEnv(name, bin string, args, env []string, start func(*exec.Cmd) error) (Proc, error) {
	log, err := os.OpenFile(p.logFile(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return Proc{}, fmt.Errorf("open log for %s: %w", name, err)
	}
	defer log.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if err := start(cmd); err != nil {
		return Proc{}, fmt.Errorf("start %s: %w", name, err)
	}
	go cmd.Wait()
	st, err := procStartTime(cmd.Process.Pid)
	if err != nil {
		return Proc{}, fmt.Errorf("%s exited at once, see %s", name, p.logFile(name))
	}
	proc := Proc{Name: name, PID: cmd.Process.Pid, StartTime: st, Log: p.logFile(name)}
	return proc, p.State.setProc(proc)
}

// startControllers runs kube-controller-manager and kube-scheduler on the
// first node (oldest version), toward its apiserver.
func (p *Plane) startControllers(ctx context.Context, kb KubeletBinaries) error {
	n := p.Spec.Nodes[0]
	f, err := p.nodeFiles(n)
	if err != nil {
		return err
	}
	kcm, sched := f.path("controller-manager.kubeconfig"), f.path("scheduler.kubeconfig")
	if err := writeClientKubeconfig(kcm, n.URL(), p.PKI, "system:kube-controller-manager"); err != nil {
		return err
	}
	if err := writeClientKubeconfig(sched, n.URL(), p.PKI, "system:kube-scheduler"); err != nil {
		return err
	}
	inNode := func(cmd *exec.Cmd) error { return StartInNode(NetNSPath(n.Name), n.Name, cmd) }
	if _, err := p.startLabProcess("kube-controller-manager", kb.ControllerManager, p.controllerManagerArgs(kcm), inNode); err != nil {
		return err
	}
	_, err = p.startLabProcess("kube-scheduler", kb.Scheduler, []string{
		"--kubeconfig=" + sched, "--authentication-kubeconfig=" + sched, "--authorization-kubeconfig=" + sched,
		"--bind-address=127.0.0.1", "--leader-elect=false",
	}, inNode)
	return err
}

func (p *Plane) controllerManagerArgs(kubeconfig string) []string {
	ca, _ := filepath.Abs(p.PKI.CAFile)
	sa, _ := filepath.Abs(p.PKI.SAPrivateKey)
	return []string{
		"--kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1", "--leader-elect=false",
		// kubeadm's: each controller with its own ServiceAccount; the CA
		// goes into every namespace's kube-root-ca.crt for pods' tokens.
		"--use-service-account-credentials=true",
		"--root-ca-file=" + ca, "--service-account-private-key-file=" + sa,
		"--cluster-name=skewlab",
	}
}

// AdminClient is a clientset for node n's apiserver as the lab admin.
func (p *Plane) AdminClient(n Node) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(p.AdminConfig(n))
}

// AdminConfig is the client configuration of node n's apiserver as the
// lab admin.
func (p *Plane) AdminConfig(n Node) *rest.Config {
	return &rest.Config{
		Host: n.URL(),
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: p.PKI.CAFile, CertFile: p.PKI.Admin.CertFile, KeyFile: p.PKI.Admin.KeyFile,
		},
	}
}

// waitNodesReady waits until every node is registered and Ready, labelling
// each as a control-plane node (a kubelet may not set node-role labels on
// itself: kubeadm labels the node through the API, so does the lab).
func (p *Plane) waitNodesReady(ctx context.Context, timeout time.Duration) error {
	c, err := p.AdminClient(p.Spec.Nodes[len(p.Spec.Nodes)-1])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	patch := []byte(`{"metadata":{"labels":{"` + ControlPlaneLabel + `":""}}}`)
	for _, n := range p.Spec.Nodes {
		if err := waitNodeReady(ctx, c, n.Name); err != nil {
			proc, _ := p.State.Proc("kubelet-" + n.Name)
			return fmt.Errorf("node %s: %w\n--- %s (tail) ---\n%s", n.Name, err, proc.Log, logTail(proc.Log, 30))
		}
		if p.Spec.Kubeadm {
			continue // kubeadm's mark-control-plane phase labelled it
		}
		if _, err := c.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("label node %s: %w", n.Name, err)
		}
	}
	return nil
}

func waitNodeReady(ctx context.Context, c kubernetes.Interface, name string) error {
	detail := "not registered"
	for {
		node, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil && ctx.Err() == nil {
			detail = "not registered: " + err.Error() // the last error says why (not found, or the apiserver asked)
		}
		if err == nil {
			detail = "not Ready"
			for _, cond := range node.Status.Conditions {
				if cond.Type == "Ready" && cond.Status == "True" {
					return nil
				}
				if cond.Type == "Ready" {
					detail = cond.Reason + ": " + cond.Message
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not Ready: %s", detail)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// KubeletEnv are the kubelet mode's .lab/env variables: per node the pin
// path of its skewgate pod as the host sees it and its containerd socket,
// and the lab's kubectl.
func (p *Plane) KubeletEnv() map[string]string {
	e := map[string]string{}
	for _, n := range p.Spec.Nodes {
		k := "LAB_" + n.EnvName() + "_"
		e[k+"PIN_PATH"] = KubeletPinPath(n)
		e[k+"CONTAINERD_SOCKET"] = p.ContainerdSocket(n)
	}
	if kubectl, err := p.Kubectl(context.Background()); err == nil {
		e["LAB_KUBECTL"] = kubectl
	}
	return e
}
