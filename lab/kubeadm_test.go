package lab

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"
)

func kubeadmTestVars(t *testing.T) kubeadmNodeVars {
	t.Helper()
	s, err := newKubeadmSecrets()
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := ParseNodes("node-a=" + OldVersion + ",node-b=" + OldVersion)
	p := &Plane{Spec: spec}
	return p.kubeadmVars(nodeFiles{node: spec.Nodes[1], dir: t.TempDir()}, s)
}

func renderDocs(t *testing.T, path string) map[string]map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, d := range strings.Split(string(data), "\n---\n") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("%s: %v\n%s", path, err, d)
		}
		out[m["kind"].(string)] = m
	}
	return out
}

func TestKubeadmInitConfig(t *testing.T) {
	v := kubeadmTestVars(t)
	path := filepath.Join(t.TempDir(), "init.yaml")
	if err := renderFile(path, kubeadmInitConfig, v); err != nil {
		t.Fatal(err)
	}
	d := renderDocs(t, path)
	init, cluster, kubelet := d["InitConfiguration"], d["ClusterConfiguration"], d["KubeletConfiguration"]
	if init == nil || cluster == nil || kubelet == nil {
		t.Fatalf("want init, cluster and kubelet configurations, got %v", d)
	}
	if got := cluster["controlPlaneEndpoint"]; got != "198.18.0.253:6443" {
		t.Errorf("controlPlaneEndpoint %v", got)
	}
	if got := init["certificateKey"].(string); len(got) != 64 {
		t.Errorf("certificateKey %q: want 32 bytes hex", got)
	}
	reg := init["nodeRegistration"].(map[string]any)
	if reg["imagePullPolicy"] != "Never" || reg["criSocket"] != v.CRISocket || reg["name"] != "node-b" {
		t.Errorf("nodeRegistration %v", reg)
	}
	args := reg["kubeletExtraArgs"].([]any)
	if !slices.ContainsFunc(args, func(a any) bool {
		m := a.(map[string]any)
		return m["name"] == "cgroup-root" && m["value"] == "/skewlab-node-b"
	}) {
		t.Errorf("kubeletExtraArgs %v: want node-b's own cgroup root", args)
	}
	// kubeadm picks etcd: its own release's, upgraded by upgrade apply.
	if etcd, ok := cluster["etcd"]; ok {
		t.Errorf("etcd %v: want kubeadm's own", etcd)
	}
	if kubelet["cgroupDriver"] != "cgroupfs" || kubelet["failCgroupV1"] != false {
		t.Errorf("KubeletConfiguration %v", kubelet)
	}
	skip := init["skipPhases"].([]any)
	if len(skip) != 2 {
		t.Errorf("skipPhases %v", skip)
	}
}

func TestKubeadmJoinConfig(t *testing.T) {
	v := kubeadmTestVars(t)
	v.CAHash = "sha256:00"
	path := filepath.Join(t.TempDir(), "join.yaml")
	if err := renderFile(path, kubeadmJoinConfig, v); err != nil {
		t.Fatal(err)
	}
	j := renderDocs(t, path)["JoinConfiguration"]
	bt := j["discovery"].(map[string]any)["bootstrapToken"].(map[string]any)
	if bt["apiServerEndpoint"] != "198.18.0.253:6443" || bt["token"] != v.Secrets.Token {
		t.Errorf("discovery %v", bt)
	}
	cp := j["controlPlane"].(map[string]any)
	if cp["certificateKey"] != v.Secrets.CertificateKey || cp["localAPIEndpoint"].(map[string]any)["advertiseAddress"] != "198.18.0.2" {
		t.Errorf("controlPlane %v", cp)
	}
}

func TestKubeadmSecrets(t *testing.T) {
	s, err := newKubeadmSecrets()
	if err != nil {
		t.Fatal(err)
	}
	id, secret, ok := strings.Cut(s.Token, ".")
	if !ok || len(id) != 6 || len(secret) != 16 || strings.Trim(s.Token, "abcdefghijklmnopqrstuvwxyz0123456789.") != "" {
		t.Errorf("token %q: want [a-z0-9]{6}.[a-z0-9]{16}", s.Token)
	}
}

func TestKubeadmKubeletArgs(t *testing.T) {
	env := `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///lab/containerd.sock --node-ip=198.18.0.1 --cgroup-root=/skewlab-node-a"` + "\n"
	got, err := kubeadmKubeletArgs(env)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config=/var/lib/kubelet/config.yaml", "--container-runtime-endpoint=unix:///lab/containerd.sock",
		"--node-ip=198.18.0.1", "--cgroup-root=/skewlab-node-a",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if _, err := kubeadmKubeletArgs("# nothing\n"); err == nil {
		t.Error("no KUBELET_KUBEADM_ARGS: want an error")
	}
}

func TestAddExtraArgs(t *testing.T) {
	in := "apiServer:\n  extraArgs:\n  - name: feature-gates\n    value: UnknownVersionInteroperabilityProxy=false\nkubernetesVersion: v1.35.4\n"
	out, err := addExtraArgs(in, newAPIsArgs(newAPIs[36]))
	if err != nil {
		t.Fatal(err)
	}
	again, err := addExtraArgs(out, newAPIsArgs(newAPIs[36]))
	if err != nil || again != out {
		t.Errorf("not idempotent:\n%s\n%s", out, again)
	}
	var cfg struct {
		APIServer struct {
			ExtraArgs []struct{ Name, Value string } `json:"extraArgs"`
		} `json:"apiServer"`
		KubernetesVersion string `json:"kubernetesVersion"`
	}
	if err := yaml.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, a := range cfg.APIServer.ExtraArgs {
		got[a.Name] = a.Value
	}
	if got["feature-gates"] != "UnknownVersionInteroperabilityProxy=false,GenericWorkload=true" ||
		got["runtime-config"] != "scheduling.k8s.io/v1alpha2=true" || cfg.KubernetesVersion != "v1.35.4" || len(got) != 2 {
		t.Errorf("extraArgs %v, version %s", got, cfg.KubernetesVersion)
	}
}

func TestParseLdd(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n"
	got := parseLdd(out)
	if len(got) != 2 || got[0].Path != "/lib/x86_64-linux-gnu/libc.so.6" || got[1].Path != "/lib64/ld-linux-x86-64.so.2" {
		t.Errorf("parseLdd: %+v", got)
	}
}

func TestCACertHash(t *testing.T) {
	ca, err := NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := WriteCert(path, ca.Cert); err != nil {
		t.Fatal(err)
	}
	h, err := caCertHash(path)
	if err != nil || !strings.HasPrefix(h, "sha256:") || len(h) != len("sha256:")+64 {
		t.Errorf("caCertHash %q %v", h, err)
	}
}

func TestBridgeConflist(t *testing.T) {
	v := kubeadmTestVars(t)
	f := nodeFiles{node: v.Node, dir: t.TempDir()}
	if err := f.writeContainerdConfig("registry.k8s.io/pause:3.10.2"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(f.path("cni/10-bridge.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Plugins []struct {
			Type, Bridge string
			IPAM         struct {
				DataDir string `json:"dataDir"`
				Ranges  [][]struct{ Subnet, Gateway string }
			}
		}
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	p := c.Plugins[0]
	if p.Type != "bridge" || p.Bridge != "cni0" || p.IPAM.DataDir != f.path("cni-ipam") ||
		p.IPAM.Ranges[0][0].Subnet != "10.244.2.0/24" || p.IPAM.Ranges[0][0].Gateway != "10.244.2.1" {
		t.Errorf("conflist for node-b (cni0 10.244.2.1/24): %+v", c)
	}
}

// extraArgsOf is the ClusterConfiguration's apiServer.extraArgs by name.
func extraArgsOf(t *testing.T, v kubeadmNodeVars) map[string]string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "init.yaml")
	if err := renderFile(path, kubeadmInitConfig, v); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, a := range renderDocs(t, path)["ClusterConfiguration"]["apiServer"].(map[string]any)["extraArgs"].([]any) {
		m := a.(map[string]any)
		out[m["name"].(string)] = m["value"].(string)
	}
	return out
}

func TestKubeadmInTreeProxy(t *testing.T) {
	v := kubeadmTestVars(t)
	off := extraArgsOf(t, v)
	if off["feature-gates"] != "UnknownVersionInteroperabilityProxy=false" || off["peer-ca-file"] != "" {
		t.Errorf("in-tree proxy off: %v", off)
	}
	v.InTreeProxy = true
	on := extraArgsOf(t, v)
	if on["feature-gates"] != "UnknownVersionInteroperabilityProxy=true" || on["peer-ca-file"] != "/etc/kubernetes/pki/ca.crt" {
		t.Errorf("in-tree proxy on at %s: %v", v.Version, on)
	}
	// From 1.36 the gate is beta, on by default: users add only the peer
	// CA (kubeadm does not set it), and so does the lab.
	v.Version = "v1.36.3"
	if on := extraArgsOf(t, v); len(on) != 1 || on["peer-ca-file"] != "/etc/kubernetes/pki/ca.crt" {
		t.Errorf("in-tree proxy on at %s: want only peer-ca-file, got %v", v.Version, on)
	}
	v.InTreeProxy = false
	if off := extraArgsOf(t, v); off["feature-gates"] != "UnknownVersionInteroperabilityProxy=false" || len(off) != 1 {
		t.Errorf("in-tree proxy off at %s: %v", v.Version, off)
	}
}

// A node's control plane is settled only with all four of kubeadm's static
// pods on it Ready: the kubelet of 1.37.2 recreates them after it
// registers, so a node Ready with its new kubelet is not enough.
func TestControlPlanePodsReady(t *testing.T) {
	pod := func(node, component string, ready corev1.ConditionStatus) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: component + "-" + node, Namespace: "kube-system",
				Labels: map[string]string{"tier": "control-plane", "component": component}},
			Spec:   corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}}},
		}
	}
	all := func(node string, apiserver corev1.ConditionStatus) []runtime.Object {
		return []runtime.Object{pod(node, "etcd", corev1.ConditionTrue), pod(node, "kube-apiserver", apiserver),
			pod(node, "kube-controller-manager", corev1.ConditionTrue), pod(node, "kube-scheduler", corev1.ConditionTrue)}
	}
	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		want    bool
	}{
		{"all Ready", all("node-a", corev1.ConditionTrue), true},
		{"apiserver recreated, not Ready yet", all("node-a", corev1.ConditionFalse), false},
		{"etcd's pod not there yet", all("node-a", corev1.ConditionTrue)[1:], false},
		{"another node's pods", all("node-b", corev1.ConditionTrue), false},
	} {
		c := fake.NewClientset(tc.objects...)
		// The fake clientset ignores field selectors: filter as the
		// apiserver would.
		c.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			sel := a.(k8stesting.ListAction).GetListRestrictions().Fields
			var list corev1.PodList
			for _, o := range tc.objects {
				p := o.(*corev1.Pod)
				if sel.Matches(fields.Set{"spec.nodeName": p.Spec.NodeName}) {
					list.Items = append(list.Items, *p)
				}
			}
			return true, &list, nil
		})
		if got, detail := controlPlanePodsReady(t.Context(), c, "node-a"); got != tc.want {
			t.Errorf("%s: ready %t (%s), want %t", tc.name, got, detail, tc.want)
		}
	}
}

// Spec.GoawayChance reaches every apiserver: kubeadm's extraArgs, and the
// lab's own processes' flags; unset, neither names it.
func TestGoawayChance(t *testing.T) {
	v := kubeadmTestVars(t)
	if args := extraArgsOf(t, v); args["goaway-chance"] != "" {
		t.Errorf("unset: %v", args)
	}
	v.GoawayChance = "0.02"
	if args := extraArgsOf(t, v); args["goaway-chance"] != "0.02" {
		t.Errorf("kubeadm, 0.02: %v", args)
	}
	spec := DefaultSpec()
	if slices.ContainsFunc(APIServerArgs(spec, spec.Nodes[0], &PKI{}), func(a string) bool { return strings.HasPrefix(a, "--goaway-chance") }) {
		t.Error("the lab's apiserver names --goaway-chance unset")
	}
	spec.GoawayChance = 0.02
	if args := APIServerArgs(spec, spec.Nodes[0], &PKI{}); !slices.Contains(args, "--goaway-chance=0.02") {
		t.Errorf("the lab's apiserver, 0.02: %v", args)
	}
}

// kubeadm upgrades to a pre-release (the newest 1.38 the module proxy
// serves is v1.38.0-beta.0) only when allowed; to a release, as ever.
func TestKubeadmUpgradeConfigPrerelease(t *testing.T) {
	for version, want := range map[string]any{"v1.38.0-beta.0": true, "v1.37.2": nil} {
		v := kubeadmTestVars(t)
		v.Version = version
		path := filepath.Join(t.TempDir(), "upgrade.yaml")
		if err := renderFile(path, kubeadmUpgradeConfig, v); err != nil {
			t.Fatal(err)
		}
		apply := renderDocs(t, path)["UpgradeConfiguration"]["apply"].(map[string]any)
		if apply["kubernetesVersion"] != version || apply["allowExperimentalUpgrades"] != want {
			t.Errorf("%s: apply %v, want allowExperimentalUpgrades %v", version, apply, want)
		}
	}
}
