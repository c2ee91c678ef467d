package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/drill"
)

func newDrillCmd() *cobra.Command {
	o := drill.Options{Dir: lab.DefaultDir(), CacheDir: lab.DefaultCacheDir(), Progress: os.Stdout, From: lab.OldVersion, To: lab.NewVersion}
	report, modes, fast, kubeadm := "", "", false, true
	cmd := &cobra.Command{
		Use:   "drill",
		Short: "Roll a three-node plane from one version to the next (--from, --to) and back under load, without skewgate, with the in-tree proxy and with skewgate, and report every false 404 (and, on kubeadm, what the controllers lost)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if modes != "" {
				o.Modes = strings.Split(modes, ",")
			}
			o.Kubeadm = kubeadm && !fast // --kubeadm=false, as older commands said it, is --fast
			if !o.Kubeadm && (o.Image != "" || o.ImageTag != "" || o.ControllerManagerLB) {
				return errors.New("--image, --tag and --controller-manager-lb are the kubeadm drill's: not with --fast")
			}
			if o.Prometheus == "" {
				o.Prometheus, _ = exec.LookPath("prometheus")
			}
			qs, err := drill.DashboardQueries()
			if err != nil {
				return err
			}
			o.Queries = qs
			o.Build = skewgateVersion(o)
			pair, err := drill.PairOf(o.From, o.To)
			if err != nil {
				return err
			}
			defReport, defImages := pair.Docs()
			if report == "" {
				report = defReport
			}
			if o.OutDir == "" {
				o.OutDir = defImages
			}
			// client-go's informers log every failed list: the report
			// counts them instead.
			klog.SetLogger(logr.Discard())
			return runDrill(cmd, o, report)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Dir, "dir", o.Dir, "lab state directory")
	f.StringVar(&o.From, "from", o.From, "the version the plane starts at and rolls back to")
	f.StringVar(&o.To, "to", o.To, "the version it is upgraded to (pairs: "+pairs()+")")
	f.StringVar(&o.CacheDir, "cache", o.CacheDir, "binary cache")
	f.StringVar(&o.Skewgate, "skewgate", "bin/skewgate", "skewgate binary for the skewgate mode")
	f.BoolVar(&o.Short, "short", false, "upgrade and roll back node-a only")
	f.StringVar(&modes, "modes", "", "comma-separated subset of: "+strings.Join(drill.AllModes, ",")+" (default: all; with --fast all but the last)")
	f.BoolVar(&fast, "fast", false, "the binary-swap drill: the lab's own processes, each apiserver's binary swapped in place, no kubeadm, kubelets or controllers (make upgrade-drill FAST=on); without it the drill runs on the kubeadm lab: kubeadm upgrade apply/node, kubelets, rollback from kubeadm's backups, skewgate as its DaemonSet")
	f.BoolVar(&kubeadm, "kubeadm", true, "the kubeadm drill, the default (kept for older commands; --kubeadm=false is --fast)")
	_ = f.MarkDeprecated("kubeadm", "the kubeadm drill is the default; --fast runs the binary-swap one")
	f.StringVar(&o.Image, "image", "", "skewgate's image archive (make image; not with --fast)")
	f.StringVar(&o.ImageTag, "tag", "", "that image's tag (make image's VERSION; not with --fast)")
	f.Float64Var(&o.GoawayChance, "goaway-chance", 0, "every apiserver's --goaway-chance (kube-apiserver takes 0 to 0.02; 0: unset, its default): a busy client's connection from before the window moves through skewgate only by the apiserver's GOAWAY, since the sweep ends only quiet ones")
	f.BoolVar(&o.ControllerManagerLB, "controller-manager-lb", false, "point every kube-controller-manager at an L4 load balancer over the nodes instead of its own node's address (the garbage collector's case; not with --fast)")
	f.DurationVar(&o.Settle, "settle", time.Minute, "how long the controllers may settle before what was lost is counted (not with --fast)")
	f.DurationVar(&o.HandBackWait, "hand-back-wait", 17*time.Minute, "mode '"+drill.ModeSkewgateAuto+"', not with --fast: how long the workload may run on after the last step for every node's steering to be released and handed back")
	f.Func("skewgate-arg", "a further flag of skewgate run for the skewgate modes, e.g. --skewgate-arg=--rollback-grace=0 (repeatable; the report names them)", func(v string) error {
		o.SkewgateArgs = append(o.SkewgateArgs, v)
		return nil
	})
	f.StringVar(&report, "report", report, "where the markdown report goes (default docs/upgrade-drill.md, for another pair than the default docs/upgrade-drill-<to's minor>.md)")
	f.StringVar(&o.OutDir, "images", "", "where the report's PNGs go (default docs/drill, for another pair docs/drill/<to's minor>)")
	f.StringVar(&o.Prometheus, "prometheus", "", "prometheus binary (default: from $PATH)")
	f.BoolVar(&o.KeepFailed, "keep-failed", false, "leave a failed mode's plane up, logs and node files included, and stop there (skewlab down --dir removes it)")
	f.BoolVar(&o.KeepLast, "keep-last", false, "leave the last mode's plane up even when it passes, logs and node files included (skewlab down --dir removes it)")
	return cmd
}

func runDrill(cmd *cobra.Command, o drill.Options, report string) error {
	// The drill's planes use the lab's namespaces and addresses: it waits
	// for any lab test (or other drill) to finish first.
	lock, err := lab.Lock()
	if err != nil {
		return err
	}
	defer lock.Close()
	results, err := drill.Run(cmd.Context(), o)
	if err != nil && len(results) == 0 {
		return err
	}
	return errors.Join(err, drill.WriteAll(report, o, results, rerun(o)))
}

// rerun is the command that runs the drill again as o asks, as its
// report names it.
func rerun(o drill.Options) string {
	modes := ""
	if len(o.Modes) > 0 {
		modes = strings.Join(o.Modes, ",")
	}
	if o.Short {
		cmd := "bin/skewlab drill --short --from " + o.From + " --to " + o.To
		if !o.Kubeadm {
			cmd += " --fast"
		}
		if o.ControllerManagerLB {
			cmd += " --controller-manager-lb"
		}
		if modes != "" {
			cmd += " --modes '" + modes + "'"
		}
		return cmd
	}
	command := "make upgrade-drill"
	if o.From != lab.OldVersion || o.To != lab.NewVersion {
		command += " FROM=" + o.From + " TO=" + o.To
	}
	if !o.Kubeadm {
		command += " FAST=on"
	}
	if o.ControllerManagerLB {
		command += " KCM_LB=on"
	}
	if modes != "" {
		command += " DRILL_MODES='" + modes + "'"
	}
	if o.GoawayChance > 0 {
		command += fmt.Sprintf(" GOAWAY_CHANCE=%g", o.GoawayChance)
	}
	return command
}

// pairs lists the upgrades the drill knows.
func pairs() string {
	var out []string
	for _, p := range drill.Pairs {
		out = append(out, p.String())
	}
	return strings.Join(out, ", ")
}

// skewgateVersion is the measured skewgate's version line (`skewgate
// version`; on kubeadm its image's tag), "" if it has none.
func skewgateVersion(o drill.Options) string {
	if o.Kubeadm {
		if o.ImageTag == "" {
			return ""
		}
		return "skewgate's image `" + o.ImageTag + "`"
	}
	out, err := exec.Command(o.Skewgate, "version").Output()
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return "`" + strings.TrimSpace(first) + "`"
}
