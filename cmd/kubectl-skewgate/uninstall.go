package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/skewgate/skewgate/proxy/removal"
)

const uninstallLong = `Run after kubectl delete -k deploy/kubernetes or helm uninstall: it leaves
nothing of skewgate on the control-plane nodes or in the cluster.

It refuses while the DaemonSet exists or a skewgate pod is not being deleted,
and waits for terminating ones. Then it starts a Job per control-plane node
(kube-system/skewgate-uninstall-<node>) running the image's own
"skewgate uninstall": steering and connstat detached, every pin under
--pin-path, the --state-file and its hand-over socket removed. It waits for
them, prints each node's log, deletes the switch ConfigMap kube-system/skewgate
and every Lease skewgate-upgrade-* in the namespaces skewgate and kube-system,
then the Jobs and their pods. Running it twice is harmless.

The image defaults to the one the terminating pods ran; once they are gone,
--image is required. The user needs (docs/security.md, "Who may uninstall"):
get the DaemonSet skewgate, list pods, get pods/log, create, get and delete
jobs in kube-system; list nodes; get the namespace skewgate; delete the
ConfigMap skewgate in kube-system; list and delete leases in kube-system, and
in skewgate while that namespace stays (kubectl delete -k and helm uninstall
delete it, and its leases with it). Creating that Job runs a privileged
container on every control-plane node: grant it to cluster admins only.`

func newUninstallCmd(o *options) *cobra.Command {
	ro := removal.Defaults()
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "After the DaemonSet is deleted: remove pins, state and hand-over socket on every control-plane node, the switch ConfigMap and the upgrade Leases",
		Long:  uninstallLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.loading, &o.overrides).ClientConfig()
			if err != nil {
				return fmt.Errorf("kubeconfig: %w", err)
			}
			cs, err := newClientset(rc)
			if err != nil {
				return err
			}
			ro.Namespace, ro.Selector = o.namespace, o.selector
			return removal.Uninstall(cmd.Context(), cs, ro, cmd.OutOrStdout())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&ro.Image, "image", "", "image to run skewgate uninstall with (default: the deleted DaemonSet's, while its pods terminate)")
	fs.StringVar(&ro.PinPath, "pin-path", ro.PinPath, "the DaemonSet's --pin-path on the nodes")
	fs.StringVar(&ro.StateFile, "state-file", ro.StateFile, "the DaemonSet's --state-file on the nodes")
	fs.DurationVar(&ro.Timeout, "timeout", ro.Timeout, "how long to wait for terminating pods, and for each Job")
	return cmd
}
