package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/skewgate/skewgate/proxy/status"
)

const rootLong = `Every control-plane node's skewgate at once: each pod of the skewgate
DaemonSet is reached on its node's IP at the port of its
--secure-admin-address, over HTTPS, with the kubeconfig's credentials; its
certificate (the apiserver's) is verified by the kubeconfig's CA and the
node's IP (kubeadm's apiserver certificate carries it), or the name given
with --node-tls-server-name. --insecure-skip-tls-verify on the command line
skips that verification; the kubeconfig's own setting does not.

No credential goes to a pod before it is proven skewgate's on a
control-plane node: controlled by the DaemonSet skewgate (by UID) or the
mirror pod of a static pod, on a node labelled
node-role.kubernetes.io/control-plane (which no kubelet may set on itself),
at one of that node's addresses, whose listener presents an apiserver's
certificate in the handshake (valid for kubernetes.default.svc, not a
node's: a kubelet's serving certificate does not pass); a row says why a
pod is refused. --insecure-skip-tls-verify skips the handshake's checks
too.

--through-apiserver reaches each proven pod's listener through the
apiserver instead (a bastion that reaches the apiserver and not the
nodes): a port-forward to the pod (pods/portforward), which arrives at
127.0.0.1 on its node (the DaemonSet's --secure-admin-loopback), with the
same TLS and the same proof inside it: the apiserver and the kubelet carry
only ciphertext, and the credentials leave only for a proven skewgate. It
is a flag, not a fallback: it needs create on pods/portforward in the
namespace, which reaches every loopback port of every host-network pod's
node there, so the operator chooses it; and a node that does not answer
directly is what this command reports, not something to route around
after a timeout per node.

The user needs get on /debug/routes, /debug/explain and /metrics
(ClusterRole skewgate-debug in deploy/kubernetes), list on pods and get on
the DaemonSet skewgate in its namespace, and get on nodes; with
--through-apiserver, create on pods/portforward in that namespace too.

Exit status: 0 every node answered and is well; 1 the pods could not be
listed or some node did not answer (a row says why); 2 the command line is
wrong; 3 every node answered and some are degraded: steering lapsed or
disabled by an error, its apiserver away, an apiserver it sees unhealthy or
whose discovery fails, or its metrics unreadable.`

// newClientset is the seam tests replace with a fake clientset.
var newClientset = func(rc *rest.Config) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(rc)
}

// options are the flags every subcommand shares.
type options struct {
	loading    *clientcmd.ClientConfigLoadingRules
	overrides  clientcmd.ConfigOverrides
	namespace  string
	selector   string
	port       int
	serverName string
	output     string
	through    bool
}

func (o *options) bind(fs *pflag.FlagSet) {
	o.loading = clientcmd.NewDefaultClientConfigLoadingRules()
	fs.StringVar(&o.loading.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "path to the kubeconfig file")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	// -n names the DaemonSet's namespace here, not the context's.
	names.ContextOverrideFlags.Namespace.LongName = ""
	clientcmd.BindOverrideFlags(&o.overrides, fs, names)
	fs.StringVarP(&o.namespace, "namespace", "n", status.DefaultNamespace, "namespace of the skewgate DaemonSet")
	fs.StringVarP(&o.selector, "selector", "l", status.DefaultSelector, "label selector of the skewgate pods")
	fs.IntVar(&o.port, "admin-port", 0, "port of every node's secure admin listener (default: the port of each pod's --secure-admin-address)")
	fs.StringVar(&o.serverName, "node-tls-server-name", "", "name to verify every node's certificate by (default: the node's IP)")
	fs.StringVarP(&o.output, "output", "o", "", "output format: json, or a table when empty")
	fs.BoolVar(&o.through, "through-apiserver", false, "reach every node's listener by a port-forward to its pod through the apiserver (needs create on pods/portforward), with the same TLS and proof inside it: for operators who reach the apiserver and not the nodes")
}

func (o *options) validate() error {
	switch {
	case o.output != "" && o.output != "json" && o.output != "table":
		return fmt.Errorf("--output %q: want json or table", o.output)
	case o.port < 0 || o.port > 65535:
		return fmt.Errorf("--admin-port %d: want a port", o.port)
	}
	return nil
}

// connect lists the skewgate pods with the kubeconfig and says how to
// reach them.
func (o *options) connect(ctx context.Context) ([]status.Target, status.Options, error) {
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.loading, &o.overrides).ClientConfig()
	if err != nil {
		return nil, status.Options{}, fmt.Errorf("kubeconfig: %w", err)
	}
	cs, err := newClientset(rc)
	if err != nil {
		return nil, status.Options{}, err
	}
	targets, err := status.Targets(ctx, cs, o.namespace, o.selector, o.port)
	if err != nil {
		return nil, status.Options{}, err
	}
	if len(targets) == 0 {
		return nil, status.Options{}, fmt.Errorf("no skewgate pods in %s match %s", o.namespace, o.selector)
	}
	so := status.Options{Config: rc, ServerName: o.serverName, Insecure: o.overrides.ClusterInfo.InsecureSkipTLSVerify, Timeout: rc.Timeout, ThroughAPIServer: o.through}
	return targets, so, nil
}

func (o *options) json() bool { return o.output == "json" }

func newRootCmd() *cobra.Command {
	o := &options{}
	root := &cobra.Command{
		Use:           "kubectl-skewgate",
		Short:         "Every control-plane node's skewgate at once: mode, window, grace, steering, connections, apiservers' health",
		Long:          rootLong,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl skewgate"},
		RunE:          func(cmd *cobra.Command, _ []string) error { return runStatus(cmd.Context(), cmd.OutOrStdout(), o) },
	}
	o.bind(root.PersistentFlags())
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := o.validate(); err != nil {
			return exitError{exitUsage, err}
		}
		return nil
	}
	root.AddCommand(newStatusCmd(o), newRoutesCmd(o), newExplainCmd(o), newUninstallCmd(o))
	root.CompletionOptions.DisableDefaultCmd = true
	usage(root)
	return root
}

// usage makes a wrong flag or argument count exit 2, as kubectl's do.
func usage(c *cobra.Command) {
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exitError{exitUsage, err} })
	if check := c.Args; check != nil {
		c.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return exitError{exitUsage, err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		usage(sub)
	}
}

// nodesFailed is the exit for nodes that did not answer, or nil.
func nodesFailed(what string, failed []string) error {
	if len(failed) == 0 {
		return nil
	}
	return exitError{exitFailed, fmt.Errorf("%s: no answer from %v", what, failed)}
}
