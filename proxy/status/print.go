package status

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skewgate/skewgate/proxy/admin"
)

// WriteJSON writes v indented, as `-o json` prints it.
func WriteJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// PrintStatus writes the cluster as tables: one row per node, then every
// apiserver as each node sees it, then what needs a look (errors,
// problems) and why windows are open. now makes times relative.
func PrintStatus(out io.Writer, c Cluster, now time.Time) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSKEWGATE\tMODE\tSTEERING\tWINDOW\tGRACE\tTARGETS\tSTEERED\tDIRECT\tAPISERVERS\tSTATUS")
	for _, n := range c.Nodes {
		if n.Error != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\terror\n", n.Node)
			continue
		}
		steered, direct := "-", "-"
		if n.Connections != nil {
			steered, direct = fmt.Sprint(n.Connections.Steered), fmt.Sprint(n.Connections.Direct)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, orDash(n.Version), modeCell(n), orDash(n.Steering),
			windowCell(n, now), graceCell(n.Grace, now), orDash(strings.Join(n.Targets, ",")), steered, direct, serversCell(n.Servers), health(n))
	}
	tw.Flush()
	printServers(out, c)
	printNotes(out, c)
}

// modeCell is the mode, marked when the cluster's switch chose it: an
// operator's write that moved every node.
func modeCell(n Node) string {
	if n.ModeFrom == admin.ModeFromSwitch {
		return n.Mode + " (switch)"
	}
	return orDash(n.Mode)
}

func windowCell(n Node, now time.Time) string {
	switch {
	case n.Window == nil:
		return "-"
	case !n.Window.Open:
		return "closed"
	case n.Window.Until == nil:
		return "open"
	}
	return "open, " + left(*n.Window.Until, now) + " left"
}

func graceCell(g *Grace, now time.Time) string {
	if g == nil {
		return "-"
	}
	s := fmt.Sprintf("%d types", g.Types)
	if g.Types == 1 {
		s = "1 type"
	}
	if g.Until != nil {
		s += ", " + left(*g.Until, now) + " left"
	}
	if g.Override != nil {
		s += " (override)"
	}
	return s
}

func serversCell(ss []Server) string {
	if len(ss) == 0 {
		return "-"
	}
	healthy, departed := 0, 0
	for _, s := range ss {
		switch s.State {
		case "healthy":
			healthy++
		case "departed":
			departed++
		}
	}
	s := fmt.Sprintf("%d/%d healthy", healthy, len(ss)-departed)
	if departed > 0 {
		s += fmt.Sprintf(", %d departed", departed)
	}
	return s
}

func health(n Node) string {
	switch {
	case n.Error != "":
		return "error"
	case len(n.Problems) > 0:
		return "degraded"
	}
	return "ok"
}

func left(t, now time.Time) string {
	return max(t.Sub(now).Round(time.Second), 0).String()
}

// printServers lists every apiserver as each node sees it: a peer one
// node cannot reach shows here, beside the nodes that can.
func printServers(out io.Writer, c Cluster) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tAPISERVER\tLOCAL\tSTATE\tVERSION\tLATENCY\tLAST ERROR")
	for _, n := range c.Nodes {
		for _, s := range n.Servers {
			fmt.Fprintf(tw, "%s\t%s\t%t\t%s\t%s\t%s\t%s\n", n.Node, s.ID, s.Local, s.State, orDash(s.Version),
				time.Duration(s.LatencyNanos).Round(10*time.Microsecond), orDash(s.LastError+s.DiscoveryError))
		}
	}
	tw.Flush()
}

// printNotes says why each node failed or is degraded, and why each open
// window is open.
func printNotes(out io.Writer, c Cluster) {
	var lines []string
	for _, n := range c.Nodes {
		if n.Error != "" {
			lines = append(lines, fmt.Sprintf("%s: error: %s", n.Node, n.Error))
		}
		for _, p := range n.Problems {
			lines = append(lines, fmt.Sprintf("%s: degraded: %s", n.Node, p))
		}
		if w := n.Window; w != nil && w.Open {
			until := ""
			if w.Until != nil {
				until = " until " + w.Until.UTC().Format(time.RFC3339) + " unless they differ again"
			}
			lines = append(lines, fmt.Sprintf("%s: window open%s: %s", n.Node, until, w.Reason))
		}
		if n.OffWaits != "" {
			lines = append(lines, fmt.Sprintf("%s: steering off waits: %s", n.Node, n.OffWaits))
		}
		if g := n.Grace; g != nil && g.Override != nil {
			lines = append(lines, fmt.Sprintf("%s: rollback grace override (kube-system/skewgate rollback-grace-until): %s", n.Node, g.Override.UTC().Format(time.RFC3339)))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(out)
	for _, l := range lines {
		fmt.Fprintln(out, l)
	}
}
