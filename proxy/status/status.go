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

// Cluster is every node's status.
type Cluster struct {
	Nodes []Node `json:"nodes"`
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
	return Cluster{Nodes: each(ctx, targets, o, nodeStatus, func(t Target, err error) Node {
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
	st := steeringExtra(v)
	n.Version, n.Mode, n.SteeringDetail, n.LocalAway = v.Version, st.str("mode"), st.str("steering"), st.str("localAway")
	n.Targets, n.Unsteered, n.OffWaits = st.list("targets"), st.list("unsteered"), st.str("offWaits")
	n.Window = v.Window
	if n.Window == nil && st.str("window") != "" {
		// A skewgate before /debug/routes had "window": its sentence.
		w := st.str("window")
		n.Window = &admin.WindowView{Open: strings.HasPrefix(w, "open"), Reason: w}
	}
	n.Steering, n.Connections = k.state, k.conns
	if n.Steering == "" && strings.HasPrefix(n.SteeringDetail, "disabled") {
		n.Steering = "disabled"
	}
	n.Grace = grace(v)
	for _, s := range v.Servers {
		n.Servers = append(n.Servers, server(s))
	}
	n.Problems = problems(n, v)
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

// extra is the agent's "steering" entry of /debug/routes
// (agent.Node.Status): strings by name.
type extra map[string]any

func steeringExtra(v admin.RoutesView) extra {
	m, _ := v.Extra["steering"].(map[string]any)
	return m
}

func (e extra) str(k string) string {
	s, _ := e[k].(string)
	return s
}

// list reads a list of addresses, as a JSON array or as Go prints a slice
// ("[198.18.0.1:6443 [fd00::1]:6443]").
func (e extra) list(k string) []string {
	switch v := e[k].(type) {
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, fmt.Sprint(x))
		}
		return out
	case string:
		s := strings.TrimSpace(v)
		if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
			s = s[1 : len(s)-1]
		}
		return strings.Fields(s)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
