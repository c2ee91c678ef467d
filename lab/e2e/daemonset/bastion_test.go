package daemonset

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/keyutil"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/proxy/status"
)

// throughAPIServer: an operator on a bastion reaches the apiserver and not
// the nodes. With every node's admin port refused to the tool's address
// (a rule in each node's network namespace), `kubectl skewgate status`
// gets no answer from any node and names --through-apiserver; with it,
// every node answers through a port-forward to its pod. On that path the
// refusals hold too: a pod that is not the DaemonSet's gets no
// connection, and a listener at a proven pod's port whose certificate is
// a kubelet's, or another node's apiserver's, gets no request — the
// operator's token never reaches it. A port where nothing listens is the
// kubelet's word in the row.
func throughAPIServer(t *testing.T) {
	plugin := pluginBinary(t)
	refuseAdminPort(t, 16444)
	run := func(args ...string) (int, status.Cluster, string) {
		t.Helper()
		cmd := exec.Command(plugin, append([]string{"status", "-o", "json", "--kubeconfig", adminKubeconfig()}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("kubectl skewgate status %v: %v", args, err)
		}
		var c status.Cluster
		if err := json.Unmarshal(out, &c); err != nil {
			t.Fatalf("kubectl skewgate status %v: exit %d, %v:\n%s%s", args, code, err, out, stderr.String())
		}
		return code, c, stderr.String()
	}
	// row is node's DaemonSet pod's row (the decoy has a row of its own).
	row := func(c status.Cluster, node string) status.Node {
		for _, n := range c.Nodes {
			if n.Node == node && !strings.HasSuffix(n.Pod, "-decoy") {
				return n
			}
		}
		t.Fatalf("no row for %s: %+v", node, c.Nodes)
		return status.Node{}
	}

	code, c, stderr := run()
	t.Logf("directly, the admin port refused: exit %d; %s", code, stderr)
	for _, n := range plane.Spec.Nodes {
		if r := row(c, n.Name); r.Error == "" || !strings.Contains(r.Error, "--through-apiserver") {
			t.Errorf("directly, %s: error %q, want no answer that names --through-apiserver", n.Name, r.Error)
		}
	}
	if code != 1 {
		t.Errorf("directly: exit %d, want 1 (nodes that did not answer)", code)
	}

	t0 := time.Now()
	code, c, stderr = run("--through-apiserver")
	t.Logf("through the apiserver: exit %d in %s; %s", code, time.Since(t0).Round(time.Millisecond), stderr)
	for _, n := range plane.Spec.Nodes {
		r := row(c, n.Name)
		if r.Error != "" || r.Version == "" || r.Steering == "" {
			t.Errorf("through the apiserver, %s: %+v, want its status", n.Name, r)
		} else {
			t.Logf("%s: version %s, mode %s, steering %s, %d servers", n.Name, r.Version, r.Mode, r.Steering, len(r.Servers))
		}
	}
	if code != 0 && code != 3 {
		t.Errorf("through the apiserver: exit %d, want every node answering (0, or 3 with problems)", code)
	}

	a := plane.Spec.Nodes[0]
	t.Run("not the DaemonSet's", func(t *testing.T) {
		const port = 17444
		hits := standIn(t, a, port, servingPair(t, plane.PKI.Serving[a.Name]))
		decoy(t, a, port)
		_, c, _ := run("--through-apiserver")
		var r *status.Node
		for i, n := range c.Nodes {
			if n.Pod == a.Name+"-decoy" {
				r = &c.Nodes[i]
			}
		}
		if r == nil || !strings.Contains(r.Error, "neither the DaemonSet") {
			t.Errorf("the decoy pod's row: %+v, want it refused as not the DaemonSet's", r)
		}
		if n := hits.conns.Load(); n != 0 {
			t.Errorf("the decoy's listener got %d connections, want none", n)
		}
	})
	for _, tc := range []struct {
		name string
		port int
		cert func(t *testing.T) tls.Certificate
		want string
	}{
		{"a kubelet's certificate", 17445, func(t *testing.T) tls.Certificate { return kubeletPair(t, a) }, "not an apiserver's"},
		{"another node's apiserver certificate", 17446, func(t *testing.T) tls.Certificate {
			return servingPair(t, plane.PKI.Serving[plane.Spec.Nodes[1].Name])
		}, "x509"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits := standIn(t, a, tc.port, tc.cert(t))
			_, c, _ := run("--through-apiserver", fmt.Sprintf("--admin-port=%d", tc.port))
			r := row(c, a.Name)
			if r.Error == "" || !strings.Contains(r.Error, tc.want) {
				t.Errorf("%s's row: error %q, want the handshake refused (%q)", a.Name, r.Error, tc.want)
			}
			if n := hits.requests.Load(); n != 0 {
				t.Errorf("the stand-in got %d requests (%d with a credential), want none", n, hits.credentials.Load())
			}
			if hits.conns.Load() == 0 {
				t.Errorf("the stand-in got no connection: the port-forward did not reach it, so nothing was proven")
			}
			// Nothing listens there on the other nodes: the kubelet says so.
			b := row(c, plane.Spec.Nodes[1].Name)
			if !strings.Contains(b.Error, fmt.Sprint(tc.port)) || !strings.Contains(b.Error, "refused") {
				t.Errorf("%s's row: error %q, want the kubelet's connection refused at %d", b.Node, b.Error, tc.port)
			}
		})
	}
}

// refuseAdminPort refuses, in every node's network namespace, connections
// from the root namespace (the tool's address, lab.BridgeAddr) to port:
// the kubelets' probes and port-forwards, from inside the node, still
// arrive.
func refuseAdminPort(t *testing.T, port int) {
	t.Helper()
	rules := fmt.Sprintf("table inet skewgate_e2e_bastion {\n chain input {\n  type filter hook input priority 0; policy accept;\n  ip saddr %s tcp dport %d reject with tcp reset\n }\n}\n", lab.BridgeAddr, port)
	for _, n := range plane.Spec.Nodes {
		nft := func(stdin string, args ...string) error {
			cmd := exec.Command("nsenter", append([]string{"--net=" + lab.NetNSPath(n.Name), "nft"}, args...)...)
			cmd.Stdin = strings.NewReader(stdin)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("nft %v in %s: %v: %s", args, n.Name, err, out)
			}
			return nil
		}
		if err := nft(rules, "-f", "-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := nft("", "delete", "table", "inet", "skewgate_e2e_bastion"); err != nil {
				t.Error(err)
			}
		})
	}
}

// standInHits counts what a stand-in listener received.
type standInHits struct{ conns, requests, credentials atomic.Int32 }

// standIn serves TLS with cert on 127.0.0.1:port in node n's network
// namespace — where a port-forward to a pod on n arrives — and counts
// connections and requests; any request is answered 401.
func standIn(t *testing.T, n lab.Node, port int, cert tls.Certificate) *standInHits {
	t.Helper()
	var ln net.Listener
	if err := lab.InNode(n.Name, func() (err error) {
		ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	hits := &standInHits{}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.requests.Add(1)
			if r.Header.Get("Authorization") != "" {
				hits.credentials.Add(1)
			}
			http.Error(w, "collected", http.StatusUnauthorized)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				hits.conns.Add(1)
			}
		},
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return hits
}

func servingPair(t *testing.T, kp lab.KeyPair) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(kp.CertFile, kp.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kubeletPair is a kubelet's serving certificate for n: the cluster CA's,
// for the node's name and IP, as a worker's kubelet holds one.
func kubeletPair(t *testing.T, n lab.Node) tls.Certificate {
	t.Helper()
	ca, err := lab.LoadCA(plane.PKI.CAFile, plane.PKI.CAKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Sign(lab.Leaf{CN: "system:node:" + n.Name, Orgs: []string{"system:nodes"},
		IPs: []net.IP{net.IP(n.IP.AsSlice())}, DNS: []string{n.Name}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(pemCert(cert), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// decoy runs a pod with skewgate's label on n, in the DaemonSet's
// namespace and on the host network, whose --secure-admin-address names
// port; it waits until it runs, so a port-forward to it would work. Its
// controller is another object (a ConfigMap here; a ReplicaSet or Job of
// anyone who may create them in practice): an orphan the DaemonSet
// controller would adopt.
func decoy(t *testing.T, n lab.Node, port int) {
	t.Helper()
	c := admin(t)
	ctx := context.Background()
	owner, err := c.CoreV1().ConfigMaps(dsNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n.Name + "-decoy-owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.CoreV1().ConfigMaps(dsNamespace).Delete(context.Background(), owner.Name, metav1.DeleteOptions{})
	})
	yes := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name + "-decoy", Namespace: dsNamespace, Labels: map[string]string{"app.kubernetes.io/name": "skewgate"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: &yes}}},
		Spec: corev1.PodSpec{
			NodeName: n.Name, HostNetwork: true, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "skewgate", Image: lab.PauseImage, ImagePullPolicy: corev1.PullNever,
				Args: []string{fmt.Sprintf("--secure-admin-address=$(NODE_IP):%d", port)}}},
		},
	}
	if _, err := c.CoreV1().Pods(dsNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		c.CoreV1().Pods(dsNamespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			if _, err := c.CoreV1().Pods(dsNamespace).Get(context.Background(), pod.Name, metav1.GetOptions{}); err != nil {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Errorf("the decoy pod %s still there a minute after its deletion", pod.Name)
	})
	deadline := time.Now().Add(time.Minute)
	for {
		p, err := c.CoreV1().Pods(dsNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the decoy pod not running a minute after its creation: %v %+v", err, p.Status)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

var plugin struct {
	once sync.Once
	path string
	err  error
}

// pluginBinary builds kubectl-skewgate once for the package's tests.
func pluginBinary(t *testing.T) string {
	t.Helper()
	plugin.once.Do(func() {
		dir, err := filepath.Abs(filepath.Join(plane.Dir, "bin"))
		if err != nil {
			plugin.err = err
			return
		}
		if plugin.err = os.MkdirAll(dir, 0o755); plugin.err != nil {
			return
		}
		plugin.path = filepath.Join(dir, "kubectl-skewgate")
		if out, err := exec.Command("go", "build", "-o", plugin.path, "../../../cmd/kubectl-skewgate").CombinedOutput(); err != nil {
			plugin.err = fmt.Errorf("build kubectl-skewgate: %v\n%s", err, out)
		}
	})
	if plugin.err != nil {
		t.Fatal(plugin.err)
	}
	return plugin.path
}
