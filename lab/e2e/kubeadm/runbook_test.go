package kubeadm

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/labtest"
)

// The runbook (docs/runbook.md) is run as written: each of its sh blocks
// in a root shell on a node (its /etc/kubernetes, admin.conf as
// KUBECONFIG, kubectl, skewgate and kubectl-skewgate on PATH), by
// TestKubeadm at the point of the upgrade the page puts it, or by the lab
// where the lab plays the part (runbookPlayedByLab). A block added to the
// page and run nowhere fails TestRunbookIsRun.

// runbookRunHere counts the blocks of each step TestKubeadm runs.
var runbookRunHere = map[string]int{
	"0": 2, // preflight (daemonset), rollback-plan (skew)
	"1": 1, // arm (daemonset, rollback)
	"6": 2, // steer off on one node, steering off on every node (skew; the latter inside the grace too, where it waits)
	"7": 1, // the rollback of node-a (rollback: Plane.KubeadmRollback runs it)
	"8": 2, // end the grace (rollback, after the eject inside it, as step 6 orders), disarm (rollback)
}

// runbookPlayedByLab are the blocks the lab plays rather than runs,
// and where.
var runbookPlayedByLab = map[string]string{
	"4": "the kubelet package and systemd: lab.Plane.SetKubelet (the kubeadm drill), no systemd in the lab",
}

func TestRunbookIsRun(t *testing.T) {
	for step, blocks := range lab.RunbookSteps() {
		if _, ok := runbookPlayedByLab[step]; ok {
			continue
		}
		if n := runbookRunHere[step]; n != len(blocks) {
			t.Errorf("runbook step %s has %d sh blocks, TestKubeadm runs %d: run the new one where the upgrade reaches it", step, len(blocks), n)
		}
	}
}

// tools is the directory of the commands the runbook calls besides the
// node's own: kubectl, skewgate, kubectl-skewgate.
var tools string

func runbookTools(ctx context.Context, dir string) error {
	tools = filepath.Join(dir, "runbook-bin")
	if err := os.MkdirAll(tools, 0o755); err != nil {
		return err
	}
	kubectl, err := plane.Kubectl(ctx)
	if err != nil {
		return err
	}
	if err := os.Symlink(kubectl, filepath.Join(tools, "kubectl")); err != nil {
		return err
	}
	if err := os.Symlink(skewgateBin, filepath.Join(tools, "skewgate")); err != nil {
		return err
	}
	_, err = labtest.BuildCommand(ctx, tools, "kubectl-skewgate")
	return err
}

// runbook runs block i of the runbook's step on node n and returns what
// it printed.
func runbook(t *testing.T, n lab.Node, step string, i int) string {
	t.Helper()
	return shell(t, n, lab.RunbookStep(step)[i])
}

// shell runs script on node n as the runbook's commands run.
func shell(t *testing.T, n lab.Node, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := plane.NodeShell(ctx, n.Name, script, tools)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("on %s:\n%s%s", n.Name, indent("$ ", script), indent("  ", out))
	return out
}

func indent(prefix, s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix) + "\n"
}

// rollback is the runbook's steps 7, 6 and 8 on the plane TestKubeadm
// left (node-a upgraded, node-b not): armed again, node-a rolled back with
// step 7's commands, the v1.36-only workloads answered 503 inside the
// grace through both nodes' addresses and never 404, the same after
// node-b's skewgate pod is deleted and replaced (the state file keeps the
// grace); then, with the garbage collector asking for owners of a held
// type, skewgate SIGKILLed and the cluster ejected (step 6) inside the
// grace, which step 8 ends as step 6 says (the settle, then off, then the
// genuine 404); no dependent lost; disarmed.
func rollback(t *testing.T, c kubernetes.Interface, owners *gcOwners) {
	a, b := plane.Spec.Nodes[0], plane.Spec.Nodes[1]
	runbook(t, a, "1", 0)
	waitSteering(t, true, 30*time.Second)
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := plane.KubeadmRollback(ctx, a.Name, lab.OldVersion, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("runbook step 7 on %s, then its apiserver ready on %s in %s:\n%s", a.Name, lab.OldVersion, time.Since(t0).Round(100*time.Millisecond), indent("  ", out))
	for _, n := range []lab.Node{a, b} {
		graceHolds(t, n, 30*time.Second, "rolled back: inside the grace")
	}

	// node-b's skewgate pod replaced inside the grace.
	pods, err := c.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=skewgate", FieldSelector: "spec.nodeName=" + b.Name})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("skewgate's pod on %s: %v %v", b.Name, pods, err)
	}
	old := pods.Items[0].Name
	if err := c.CoreV1().Pods("kube-system").Delete(context.Background(), old, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReplaced(t, c, b, old, 2*time.Minute)
	graceHolds(t, b, 30*time.Second, "skewgate's pod replaced inside the grace")

	// Eject and crash inside the grace, the garbage collector watching
	// (eject_test.go); the eject ends the grace as step 6 says (step 8's
	// first block). Then disarm.
	holdGrace(t, a)
	leader := freshCollector(t, c)
	crashInsideTheGrace(t, leader)
	ejectInsideTheGrace(t, c, leader, owners.eject)
	gcLost(t, c, owners)
	runbook(t, a, "8", 1)
}

// settling waits until node n's merged discovery no longer lists the
// rolled-back group/version while workloads still answer 503: the grace
// ended, its discovery settle holds.
func settling(t *testing.T, n lab.Node, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c := labtest.FreshClient(t, plane)
		r, err := c.Get(n.URL() + "/apis/scheduling.k8s.io")
		var body []byte
		if err == nil {
			body, err = io.ReadAll(r.Body)
			r.Body.Close()
		}
		code, route, gerr := labtest.Get(c, n.URL()+workloadsPath)
		switch {
		case err == nil && r.StatusCode == 200 && !strings.Contains(string(body), "v1alpha2") && gerr == nil && code == 503 && route == "unavailable":
			t.Logf("the grace ended: %s's discovery dropped scheduling.k8s.io/v1alpha2, workloads still answer 503", n.Name)
			return
		case code == 404:
			t.Fatalf("the grace ended: GET workloads on %s: 404 at once, want 503 for the discovery settle", n.Name)
		case time.Now().After(deadline):
			t.Fatalf("the grace ended: %s's discovery %v %s; workloads %d (route %q) %v; want v1alpha2 dropped and 503", n.Name, err, string(body[:min(len(body), 300)]), code, route, gerr)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// graceHolds waits until workloads answer 503 through node n's address,
// then asks 10 more times over a second: a 404 at any point (a false 404
// inside the grace) or any other answer fails.
func graceHolds(t *testing.T, n lab.Node, within time.Duration, how string) {
	t.Helper()
	deadline, seen := time.Now().Add(within), 0
	for seen < 10 {
		code, route, err := labtest.Get(labtest.FreshClient(t, plane), n.URL()+workloadsPath)
		switch {
		case err == nil && code == 503 && route == "unavailable":
			seen++
		case code == 404:
			t.Fatalf("%s: GET workloads on %s: 404 (route %q), want the grace's 503", how, n.Name, route)
		case seen > 0 || time.Now().After(deadline):
			t.Fatalf("%s: GET workloads on %s: %d (route %q) %v, want 503 (route unavailable)", how, n.Name, code, route, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%s: workloads on %s answer the grace's 503", how, n.Name)
}

// waitReplaced waits until node n's skewgate pod is one other than old,
// Ready.
func waitReplaced(t *testing.T, c kubernetes.Interface, n lab.Node, old string, timeout time.Duration) {
	t.Helper()
	t0 := time.Now()
	for time.Since(t0) < timeout {
		pods, err := c.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=skewgate", FieldSelector: "spec.nodeName=" + n.Name})
		if err == nil && len(pods.Items) == 1 && pods.Items[0].Name != old && pods.Items[0].DeletionTimestamp == nil &&
			slices.ContainsFunc(pods.Items[0].Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == "Ready" && c.Status == "True" }) {
			t.Logf("%s: skewgate's pod %s replaced by %s, Ready in %s", n.Name, old, pods.Items[0].Name, time.Since(t0).Round(100*time.Millisecond))
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%s: skewgate's pod %s not replaced by a Ready one in %s", n.Name, old, timeout)
}
