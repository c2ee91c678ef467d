package plan

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/mod/semver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skewgate/skewgate/proxy/admin"
)

// What a mixed fleet needs, checked across the nodes: one skewgate
// version (or two adjacent minors while skewgate itself rolls out,
// docs/versioning.md), hostPID on every skewgate pod, a kernel whose
// sockets the sweep can end, and a memory limit for the watches each
// node's apiserver carries (docs/deploy.md, "Resources").

// Sizing from docs/deploy.md's formula (make scale): RSS is 62 MiB idle
// and about 50 KiB more per watch; the soft limit (GOMEMLIMIT) is 3/4 of
// the container's, which should be twice the live memory; skewgate sheds
// (withdraws steering, failing open) at 90 % of the soft limit.
const (
	idleBytes     = 62 << 20
	perWatchBytes = 50 << 10
	softLimit     = 0.75
	shedAt        = 0.9
)

// apiserverWatches is kube-apiserver's gauge of open long-running requests,
// by verb.
const apiserverWatches = "apiserver_longrunning_requests"

// skewgateSelector finds skewgate's pods, the DaemonSet's and the static
// pod's mirror alike (deploy/kubernetes: app.kubernetes.io/name).
const skewgateSelector = "app.kubernetes.io/name=skewgate"

// checkVersions: every node's skewgate reports one version, or two of
// adjacent minors (a rollout of skewgate under way: finish it first).
func checkVersions(versions map[string]string) Check {
	const name = "skewgate versions"
	byVersion := map[string][]string{}
	for node, v := range versions {
		byVersion[v] = append(byVersion[v], node)
	}
	var list []string
	for v, nodes := range byVersion {
		sort.Strings(nodes)
		list = append(list, fmt.Sprintf("%s on %s", orDash(v), strings.Join(nodes, ", ")))
	}
	sort.Strings(list)
	summary := strings.Join(list, "; ")
	if unknown := byVersion[""]; len(unknown) > 0 {
		return Check{"cluster", name, Warn, summary + ": a skewgate that does not say its version is older than preflight knows"}
	}
	if len(byVersion) <= 1 {
		return Check{"cluster", name, OK, summary}
	}
	minors := map[string]bool{}
	for v := range byVersion {
		if !semver.IsValid(v) {
			return Check{"cluster", name, Warn, summary + ": " + v + " is not a release version; mixed builds are not a supported fleet"}
		}
		minors[semver.MajorMinor(v)] = true
	}
	if len(minors) == 1 || adjacent(minors) {
		return Check{"cluster", name, Warn, summary + ": a rollout of skewgate under way? Adjacent minors work together (docs/versioning.md); finish it before the upgrade"}
	}
	return Check{"cluster", name, Fail, summary + ": more than one minor apart, which no release promises to work together (docs/versioning.md): roll every node to one version first"}
}

// adjacent reports whether two minors of one major are one apart.
func adjacent(minors map[string]bool) bool {
	if len(minors) != 2 {
		return false
	}
	var mm []string
	for m := range minors {
		mm = append(mm, m)
	}
	semver.Sort(mm)
	var maj0, min0, maj1, min1 int
	fmt.Sscanf(mm[0], "v%d.%d", &maj0, &min0)
	fmt.Sscanf(mm[1], "v%d.%d", &maj1, &min1)
	return maj0 == maj1 && min1 == min0+1
}

// checkSweep: the node's kernel can end the quiet direct connections a
// window's sweep ends (agent.ProbeSweep); nil where steering is not
// configured.
func checkSweep(node string, st admin.SteeringView) *Check {
	const name = "sweep"
	switch {
	case st.Mode == "":
		return nil
	case st.Sweep == "ok":
		return &Check{node, name, OK, "the kernel ends quiet direct connections when a window opens (SOCK_DESTROY)"}
	case st.Sweep == "":
		return &Check{node, name, Warn, "this skewgate does not say whether its kernel can end sockets (older than preflight)"}
	}
	return &Check{node, name, Warn, st.Sweep}
}

// checkPods judges every skewgate pod: hostPID, and its memory limit
// against the watches its node's apiserver carries now (all of which a
// window moves through skewgate). One cluster check when there is none.
func checkPods(ctx context.Context, c *Cluster, o PreflightOptions) []Check {
	pods, err := c.Kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: skewgateSelector})
	if err != nil {
		return []Check{{"cluster", "skewgate pods", Warn, fmt.Sprintf("list pods %s in kube-system: %v: hostPID and memory not checked", skewgateSelector, err)}}
	}
	if len(pods.Items) == 0 {
		return []Check{{"cluster", "skewgate pods", Warn, "no pod " + skewgateSelector + " in kube-system (skewgate run outside Kubernetes?): hostPID and memory not checked"}}
	}
	apiservers := apiserverAddresses(ctx, c)
	watches := o.Watches
	if watches == nil {
		watches = func(ctx context.Context, a netip.AddrPort) (int, error) { return scrapeWatches(ctx, c.HTTP, a) }
	}
	var out []Check
	for _, p := range pods.Items {
		node := p.Spec.NodeName
		if node == "" {
			node = p.Namespace + "/" + p.Name
		}
		out = append(out, checkHostPID(node, &p))
		out = append(out, checkMemory(ctx, node, &p, apiservers[p.Spec.NodeName], watches))
	}
	return out
}

// checkHostPID: without hostPID connstat cannot tell skewgate's own
// connections from other processes', and a successor pod cannot read its
// predecessor's sockets, so it skips the sweep (docs/deploy.md).
func checkHostPID(node string, p *corev1.Pod) Check {
	if p.Spec.HostPID {
		return Check{node, "hostPID", OK, "pod " + p.Name + " shares the host's PID namespace"}
	}
	return Check{node, "hostPID", Warn, "pod " + p.Name + " has no hostPID: its successor in a rollout skips the sweep (it cannot read its predecessor's sockets), " +
		"and connstat counts every process's connections to apiservers as skewgate's (the manifests set hostPID: true)"}
}

// checkMemory judges p's memory limit against what the watches of its
// node's apiserver need through skewgate.
func checkMemory(ctx context.Context, node string, p *corev1.Pod, apiserver netip.AddrPort, watches func(context.Context, netip.AddrPort) (int, error)) Check {
	const name = "memory"
	var limit int64
	for _, ctr := range p.Spec.Containers {
		if ctr.Name == "skewgate" {
			limit = ctr.Resources.Limits.Memory().Value()
		}
	}
	if limit == 0 {
		return Check{node, name, Warn, "no memory limit on the skewgate container: its soft limit follows the node's allocatable memory, and nothing bounds it below the node's"}
	}
	if !apiserver.IsValid() {
		return Check{node, name, Warn, fmt.Sprintf("limit %s; no kube-apiserver mirror pod on %s to count its watches", mib(limit), node)}
	}
	n, err := watches(ctx, apiserver)
	if err != nil {
		return Check{node, name, Warn, fmt.Sprintf("limit %s; the watches of %s unknown: %v", mib(limit), apiserver, err)}
	}
	live := float64(idleBytes + n*perWatchBytes)
	want := live * 2 / softLimit
	why := fmt.Sprintf("limit %s; %s carries %d watches, which need about %s live through skewgate and a limit of %s (docs/deploy.md, \"Resources\")",
		mib(limit), apiserver, n, mib(int64(live)), mib(int64(want)))
	switch {
	case live > float64(limit)*softLimit*shedAt:
		return Check{node, name, Fail, why + ": skewgate would shed (withdraw steering, failing open) in the window, and this node's clients get its apiserver's false 404s"}
	case want > float64(limit):
		return Check{node, name, Warn, why + ": below twice the live memory, the GC runs hot and requests slow; raise limits.memory"}
	}
	return Check{node, name, OK, why}
}

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

// apiserverAddresses maps each node to its kube-apiserver's advertise
// address, from kubeadm's mirror pods.
func apiserverAddresses(ctx context.Context, c *Cluster) map[string]netip.AddrPort {
	out := map[string]netip.AddrPort{}
	pods, err := c.Kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "component=kube-apiserver"})
	if err != nil {
		return out
	}
	for _, p := range pods.Items {
		if a, err := netip.ParseAddrPort(p.Annotations[advertiseAnnotation]); err == nil && p.Spec.NodeName != "" {
			out[p.Spec.NodeName] = a
		}
	}
	return out
}

// scrapeWatches reads the apiserver at a's open watches from its /metrics
// (the operator's credentials: /metrics is a non-resource URL cluster
// admins may get).
func scrapeWatches(ctx context.Context, c *http.Client, a netip.AddrPort) (int, error) {
	body, _, err := get(ctx, c, "https://"+net.JoinHostPort(a.Addr().String(), fmt.Sprint(a.Port()))+"/metrics", http.Header{"Accept": {"text/plain;version=0.0.4"}})
	if err != nil {
		return 0, err
	}
	return watchesOf(body)
}

// watchesOf sums apiserver_longrunning_requests{verb="WATCH"} in a text
// exposition.
func watchesOf(body []byte) (int, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("parse metrics: %w", err)
	}
	fam := fams[apiserverWatches]
	if fam == nil {
		return 0, fmt.Errorf("no %s", apiserverWatches)
	}
	total := 0.0
	for _, m := range fam.GetMetric() {
		if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "verb" && l.GetValue() == "WATCH" }) {
			total += m.GetGauge().GetValue()
		}
	}
	return int(total), nil
}
