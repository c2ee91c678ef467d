// Package status reads every node's skewgate through its secure admin
// listener, as the operator (a kubeconfig's credentials), and tells the
// cluster's state at once: per node skewgate's version, steering mode and
// state, the skew window, the rollback grace, the steered addresses, the
// connections steered and those that went straight to the apiserver, and
// each apiserver's health as that node sees it. It is the client side of
// proxy/admin; it renders `skewgate routes` and `explain` too.
package status

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/membership"
)

// Layout is the layout of Cluster, `kubectl skewgate status -o json`'s
// document (docs/status.md): a field added keeps it, one renamed, removed
// or changed in meaning bumps it.
const Layout = 1

// Cluster is every node's status.
type Cluster struct {
	// Layout is Layout.
	Layout int    `json:"layout"`
	Nodes  []Node `json:"nodes"`
}

// Node is one skewgate's status. Error set means it did not answer and
// nothing else is known; Problems make it degraded.
type Node struct {
	Node     string   `json:"node"`
	Pod      string   `json:"pod"`
	URL      string   `json:"url,omitempty"`
	Error    string   `json:"error,omitempty"`
	Problems []string `json:"problems,omitempty"`
	// Version is skewgate's own.
	Version string `json:"version,omitempty"`
	// Mode is the steering mode in force (always, auto, off): the flag's
	// or the cluster's kube-system/skewgate.
	Mode string `json:"mode,omitempty"`
	// ModeFrom is who chose it: switch (the cluster's kube-system/skewgate)
	// or flag (--steering-mode, the switch unset).
	ModeFrom string `json:"modeFrom,omitempty"`
	// Steering is the state (steering, standby, off, lapsed, disabled);
	// SteeringDetail says why, as the agent does.
	Steering       string            `json:"steering,omitempty"`
	SteeringDetail string            `json:"steeringDetail,omitempty"`
	Window         *admin.WindowView `json:"window,omitempty"`
	// LocalAway says why the node's own apiserver is out of routing.
	LocalAway string `json:"localAway,omitempty"`
	// OffWaits says why a steering mode of off waits: a rollback grace
	// holds a type, and the node keeps steering until it ends.
	OffWaits string `json:"offWaits,omitempty"`
	Grace    *Grace `json:"grace,omitempty"`
	// Targets are the steered addresses.
	Targets []string `json:"targets,omitempty"`
	// Unsteered are addresses the node's apiserver serves that skewgate
	// does not steer: their clients bypass it.
	Unsteered   []string     `json:"unsteered,omitempty"`
	Connections *Connections `json:"connections,omitempty"`
	Servers     []Server     `json:"servers,omitempty"`
}

// Grace is the rollback grace on a node: how many types answer 503 rather
// than 404, until when the last of them does, and the cluster's override.
type Grace struct {
	Types    int        `json:"types"`
	Until    *time.Time `json:"until,omitempty"`
	Override *time.Time `json:"override,omitempty"`
}

// Connections count new connections to the steered addresses since the
// node's pins were created, by the kernel's sk_lookup decision.
type Connections struct {
	Steered uint64 `json:"steered"`
	// Direct went to the apiserver itself: steering off, standby (lease
	// expired), exempt source, no proxy socket, assign error.
	Direct   uint64            `json:"direct"`
	ByReason map[string]uint64 `json:"byReason,omitempty"`
}

// Server is one apiserver as a node's skewgate sees it.
type Server struct {
	ID    string `json:"id"`
	Local bool   `json:"local,omitempty"`
	// State is healthy, unhealthy or departed.
	State          string     `json:"state"`
	Departed       *time.Time `json:"departed,omitempty"`
	Version        string     `json:"version,omitempty"`
	LatencyNanos   int64      `json:"latencyNanos,omitempty"`
	LastError      string     `json:"lastError,omitempty"`
	DiscoveryError string     `json:"discoveryError,omitempty"`
}

// Failed lists the nodes that did not answer.
func (c Cluster) Failed() []string {
	var out []string
	for _, n := range c.Nodes {
		if n.Error != "" {
			out = append(out, n.Node)
		}
	}
	return out
}

// Degraded lists the nodes that answered with problems.
func (c Cluster) Degraded() []string {
	var out []string
	for _, n := range c.Nodes {
		if n.Error == "" && len(n.Problems) > 0 {
			out = append(out, n.Node)
		}
	}
	return out
}

// Gather asks every target for its status.
func Gather(ctx context.Context, targets []Target, o Options) Cluster {
	return Cluster{Layout: Layout, Nodes: each(ctx, targets, o, nodeStatus, func(t Target, err error) Node {
		return Node{Node: t.Node, Pod: t.Pod, URL: t.URL, Error: err.Error()}
	})}
}

// nodeStatus reads /debug/routes, which must answer, and /metrics, whose
// absence (RBAC, say) leaves the kernel's side unknown: a problem.
func nodeStatus(ctx context.Context, c *http.Client, t Target) Node {
	n := Node{Node: t.Node, Pod: t.Pod, URL: t.URL}
	var v admin.RoutesView
	if err := Get(ctx, c, t.URL+"/debug/routes", &v); err != nil {
		n.Error = err.Error()
		return n
	}
	k, err := readMetrics(ctx, c, t.URL)
	n.fill(v, k)
	if err != nil {
		n.Problems = append(n.Problems, "no metrics: "+err.Error())
	}
	return n
}

// fill sets what the node said, and the problems it makes.
func (n *Node) fill(v admin.RoutesView, k kernel) {
	n.Version, n.Window = v.Version, v.Window
	switch st := v.Steering; {
	case st == nil:
		n.Problems = append(n.Problems, "its /debug/routes has no steering view: a skewgate older than this plugin (before v0.2)")
	case st.Layout != admin.SteeringLayout:
		n.Problems = append(n.Problems, fmt.Sprintf("its steering view has layout %d, this plugin reads %d: use the plugin of that skewgate's release", st.Layout, admin.SteeringLayout))
	default:
		n.Mode, n.ModeFrom, n.SteeringDetail, n.LocalAway = st.Mode, st.ModeFrom, st.State, st.LocalAway
		n.Targets, n.Unsteered, n.OffWaits = st.Targets, st.Unsteered, st.OffWaits
	}
	n.Steering, n.Connections = k.state, k.conns
	if n.Steering == "" && strings.HasPrefix(n.SteeringDetail, "disabled") {
		n.Steering = "disabled"
	}
	n.Grace = grace(v)
	for _, s := range v.Servers {
		n.Servers = append(n.Servers, server(s))
	}
	n.Problems = append(n.Problems, problems(n, v)...)
}

func grace(v admin.RoutesView) *Grace {
	if len(v.Grace) == 0 && v.GraceOverride == nil {
		return nil
	}
	g := &Grace{Types: len(v.Grace), Override: v.GraceOverride}
	for _, t := range v.Grace {
		if g.Until == nil || t.Until.After(*g.Until) {
			u := t.Until
			g.Until = &u
		}
	}
	return g
}

func server(s admin.ServerView) Server {
	return Server{ID: s.ID, Local: s.Local, State: serverState(s.Status), Departed: s.Departed, Version: s.Version,
		LatencyNanos: int64(s.Latency), LastError: s.LastError, DiscoveryError: s.DiscoveryError}
}

func serverState(st membership.Status) string {
	switch {
	case st.Departed != nil:
		return "departed"
	case st.Healthy:
		return "healthy"
	}
	return "unhealthy"
}

// problems are what an operator must look at: steering that failed
// (lapsed, or disabled by an error rather than --steering=false), the
// local apiserver away, a present apiserver unhealthy, a discovery that
// fails. A departed apiserver is none: an upgrade replaces servers, and
// the rollback grace covers what they served.
func problems(n *Node, v admin.RoutesView) []string {
	var out []string
	switch {
	case n.Steering == "lapsed":
		out = append(out, n.SteeringDetail)
	case n.Steering == "disabled" && !strings.Contains(n.SteeringDetail, "--steering=false"):
		out = append(out, n.SteeringDetail)
	}
	if n.LocalAway != "" {
		out = append(out, n.LocalAway)
	}
	if len(n.Unsteered) > 0 {
		out = append(out, fmt.Sprintf("the apiserver serves %s, which skewgate does not steer: clients there bypass it (--steer-address leaves them out, or more than 64 addresses)",
			strings.Join(n.Unsteered, ", ")))
	}
	for _, s := range v.Servers {
		switch {
		case s.Departed == nil && !s.Healthy:
			p := "apiserver " + s.ID + " unhealthy"
			if s.LastError != "" {
				p += ": " + s.LastError
			}
			out = append(out, p)
		case s.DiscoveryError != "":
			out = append(out, fmt.Sprintf("apiserver %s discovery: %s", s.ID, s.DiscoveryError))
		}
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
