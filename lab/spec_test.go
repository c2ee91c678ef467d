package lab

import (
	"slices"
	"strings"
	"testing"
)

func TestParseNodesOrdersOldFirst(t *testing.T) {
	s, err := ParseNodes("node-c=v1.36.3, node-a=v1.35.4,node-b=v1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range s.Nodes {
		got = append(got, n.Name+"@"+n.IP.String())
	}
	want := []string{"node-a@198.18.0.2", "node-c@198.18.0.1", "node-b@198.18.0.3"}
	if !slices.Equal(got, want) {
		t.Errorf("nodes = %v, want %v (oldest first, addresses by position)", got, want)
	}
}

func TestParseNodesRejects(t *testing.T) {
	for _, in := range []string{"", "node-a", "node-a=1.35", "Node=v1.35.4", "a-very-long-name=v1.35.4", "a=v1.35.4,a=v1.36.3"} {
		if _, err := ParseNodes(in); err == nil {
			t.Errorf("ParseNodes(%q) accepted", in)
		}
	}
}

func TestAPIServerArgs(t *testing.T) {
	spec := DefaultSpec()
	pki := NewPKIPaths("/pki", spec.Nodes)
	old, _ := spec.nodeByName("node-a")
	cur, _ := spec.nodeByName("node-b")
	oldArgs := strings.Join(APIServerArgs(spec, old, pki), " ")
	newArgs := strings.Join(APIServerArgs(spec, cur, pki), " ")
	for _, want := range []string{
		"--advertise-address=198.18.0.1", "--authorization-mode=Node,RBAC",
		"--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group,X-Lab-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-", "--requestheader-allowed-names=front-proxy-client",
		"--proxy-client-cert-file=/pki/front-proxy-client.crt", "--tls-cert-file=/pki/node-a-serving.crt",
		"--feature-gates=UnknownVersionInteroperabilityProxy=false",
	} {
		if !strings.Contains(oldArgs, want) {
			t.Errorf("node-a args lack %s", want)
		}
	}
	if strings.Contains(oldArgs, "v1alpha2") || strings.Contains(oldArgs, "GenericWorkload") {
		t.Error("a 1.35 node must not be asked for scheduling.k8s.io/v1alpha2")
	}
	for _, want := range []string{"--runtime-config=scheduling.k8s.io/v1alpha2=true", "GenericWorkload=true"} {
		if !strings.Contains(newArgs, want) {
			t.Errorf("node-b args lack %s", want)
		}
	}
	if strings.Contains(newArgs, "--peer-ca-file") {
		t.Error("peer CA set while the in-tree proxy is off")
	}
	spec.InTreeProxy = true
	// On as users switch it on: a 1.35 server needs the alpha gate, a
	// 1.36 one has it on by default and needs only the peer CA.
	if args := strings.Join(APIServerArgs(spec, old, pki), " "); !strings.Contains(args, "UnknownVersionInteroperabilityProxy=true") ||
		!strings.Contains(args, "--peer-ca-file=/pki/ca.crt") {
		t.Errorf("in-tree proxy args of a 1.35 server incomplete: %s", args)
	}
	if args := strings.Join(APIServerArgs(spec, cur, pki), " "); strings.Contains(args, "UnknownVersionInteroperabilityProxy") ||
		!strings.Contains(args, "--peer-ca-file=/pki/ca.crt") {
		t.Errorf("in-tree proxy args of a 1.36 server: want the gate at its default and the peer CA: %s", args)
	}
	spec.InTreeProxy, spec.DefaultAPIs = false, true
	if args := strings.Join(APIServerArgs(spec, cur, pki), " "); strings.Contains(args, "v1alpha2") || strings.Contains(args, "GenericWorkload") {
		t.Errorf("DefaultAPIs: a 1.36 server asked for scheduling.k8s.io/v1alpha2: %s", args)
	}
	spec.DefaultAPIs = false
	// 1.37 runs its defaults; 1.38 serves gang scheduling's beta, every
	// gate it needs in one --feature-gates.
	n137, n138 := cur, cur
	n137.Version, n138.Version = "v1.37.2", "v1.38.0-beta.0"
	if args := strings.Join(APIServerArgs(spec, n137, pki), " "); strings.Contains(args, "--runtime-config") || strings.Contains(args, "GenericWorkload") {
		t.Errorf("a 1.37 server asked for more than its defaults: %s", args)
	}
	args138 := APIServerArgs(spec, n138, pki)
	if !slices.Contains(args138, "--runtime-config=scheduling.k8s.io/v1beta1=true") ||
		!slices.Contains(args138, "--feature-gates=UnknownVersionInteroperabilityProxy=false,GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true") {
		t.Errorf("a 1.38 server's args: %q", args138)
	}
	if !strings.Contains(newArgs, "--endpoint-reconciler-type=lease") {
		t.Error("the lease endpoint reconciler is not the default")
	}
	spec.NoEndpoints = true
	if args := strings.Join(APIServerArgs(spec, cur, pki), " "); !strings.Contains(args, "--endpoint-reconciler-type=none") {
		t.Errorf("NoEndpoints args: %s", args)
	}
}

func (s Spec) nodeByName(name string) (Node, bool) {
	return (&Plane{Spec: s}).Node(name)
}

func TestParseStagingReplaces(t *testing.T) {
	gomod := "module k8s.io/kubernetes\n\nreplace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n\tk8s.io/client-go => ./staging/src/k8s.io/client-go\n\tgithub.com/x/y => github.com/x/y v1.0.0\n)\n"
	got := parseStagingReplaces(gomod, "v0.35.4")
	want := []string{"replace k8s.io/api => k8s.io/api v0.35.4", "replace k8s.io/client-go => k8s.io/client-go v0.35.4"}
	if !slices.Equal(got, want) {
		t.Errorf("replaces = %q, want %q", got, want)
	}
}

func TestEnvRoundTrip(t *testing.T) {
	spec := DefaultSpec()
	p := &Plane{Dir: "/lab", Spec: spec, PKI: NewPKIPaths("/lab/pki", spec.Nodes)}
	vars := p.Env()
	vars["ODD"] = "it's $HOME"
	path := t.TempDir() + "/env"
	if err := writeFile(path, FormatEnv(vars)); err != nil {
		t.Fatal(err)
	}
	got, err := ParseEnv(path)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range vars {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, k := range []string{"LAB_NODES", "LAB_NODE_A_URL", "LAB_NODE_B_VERSION", "LAB_NODE_A_KUBECONFIG", "LAB_CA_FILE",
		"LAB_ADMIN_CERT", "LAB_USER_KEY", "LAB_FRONT_PROXY_CERT", "LAB_ETCD_URL", "LAB_NODE_B_SERVING_KEY", "LAB_NODE_B_IP"} {
		if got[k] == "" {
			t.Errorf("env lacks %s", k)
		}
	}
	if got["LAB_NODES"] != "node-a node-b" || got["LAB_NODE_B_URL"] != "https://198.18.0.2:6443" {
		t.Errorf("LAB_NODES=%q LAB_NODE_B_URL=%q", got["LAB_NODES"], got["LAB_NODE_B_URL"])
	}
}

// A plane of lab processes runs the etcd of the newest release it runs or
// upgrades to: kubeadm upgrades etcd before the first apiserver.
func TestEtcdRelease(t *testing.T) {
	spec, err := ParseNodes("node-a=v1.36.3,node-b=v1.37.2")
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.EtcdRelease(); got != "v1.37.2" {
		t.Errorf("nodes v1.36.3, v1.37.2: %s, want v1.37.2", got)
	}
	spec.Upgrades = []string{"v1.38.0-beta.0"}
	if got := spec.EtcdRelease(); got != "v1.38.0-beta.0" {
		t.Errorf("upgrading to v1.38.0-beta.0: %s", got)
	}
}
