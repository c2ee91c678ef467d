package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/membership"
)

// Result is a check's verdict.
type Result string

const (
	OK   Result = "ok"
	Warn Result = "warn"
	Fail Result = "fail"
)

// Check is one verdict, on one node or on the cluster ("cluster").
type Check struct {
	Node   string `json:"node"`
	Name   string `json:"check"`
	Result Result `json:"result"`
	Reason string `json:"reason"`
}

// Failed reports whether any check failed.
func Failed(checks []Check) bool {
	return slices.ContainsFunc(checks, func(c Check) bool { return c.Result == Fail })
}

// PreflightOptions say where to look besides the cluster.
type PreflightOptions struct {
	// AdminURLs replace the admin listeners derived from the advertised
	// addresses and AdminPort.
	AdminURLs []string
	AdminPort int
	// Prometheus is a Prometheus base URL; "" checks for a ServiceMonitor
	// only. PrometheusClient reaches it (http.DefaultClient when nil).
	Prometheus       string
	PrometheusClient *http.Client
	// LookupHost resolves a controlPlaneEndpoint that is a name
	// (net.DefaultResolver.LookupHost when nil).
	LookupHost func(ctx context.Context, host string) ([]string, error)
	// Watches counts the watches the apiserver at an advertise address
	// carries (its /metrics through the cluster's client when nil).
	Watches func(ctx context.Context, apiserver netip.AddrPort) (int, error)
}

// Preflight checks every control-plane node's skewgate before an upgrade:
// it answers, steering is installed and would steer, its targets cover
// the node's advertise address (and the control-plane endpoint is
// covered), its state file is written, its mode, its kernel can sweep;
// what the fleet needs (fleet.go): one skewgate version, hostPID, memory
// for each node's watches; that every apiserver sends GOAWAYs
// (--goaway-chance, see checkGoaway); and that Prometheus scrapes
// skewgate. It fails only if the cluster's members cannot be listed; each
// other problem is a check's verdict.
func Preflight(ctx context.Context, c *Cluster, o PreflightOptions) ([]Check, error) {
	advertised, err := AdvertiseAddresses(ctx, c)
	if err != nil {
		return nil, err
	}
	var checks []Check
	if len(advertised) == 0 {
		checks = append(checks, Check{"cluster", "members", Fail, "default/kubernetes lists no apiserver"})
	}
	var targets []netip.AddrPort // every node's, for the endpoint check
	versions := map[string]string{}
	nodes := Nodes(advertised, o.AdminURLs, o.AdminPort)
	for _, n := range nodes {
		cs, ts, v, ok := checkNode(ctx, c, n, advertised)
		checks = append(checks, cs...)
		targets = append(targets, ts...)
		if ok {
			versions[n.Name()] = v
		}
	}
	if len(versions) > 0 {
		checks = append(checks, checkVersions(versions))
	}
	checks = append(checks, checkPods(ctx, c, o)...)
	checks = append(checks, checkEndpoint(ctx, c, o, advertised, targets))
	checks = append(checks, checkGoaway(ctx, c)...)
	return append(checks, checkPrometheus(ctx, c, o, len(nodes))), nil
}

// checkNode reads the node's /debug/routes and judges it; it returns the
// addresses the node steers and its skewgate's version (ok: it answered).
func checkNode(ctx context.Context, c *Cluster, n Node, advertised []netip.AddrPort) ([]Check, []netip.AddrPort, string, bool) {
	name := n.Name()
	body, _, err := get(ctx, c.Admin, n.Admin+"/debug/routes", nil)
	var v admin.RoutesView
	if err == nil {
		err = json.Unmarshal(body, &v)
	}
	if err != nil {
		return []Check{{name, "skewgate", Fail, fmt.Sprintf("cannot read its /debug/routes: %v: nothing keeps this node's clients from false 404s", err)}}, nil, "", false
	}
	st := steeringOf(v)
	targets := parseTargets(st.Targets)
	checks := []Check{
		checkMembers(name, v),
		checkSteering(name, st),
		checkMode(name, st, v.Window),
		checkTargets(name, n, st, targets, parseTargets(st.Unsteered), advertised),
		checkStateFile(name, v.StateFile),
	}
	if c := checkSweep(name, st); c != nil {
		checks = append(checks, *c)
	}
	return checks, targets, v.Version, true
}

// steeringOf is the kernel side's status under /debug/routes (empty from
// a skewgate without steering, or from one before the typed view).
func steeringOf(v admin.RoutesView) admin.SteeringView {
	if v.Steering == nil {
		return admin.SteeringView{}
	}
	return *v.Steering
}

// parseTargets reads host:port addresses; what does not parse is left out.
func parseTargets(list []string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, f := range list {
		if ap, err := netip.ParseAddrPort(f); err == nil {
			out = append(out, ap)
		}
	}
	return out
}

func checkMembers(node string, v admin.RoutesView) Check {
	var bad, versions []string
	for _, s := range v.Servers {
		switch {
		case s.Departed != nil:
			bad = append(bad, s.ID+" departed")
		case !s.Healthy:
			bad = append(bad, s.ID+" unhealthy: "+s.LastError)
		case s.DiscoveryError != "":
			bad = append(bad, s.ID+" discovery: "+s.DiscoveryError)
		}
		if s.Version != "" && !slices.Contains(versions, s.Version) {
			versions = append(versions, s.Version)
		}
	}
	if len(bad) > 0 {
		return Check{node, "apiservers", Warn, strings.Join(bad, "; ")}
	}
	why := fmt.Sprintf("%d apiservers healthy, versions %s", len(v.Servers), strings.Join(versions, ", "))
	if len(versions) > 1 {
		return Check{node, "apiservers", Warn, why + ": the versions already differ (an upgrade or rollback under way?)"}
	}
	return Check{node, "apiservers", OK, why}
}

func checkSteering(node string, st admin.SteeringView) Check {
	s := st.State
	switch {
	case s == "":
		return Check{node, "steering", Fail, "its status has no steering state"}
	case strings.Contains(s, "--steering=false"):
		return Check{node, "steering", Warn, "not installed (--steering=false): only clients sent to skewgate's listener directly (a load balancer) are protected"}
	case strings.HasPrefix(s, "steering disabled"), strings.HasPrefix(s, "steering lapsed"):
		return Check{node, "steering", Fail, s + ": new connections reach the apiserver directly"}
	case strings.HasPrefix(s, "steering off"):
		return Check{node, "steering", Warn, s + ": it will not steer in the upgrade; `skewgate steer on` on the node, and the cluster switch (kube-system/skewgate steering) not off"}
	case strings.HasPrefix(s, "steering standby"), strings.HasPrefix(s, "steering on"):
		return Check{node, "steering", OK, s}
	}
	return Check{node, "steering", Fail, s}
}

func checkMode(node string, st admin.SteeringView, w *admin.WindowView) Check {
	mode := st.Mode
	switch mode {
	case "":
		return Check{node, "mode", Warn, "no steering mode (steering not installed)"}
	case "off":
		return Check{node, "mode", Warn, "mode off: skewgate never steers, so it protects nobody in the upgrade"}
	}
	if w != nil && w.Open {
		return Check{node, "mode", Warn, fmt.Sprintf("mode %s; a window is already open: %s", mode, w.Reason)}
	}
	window := "-"
	if w != nil {
		window = "closed"
	}
	return Check{node, "mode", OK, fmt.Sprintf("mode %s; window %s", mode, window)}
}

// checkTargets: the node steers its advertise address, and every other
// address its apiserver serves (a VIP on lo or on another interface, a
// second NIC's): clients of one it serves and skewgate does not steer get
// the apiserver's false 404s in the upgrade.
func checkTargets(node string, n Node, st admin.SteeringView, targets, unsteered, advertised []netip.AddrPort) Check {
	if len(targets) == 0 {
		return Check{node, "targets", Warn, "steers no address (" + orDash(st.State) + ")"}
	}
	missed := ""
	if len(unsteered) > 0 {
		missed = fmt.Sprintf("; its apiserver also serves %v, which skewgate does not steer: clients there bypass it and get its false 404s "+
			"(drop --steer-address to steer every address the apiserver serves)", unsteered)
	}
	result := OK
	if missed != "" {
		result = Warn
	}
	if n.Address.IsValid() {
		if slices.Contains(targets, n.Address) {
			return Check{node, "targets", result, fmt.Sprintf("steers its advertise address %s (all: %v)%s", n.Address, targets, missed)}
		}
		return Check{node, "targets", Fail, fmt.Sprintf("does not steer its advertise address %s: its clients get its apiserver's false 404s; steered: %v%s", n.Address, targets, missed)}
	}
	for _, a := range advertised {
		if slices.Contains(targets, a) {
			return Check{node, "targets", result, fmt.Sprintf("steers the advertise address %s (all: %v)%s", a, targets, missed)}
		}
	}
	return Check{node, "targets", Fail, fmt.Sprintf("steers no advertised address %v; steered: %v%s", advertised, targets, missed)}
}

func checkStateFile(node string, sf *membership.StateFileStatus) Check {
	switch {
	case sf == nil:
		return Check{node, "state file", Warn, "none (--state-file=\"\"): a restart of skewgate forgets departed peers and ends the rollback grace"}
	case sf.Error != "":
		return Check{node, "state file", Fail, fmt.Sprintf("%s: last write failed: %s: a restart of skewgate would lose the rollback grace", sf.Path, sf.Error)}
	case sf.Saved.IsZero():
		return Check{node, "state file", Warn, sf.Path + ": not written yet (it is, within 10 s of a start, once a server is known)"}
	}
	return Check{node, "state file", OK, fmt.Sprintf("%s written %s ago", sf.Path, time.Since(sf.Saved).Round(time.Second))}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// checkEndpoint judges kubeadm's controlPlaneEndpoint (the VIP or load
// balancer clients use): steered when a node holds it, or a load balancer
// on another port in front of the steered advertise addresses.
func checkEndpoint(ctx context.Context, c *Cluster, o PreflightOptions, advertised, targets []netip.AddrPort) Check {
	const name = "control-plane endpoint"
	cm, err := c.Kube.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeadm-config", metav1.GetOptions{})
	if err != nil {
		return Check{"cluster", name, Warn, fmt.Sprintf("kube-system/kubeadm-config: %v", err)}
	}
	var cc struct {
		ControlPlaneEndpoint string `json:"controlPlaneEndpoint"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["ClusterConfiguration"]), &cc); err != nil {
		return Check{"cluster", name, Warn, fmt.Sprintf("kubeadm-config ClusterConfiguration: %v", err)}
	}
	ep := cc.ControlPlaneEndpoint
	if ep == "" {
		return Check{"cluster", name, OK, "none set: clients reach the nodes' advertise addresses"}
	}
	host, portStr, err := net.SplitHostPort(ep)
	if err != nil {
		host, portStr = ep, "6443"
	}
	port, _ := strconv.ParseUint(portStr, 10, 16)
	addrs := []string{host}
	if _, err := netip.ParseAddr(host); err != nil {
		lookup := o.LookupHost
		if lookup == nil {
			lookup = net.DefaultResolver.LookupHost
		}
		if addrs, err = lookup(ctx, host); err != nil {
			return Check{"cluster", name, Warn, fmt.Sprintf("%s: %v", ep, err)}
		}
	}
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err == nil && slices.Contains(targets, netip.AddrPortFrom(ip, uint16(port))) {
			return Check{"cluster", name, OK, fmt.Sprintf("%s (%s) is steered by the node that holds it", ep, a)}
		}
	}
	if !slices.ContainsFunc(advertised, func(a netip.AddrPort) bool { return a.Port() == uint16(port) }) {
		return Check{"cluster", name, OK, fmt.Sprintf("%s is a load balancer on another port than the apiservers': it reaches the nodes' advertise addresses, which are steered", ep)}
	}
	return Check{"cluster", name, Warn, fmt.Sprintf("%s (%s) is in no node's steered targets: fine for a load balancer in front of the advertise addresses; a VIP a node holds must be steered too (--steer-address, or the default that follows the node IP's interface)", ep, strings.Join(addrs, ", "))}
}

var serviceMonitorsGVR = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}

// checkPrometheus: a ServiceMonitor for skewgate exists, and with a
// Prometheus URL every node's skewgate target is up.
func checkPrometheus(ctx context.Context, c *Cluster, o PreflightOptions, nodes int) Check {
	monitor := ""
	list, err := c.Dynamic.Resource(serviceMonitorsGVR).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return Check{"cluster", "prometheus", Warn, fmt.Sprintf("list ServiceMonitors: %v", err)}
	default:
		for _, m := range list.Items {
			if strings.Contains(m.GetName(), "skewgate") || m.GetLabels()["app.kubernetes.io/name"] == "skewgate" {
				monitor = m.GetNamespace() + "/" + m.GetName()
			}
		}
	}
	if o.Prometheus == "" {
		if monitor == "" {
			return Check{"cluster", "prometheus", Warn, "no ServiceMonitor for skewgate, and no --prometheus to ask: its alerts cannot fire in the upgrade"}
		}
		return Check{"cluster", "prometheus", OK, "ServiceMonitor " + monitor + " (scraping not verified: --prometheus asks up{job=~\".*skewgate.*\"})"}
	}
	pc := o.PrometheusClient
	if pc == nil {
		pc = http.DefaultClient
	}
	return checkUp(ctx, pc, o.Prometheus, nodes)
}

func checkUp(ctx context.Context, c *http.Client, base string, nodes int) Check {
	const q = `up{job=~".*skewgate.*"}`
	samples, err := promQuery(ctx, c, base, q)
	if err != nil {
		return Check{"cluster", "prometheus", Fail, err.Error()}
	}
	var up, down []string
	for _, s := range samples {
		if s.Value == 1 {
			up = append(up, s.Metric["instance"])
		} else {
			down = append(down, s.Metric["instance"])
		}
	}
	switch {
	case len(samples) == 0:
		return Check{"cluster", "prometheus", Fail, q + " has no series: Prometheus does not scrape skewgate"}
	case len(down) > 0:
		return Check{"cluster", "prometheus", Fail, fmt.Sprintf("%s: down %v, up %v", q, down, up)}
	case len(up) < nodes:
		return Check{"cluster", "prometheus", Warn, fmt.Sprintf("%s: %d targets up (%s) for %d control-plane nodes", q, len(up), strings.Join(up, ", "), nodes)}
	}
	return Check{"cluster", "prometheus", OK, fmt.Sprintf("%s: %d targets up (%s)", q, len(up), strings.Join(up, ", "))}
}
