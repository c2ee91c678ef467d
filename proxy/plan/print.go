package plan

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the plan for people.
func (p *RollbackPlan) WriteTable(out io.Writer) {
	fmt.Fprintf(out, "Rollback to %s (built-in types recorded from %s: %s; a type it serves only with other --runtime-config or feature gates shows as lacking)\ncluster types read from %s\nrequests: %s\n\n",
		p.To, p.TargetFrom, p.TargetRun, p.Discovery, p.Usage)
	if len(p.Lacking) == 0 {
		fmt.Fprintf(out, "%s serves every built-in type the cluster serves now: the rollback takes no type away.\n", p.To)
	} else {
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TYPE THE TARGET LACKS\tOBJECTS\tNAMESPACES\tTARGET SERVES IT AS\tREQUESTS")
		for _, lt := range p.Lacking {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", lt.Resource, objects(lt), namespaces(lt), orDash(strings.Join(lt.TargetVersions, ",")), requests(lt.Requests))
		}
		tw.Flush()
		fmt.Fprintln(out, "\nA type the target serves in no version: its objects stay in etcd, unreachable, until an upgrade serves it again;\nits clients get 503 during the rollback grace, then 404.")
	}
	if len(p.Namespaces) == 0 {
		fmt.Fprintln(out, "\nno namespace at risk, none Terminating")
		return
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tOBJECTS\tHOLDS\tRISK")
	for _, r := range p.Namespaces {
		risk := r.Risk
		if len(r.Conditions) > 0 {
			risk += " [" + strings.Join(r.Conditions, "; ") + "]"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", r.Name, r.Objects, orDash(strings.Join(r.Holds, ",")), risk)
	}
	tw.Flush()
}

func objects(lt LackingType) string {
	if lt.Objects == nil {
		return "unknown (" + lt.Error + ")"
	}
	return strconv.Itoa(*lt.Objects)
}

func namespaces(lt LackingType) string {
	if !lt.Namespaced {
		return "(cluster-scoped)"
	}
	var out []string
	for _, n := range lt.Namespaces {
		out = append(out, fmt.Sprintf("%s(%d)", n.Name, n.Objects))
	}
	return orDash(strings.Join(out, ","))
}

// requests prints "unknown", "none", or "list=12 watch=3".
func requests(r map[string]float64) string {
	if r == nil {
		return "unknown"
	}
	var out []string
	for _, verb := range slices.Sorted(maps.Keys(r)) {
		if r[verb] > 0 {
			out = append(out, verb+"="+strconv.FormatFloat(r[verb], 'g', 4, 64))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}

// WriteChecks prints one line per check, the verdict first.
func WriteChecks(out io.Writer, checks []Check) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESULT\tNODE\tCHECK\tREASON")
	for _, c := range checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Result, c.Node, c.Name, c.Reason)
	}
	tw.Flush()
}
