package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/deploy/kubernetes"
)

func newManifestCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "manifest",
		Short: "Print skewgate's manifests in other forms",
	}
	cmd.AddCommand(newStaticPodCmd())
	return cmd
}

func newStaticPodCmd() *cobra.Command {
	s := kubernetes.StaticPod{Image: kubernetes.DefaultImage(buildVersion().Version)}
	var steer, local, secureAdmin string
	cmd := &cobra.Command{
		Use:   "static-pod",
		Short: "Print skewgate as a static pod for /etc/kubernetes/manifests",
		Long: `static-pod prints skewgate as a static pod, for operators who want its keys
to stay where kubeadm keeps them, readable only by what root on the node
starts: save it as /etc/kubernetes/manifests/skewgate.yaml on every
control-plane node (the kubelet starts it; deleting the file removes it;
editing it upgrades it). It is the DaemonSet's pod (deploy/kubernetes/base)
with a kubeconfig file instead of a ServiceAccount (docs/deploy.md: a
kubeadm user certificate for system:skewgate).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			for flag, v := range map[string]string{"--steer-address": steer, "--local-apiserver": local, "--secure-admin-address": secureAdmin} {
				if v != "" {
					s.Args = append(s.Args, flag+"="+v)
				}
			}
			return printStaticPod(c.OutOrStdout(), s)
		},
	}
	f := cmd.Flags()
	f.StringVar(&s.Image, "image", s.Image, "skewgate's image (default: "+kubernetes.DefaultRepository+" at this binary's version; make release renders the release's by digest)")
	f.StringVar(&s.PKIDir, "pki-dir", kubernetes.PKIDir, "kubeadm's certificate directory on the node")
	f.StringVar(&s.Kubeconfig, "kubeconfig", "/etc/kubernetes/skewgate.conf", "kubeconfig on the node skewgate reads the cluster with (a static pod has no ServiceAccount)")
	f.StringVar(&steer, "steer-address", "", "skewgate run --steer-address (default: its own default)")
	f.StringVar(&local, "local-apiserver", "", "skewgate run --local-apiserver (default: its own default, loopback on the port the apiserver's manifest names)")
	f.StringVar(&secureAdmin, "secure-admin-address", "", "skewgate run --secure-admin-address (default: $(NODE_IP):16444)")
	return cmd
}

func printStaticPod(w io.Writer, s kubernetes.StaticPod) error {
	pod, err := s.Pod()
	if err != nil {
		return err
	}
	out, err := yaml.Marshal(pod)
	if err != nil {
		return fmt.Errorf("encode static pod: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(out, &m); err != nil {
		return err
	}
	// What the API server fills in is not the operator's to write.
	delete(m, "status")
	delete(m["metadata"].(map[string]any), "creationTimestamp")
	if out, err = yaml.Marshal(m); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "# skewgate %s as a static pod: /etc/kubernetes/manifests/skewgate.yaml\n%s", buildVersion().Version, out)
	return err
}
