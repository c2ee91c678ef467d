package kubeadm

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/labtest"
	"github.com/skewgate/skewgate/proxy/plan"
)

// operatorKubeconfig writes a kubeconfig as the operator's: the lab
// admin (system:masters) on node n's address, verified by kubeadm's CA.
// The secure admin listeners authorize that user too.
func operatorKubeconfig(t *testing.T, n lab.Node) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["lab"] = &clientcmdapi.Cluster{Server: n.URL(), CertificateAuthority: plane.PKI.CAFile}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificate: plane.PKI.Admin.CertFile, ClientKey: plane.PKI.Admin.KeyFile}
	cfg.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: "admin"}
	cfg.CurrentContext = "lab"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// preflight: `skewgate preflight` on the armed cluster before the upgrade
// passes (exit 0: RunSkewgate fails the test otherwise), with every node's
// skewgate reached on its secure admin listener, steering, its advertise
// address, its kernel's sweep and its pod's hostPID ok, one skewgate
// version across the nodes, and every apiserver's --goaway-chance read
// from its mirror pod (unset here: a warning).
func preflight(t *testing.T) {
	kc := operatorKubeconfig(t, plane.Spec.Nodes[1])
	out := labtest.RunSkewgate(t, skewgateBin, "preflight", "--kubeconfig", kc, "-o", "json")
	var checks []plan.Check
	if err := json.Unmarshal([]byte(out), &checks); err != nil {
		t.Fatalf("preflight -o json: %v\n%s", err, out)
	}
	for _, n := range plane.Spec.Nodes {
		for _, name := range []string{"steering", "targets"} {
			i := slices.IndexFunc(checks, func(c plan.Check) bool { return c.Node == n.IP.String() && c.Name == name })
			if i < 0 || checks[i].Result != plan.OK {
				t.Errorf("%s %s: %+v", n.Name, name, checks)
			}
		}
		for _, c := range []struct{ node, name string }{{n.IP.String(), "sweep"}, {n.Name, "hostPID"}} {
			i := slices.IndexFunc(checks, func(ck plan.Check) bool { return ck.Node == c.node && ck.Name == c.name })
			if i < 0 || checks[i].Result != plan.OK {
				t.Errorf("%s %s: %+v", n.Name, c.name, checks)
			}
		}
		i := slices.IndexFunc(checks, func(c plan.Check) bool { return c.Node == n.IP.String() && c.Name == "goaway-chance" })
		if i < 0 || checks[i].Result != plan.Warn || !strings.Contains(checks[i].Reason, "not set") {
			t.Errorf("%s goaway-chance: %+v", n.Name, checks)
		}
	}
	if i := slices.IndexFunc(checks, func(c plan.Check) bool { return c.Name == "skewgate versions" }); i < 0 || checks[i].Result != plan.OK {
		t.Errorf("skewgate versions, one image on every node: %+v", checks)
	}
	t.Logf("skewgate preflight:\n%s", labtest.RunSkewgate(t, skewgateBin, "preflight", "--kubeconfig", kc))
}

// rollbackPlan: with node-a on v1.36.3 and node-b on v1.35.4, the plan of
// a rollback to v1.35.4, read through node-b (skewgate's merged view),
// lists the v1.36-only workloads with a known object count and the
// requests skewgate counted for them.
func rollbackPlan(t *testing.T) {
	kc := operatorKubeconfig(t, plane.Spec.Nodes[1])
	out := labtest.RunSkewgate(t, skewgateBin, "rollback-plan", "--to", lab.OldVersion, "--kubeconfig", kc, "-o", "json")
	var p plan.RollbackPlan
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("rollback-plan -o json: %v\n%s", err, out)
	}
	if !strings.HasPrefix(p.Discovery, "skewgate's merged") {
		t.Errorf("discovery read from %q, want skewgate's merged view", p.Discovery)
	}
	i := slices.IndexFunc(p.Lacking, func(l plan.LackingType) bool { return l.Resource == "scheduling.k8s.io/v1alpha2/workloads" })
	if i < 0 {
		t.Fatalf("workloads not in the plan: %s", out)
	}
	if w := p.Lacking[i]; w.Objects == nil || !w.Namespaced || w.Requests == nil {
		t.Errorf("workloads: %+v", w)
	}
	for _, l := range p.Lacking {
		if !strings.Contains(l.Resource, "scheduling.k8s.io/") && !strings.Contains(l.Resource, "mutatingadmissionpolic") {
			t.Errorf("%s lacking in %s: not a v1.36-only type", l.Resource, lab.OldVersion)
		}
	}
	t.Logf("skewgate rollback-plan --to %s:\n%s", lab.OldVersion, labtest.RunSkewgate(t, skewgateBin, "rollback-plan", "--to", lab.OldVersion, "--kubeconfig", kc))
}
