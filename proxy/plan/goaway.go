package plan

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AdvisedGoawayChance is the kube-apiserver --goaway-chance preflight
// advises for an upgrade window: the most kube-apiserver accepts.
const AdvisedGoawayChance = 0.02

// advertiseAnnotation is where kubeadm records an apiserver's advertise
// address and port on its static pod.
const advertiseAnnotation = "kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint"

// goawayAdvice says why the chance matters and what it costs.
const goawayAdvice = "skewgate's sweep ends only connections whose client has been quiet past the request timeout, " +
	"so a busy client's connection from before the window stays on this apiserver, and gets its false 404s, until the apiserver sends it a GOAWAY; " +
	"set --goaway-chance=0.02 for the upgrade window (each HTTP/2 client then reconnects about once per 50 requests, with a TLS handshake), " +
	"or arm the cluster (steering: always) before the upgrade"

// checkGoaway reads every kube-apiserver's --goaway-chance from its mirror
// pod in kube-system (kubeadm's static pod, label component=kube-apiserver)
// and warns where it is unset: one check per apiserver, named by its
// advertise address, or one for the cluster when no mirror pod is found.
func checkGoaway(ctx context.Context, c *Cluster) []Check {
	const name = "goaway-chance"
	pods, err := c.Kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "component=kube-apiserver"})
	if err != nil {
		return []Check{{"cluster", name, Warn, fmt.Sprintf("list kube-apiserver pods in kube-system: %v: cannot tell whether --goaway-chance is set; %s", err, goawayAdvice)}}
	}
	if len(pods.Items) == 0 {
		return []Check{{"cluster", name, Warn, "no kube-apiserver mirror pod in kube-system (not kubeadm's static pods?): cannot tell whether --goaway-chance is set; " + goawayAdvice}}
	}
	var out []Check
	for _, p := range pods.Items {
		out = append(out, goawayOf(&p))
	}
	return out
}

// goawayOf judges one apiserver's pod.
func goawayOf(p *corev1.Pod) Check {
	const name = "goaway-chance"
	node := p.Status.PodIP
	if host, _, err := net.SplitHostPort(p.Annotations[advertiseAnnotation]); err == nil {
		node = host
	}
	if node == "" {
		node = p.Namespace + "/" + p.Name
	}
	v, ok := podFlag(p, "kube-apiserver", "goaway-chance")
	if !ok {
		return Check{node, name, Warn, "kube-apiserver --goaway-chance is not set: " + goawayAdvice}
	}
	chance, err := strconv.ParseFloat(v, 64)
	switch {
	case err != nil:
		return Check{node, name, Warn, fmt.Sprintf("kube-apiserver --goaway-chance=%q is not a number: %s", v, goawayAdvice)}
	case chance <= 0:
		return Check{node, name, Warn, fmt.Sprintf("kube-apiserver --goaway-chance=%s: %s", v, goawayAdvice)}
	}
	return Check{node, name, OK, fmt.Sprintf("kube-apiserver --goaway-chance=%s: a busy client's connection from before the window moves through skewgate after about %.0f requests", v, 1/chance)}
}

// podFlag is the value of --flag in the command and args of container
// (name) of p, "--flag=value" or "--flag value", the last one winning as
// pflag has it.
func podFlag(p *corev1.Pod, container, flag string) (string, bool) {
	for _, c := range p.Spec.Containers {
		if c.Name != container {
			continue
		}
		args := append(append([]string(nil), c.Command...), c.Args...)
		v, found := "", false
		for i, a := range args {
			if val, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
				v, found = val, true
			} else if a == "--"+flag && i+1 < len(args) {
				v, found = args[i+1], true
			}
		}
		return v, found
	}
	return "", false
}
