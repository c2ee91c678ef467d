package lab

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
)

// containerdReady asks the containerd at sock for its version.
func containerdReady(sock string) readyCheck {
	return func(ctx context.Context) (bool, string) {
		out, err := exec.CommandContext(ctx, "ctr", "--address", sock, "version").CombinedOutput()
		if err != nil {
			return false, string(out)
		}
		return true, ""
	}
}

// importImage imports an image archive into the containerd at sock, in the
// namespace the CRI (and so the kubelet) uses, unpacked for the lab's
// snapshotter.
func importImage(ctx context.Context, sock, archive string) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", sock, "-n", "k8s.io",
		"images", "import", "--snapshotter", "native", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("import %s into %s: %w\n%s", archive, sock, err, out)
	}
	return nil
}

// ImportImage imports an image archive (image.WriteArchive's) into every
// node's containerd, as `ctr -n k8s.io images import` does on a real node.
func (p *Plane) ImportImage(ctx context.Context, archive string) error {
	if !p.Spec.Kubelet && !p.Spec.Kubeadm {
		return fmt.Errorf("import %s: the lab runs no kubelets (Spec.Kubelet, Spec.Kubeadm)", archive)
	}
	abs, err := filepath.Abs(archive)
	if err != nil {
		return err
	}
	for _, n := range p.Spec.Nodes {
		if err := importImage(ctx, p.ContainerdSocket(n), abs); err != nil {
			return err
		}
	}
	return nil
}

// requireRuntime checks for what the kubelet mode runs from Debian.
func requireRuntime() error {
	for _, c := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr"} {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("the kubelet mode needs %s: apt-get install containerd runc containernetworking-plugins (make kubelet-packages)", c)
		}
	}
	if _, err := exec.LookPath(filepath.Join(cniBinDir, "loopback")); err != nil {
		return fmt.Errorf("the kubelet mode needs the CNI loopback plugin in %s: apt-get install containernetworking-plugins", cniBinDir)
	}
	return nil
}
