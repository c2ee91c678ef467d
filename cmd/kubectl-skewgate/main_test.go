package main

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/agent"
	"github.com/skewgate/skewgate/proxy/admin"
	"github.com/skewgate/skewgate/proxy/status"
	"github.com/skewgate/skewgate/proxy/status/statustest"
)

// cluster stands two nodes' admin listeners up, a fake apiserver listing
// their pods (and a third, pending), and a kubeconfig whose CA and token
// reach them.
func cluster(t *testing.T, pending bool) (kubeconfig string) {
	t.Helper()
	well := statustest.Node{Local: "198.18.0.1:6443", Peer: "198.18.0.2:6443", Version: "v0.1.0",
		Steering: &admin.SteeringView{Layout: admin.SteeringLayout, State: "steering standby: no skew window", Mode: "auto", Targets: []string{"198.18.0.1:6443"}},
		State:    "standby", Lookups: map[string]float64{"lease_expired": 7}, Healthy: true}
	a := statustest.Serve(t, well)
	well.Local, well.Peer = well.Peer, well.Local
	well.Steering = &admin.SteeringView{Layout: admin.SteeringLayout, State: "steering standby: no skew window", Mode: "auto", Targets: []string{"198.18.0.2:6443"}}
	b := statustest.Serve(t, well)
	objs := []*corev1.Pod{skewgatePod(t, "skewgate-a", "node-a", a), skewgatePod(t, "skewgate-b", "node-b", b)}
	if pending {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "skewgate-c", Namespace: "kube-system",
			Labels: map[string]string{"app.kubernetes.io/name": "skewgate"}}, Spec: corev1.PodSpec{NodeName: "node-c",
			Containers: []corev1.Container{{Name: "skewgate", Args: []string{"run", "--secure-admin-address=$(NODE_IP):16444"}}}}})
	}
	cs := fake.NewClientset(skewgateDaemonSet(), controlPlaneNode("node-a"), controlPlaneNode("node-b"), controlPlaneNode("node-c"))
	for _, p := range objs {
		if err := cs.Tracker().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	prev := newClientset
	newClientset = func(rc *rest.Config) (kubernetes.Interface, error) {
		if rc.BearerToken != statustest.Token {
			return nil, fmt.Errorf("the kubeconfig's token did not reach the client: %q", rc.BearerToken)
		}
		return cs, nil
	}
	t.Cleanup(func() { newClientset = prev })
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig = filepath.Join(dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://apiserver.invalid:6443", certificate-authority: %s}}]
users: [{name: u, user: {token: %s}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: default}}]
current-context: x
`, ca, statustest.Token)
	if err := os.WriteFile(kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// skewgateDaemonSet is kube-system/skewgate, whose pods skewgatePod makes.
func skewgateDaemonSet() *appsv1.DaemonSet {
	return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "skewgate", Namespace: "kube-system", UID: "d5e7"}}
}

// controlPlaneNode is a control-plane node at 127.0.0.1, where the stand-ins
// listen.
func controlPlaneNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{status.ControlPlaneLabel: ""}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}}}
}

// skewgatePod is the DaemonSet's pod on a node whose admin listener is srv.
func skewgatePod(t *testing.T, name, node string, srv *httptest.Server) *corev1.Pod {
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Labels: map[string]string{"app.kubernetes.io/name": "skewgate"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "skewgate", UID: "d5e7", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: node, HostNetwork: true, Containers: []corev1.Container{{Name: "skewgate",
			Args: []string{"run", "--steering", "--secure-admin-address=$(NODE_IP):" + u.Port(), "--metrics-bind-address="}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, HostIP: u.Hostname()},
	}
}

func run(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := execute(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestStatus(t *testing.T) {
	kubeconfig := cluster(t, false)
	code, out, errOut := run("--kubeconfig", kubeconfig)
	if code != exitOK {
		t.Fatalf("status of two well nodes: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"node-a  v0.1.0", "node-b  v0.1.0", "198.18.0.1:6443", "2/2 healthy"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	// -o json reads back into the package's type, node by node.
	code, out, _ = run("status", "--kubeconfig", kubeconfig, "-o", "json")
	var c status.Cluster
	if err := json.Unmarshal([]byte(out), &c); err != nil || code != exitOK {
		t.Fatalf("status -o json: exit %d, %v\n%s", code, err, out)
	}
	var again bytes.Buffer
	status.WriteJSON(&again, c)
	if again.String() != out {
		t.Errorf("-o json does not round-trip:\n%s\nwritten back:\n%s", out, again.String())
	}
	if len(c.Nodes) != 2 || c.Nodes[1].Node != "node-b" || c.Nodes[1].Connections.Direct != 7 || c.Nodes[1].Mode != "auto" {
		t.Errorf("status -o json: %+v", c.Nodes)
	}
}

// A node without an answer is a row with the error and exit 1; a
// degraded node exit 3; a wrong command line exit 2.
func TestExitStatus(t *testing.T) {
	kubeconfig := cluster(t, true)
	code, out, errOut := run("--kubeconfig", kubeconfig)
	if code != exitFailed || !strings.Contains(out, "node-c: error: pod skewgate-c has no host IP yet") || !strings.Contains(out, "node-b  v0.1.0") {
		t.Errorf("a pending pod: exit %d, want %d\n%s%s", code, exitFailed, out, errOut)
	}
	if !strings.Contains(errOut, "no answer from [node-c]") {
		t.Errorf("stderr does not name the failed node: %s", errOut)
	}
	// A selector that finds nothing is a failure, not an empty success.
	if code, _, errOut := run("--kubeconfig", kubeconfig, "-l", "app=none"); code != exitFailed || !strings.Contains(errOut, "no skewgate pods") {
		t.Errorf("no pods: exit %d: %s", code, errOut)
	}
	for _, args := range [][]string{{"-o", "yaml"}, {"explain", "get"}, {"--no-such-flag"}, {"status", "extra"}} {
		if code, _, errOut := run(append(args, "--kubeconfig", kubeconfig)...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d: %s", args, code, exitUsage, errOut)
		}
	}
}

func TestDegraded(t *testing.T) {
	kubeconfig := cluster(t, false)
	// The membership of a node that never probed its apiservers.
	prev := newClientset
	srv := statustest.Serve(t, statustest.Node{Local: "198.18.0.1:6443", Version: "v0.1.0",
		Steering: &admin.SteeringView{Layout: admin.SteeringLayout, State: "steering lapsed: probe failed", Mode: "auto"}, State: "lapsed"})
	newClientset = func(rc *rest.Config) (kubernetes.Interface, error) {
		return fake.NewClientset(skewgatePod(t, "skewgate-a", "node-a", srv), skewgateDaemonSet(), controlPlaneNode("node-a")), nil
	}
	defer func() { newClientset = prev }()
	code, out, errOut := run("--kubeconfig", kubeconfig)
	if code != exitDegraded || !strings.Contains(out, "node-a: degraded: steering lapsed: probe failed") || !strings.Contains(out, "unhealthy") {
		t.Errorf("a lapsed node: exit %d, want %d\n%s%s", code, exitDegraded, out, errOut)
	}
}

func TestRoutesAndExplain(t *testing.T) {
	kubeconfig := cluster(t, false)
	code, out, errOut := run("routes", "--kubeconfig", kubeconfig)
	if code != exitOK || strings.Count(out, "SERVER  ") != 2 || !strings.Contains(out, "== node-b (skewgate-b, https://127.0.0.1:") {
		t.Errorf("routes: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = run("explain", "list", "/api/v1/pods", "--kubeconfig", kubeconfig)
	if code != exitOK || strings.Count(out, "route:") != 2 || !strings.Contains(out, "== node-a: GET /api/v1/pods") {
		t.Errorf("explain: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = run("explain", "list", "/api/v1/pods", "--kubeconfig", kubeconfig, "-o", "json")
	var es []status.NodeExplanation
	if err := json.Unmarshal([]byte(out), &es); err != nil || code != exitOK || len(es) != 2 || es[0].Explanation.Verb != "list" {
		t.Errorf("explain -o json: exit %d, %v\n%s", code, err, out)
	}
}

// The metric names proxy/status reads are the agent's: the proxy half
// cannot import the agent, so this, which sees both, holds them equal.
func TestMetricNamesAreTheAgents(t *testing.T) {
	ch := make(chan *prometheus.Desc, 16)
	(*agent.Steering)(nil).Describe(ch)
	close(ch)
	var descs []string
	for d := range ch {
		descs = append(descs, d.String())
	}
	for _, want := range []string{
		`fqName: "` + status.MetricSteeringState + `"`, `variableLabels: {state}`,
		`fqName: "` + status.MetricLookups + `"`, `variableLabels: {reason}`,
	} {
		if !slices.ContainsFunc(descs, func(d string) bool { return strings.Contains(d, want) }) {
			t.Errorf("the agent describes no metric with %s:\n%s", want, strings.Join(descs, "\n"))
		}
	}
}

// Issue 41: a worker's kubelet can make a mirror pod in kube-system with
// skewgate's label; kubectl skewgate sent it the operator's token (a
// stand-in server received it). Now it is refused before any connection:
// the stand-in gets no request at all, and the row says why.
func TestNoTokenForAMirrorPod(t *testing.T) {
	kubeconfig := cluster(t, false)
	var hits atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "collected", http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	mirror := skewgatePod(t, "skewgate-worker-1", "worker-1", srv)
	yes := true
	mirror.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"}
	mirror.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "worker-1", UID: "w", Controller: &yes}}
	worker := controlPlaneNode("worker-1")
	worker.Labels = map[string]string{"node-role.kubernetes.io/worker": ""}
	prev := newClientset
	newClientset = func(rc *rest.Config) (kubernetes.Interface, error) {
		return fake.NewClientset(mirror, worker, skewgateDaemonSet()), nil
	}
	defer func() { newClientset = prev }()
	code, out, errOut := run("--kubeconfig", kubeconfig)
	if hits.Load() != 0 {
		t.Errorf("the worker's mirror pod's server got %d requests, want none", hits.Load())
	}
	if code == 0 || !strings.Contains(out+errOut, "not a control-plane node") {
		t.Errorf("exit %d, want a failure that says why:\n%s%s", code, out, errOut)
	}
}
