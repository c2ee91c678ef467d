package main

import (
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/skewgate/skewgate/lab"
)

func newUpCmd() *cobra.Command {
	o := lab.Options{Dir: lab.DefaultDir(), CacheDir: lab.DefaultCacheDir(), Progress: os.Stdout}
	nodes := "node-a=" + lab.OldVersion + ",node-b=" + lab.NewVersion
	var image string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Bring up etcd and one kube-apiserver per node, oldest version first",
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := lab.ParseNodes(nodes)
			if err != nil {
				return err
			}
			spec.InTreeProxy, spec.Kubelet, spec.Kubeadm = o.Spec.InTreeProxy, o.Spec.Kubelet, o.Spec.Kubeadm
			o.Spec = spec
			p, err := lab.Up(cmd.Context(), o)
			if err != nil {
				return err
			}
			if image != "" {
				if err := p.ImportImage(cmd.Context(), image); err != nil {
					return err
				}
			}
			for _, n := range p.Spec.Nodes {
				cmd.Printf("  %-8s %-9s %s\n", n.Name, n.Version, n.URL())
			}
			cmd.Printf("source %s for LAB_* variables; `skewlab down` tears it down\n", lab.EnvPath(p.Dir))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Dir, "dir", o.Dir, "lab state directory ($SKEWGATE_LAB_DIR)")
	f.StringVar(&o.CacheDir, "cache", o.CacheDir, "binary cache ($SKEWGATE_LAB_CACHE)")
	f.StringVar(&nodes, "nodes", nodes, "nodes as name=version, comma-separated (e.g. "+
		strings.Join([]string{"node-a=" + lab.OldVersion, "node-b=" + lab.NewVersion, "node-c=" + lab.NewVersion}, ",")+")")
	f.BoolVar(&o.Spec.InTreeProxy, "in-tree-proxy", false, "enable kube-apiserver's own Mixed Version Proxy, for comparison")
	f.StringVar(&o.Skewgate, "skewgate", "", "skewgate binary to run on every node, steering the node's IP:6443 (make lab-up SKEWGATE=on)")
	f.BoolVar(&o.Spec.Kubelet, "kubelet", false, "run containerd and a kubelet on every node, and a controller-manager and scheduler (make lab-up KUBELET=on)")
	f.BoolVar(&o.Spec.Kubeadm, "kubeadm", false, "build the plane with kubeadm: init on the first node, join --control-plane on the others, static pods of lab-built images, a VIP "+lab.KubeadmEndpoint()+" (make lab-up KUBEADM=on)")
	f.StringVar(&image, "image", "", "with --kubelet or --kubeadm: an image archive (make image) to import into every node's containerd")
	f.DurationVar(&o.ReadyTimeout, "ready-timeout", 90*time.Second, "how long each process may take to become ready")
	return cmd
}

func newDownCmd() *cobra.Command {
	dir := lab.DefaultDir()
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop every lab process by recorded PID and remove its namespaces, bridge and files",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := lab.Down(dir); err != nil {
				return err
			}
			cmd.Println("lab: down")
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", dir, "lab state directory ($SKEWGATE_LAB_DIR)")
	return cmd
}
