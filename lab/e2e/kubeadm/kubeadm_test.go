package kubeadm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/labtest"
)

// workloadsPath is served only by v1.36 (scheduling.k8s.io/v1alpha2).
const workloadsPath = "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/workloads"

// TestKubeadm is the check, in order: the cluster kubeadm built, the
// DaemonSet on it, the upgrade of node-a with the DaemonSet running (its
// metrics scraped throughout on the secure admin listener), the
// v1.36-only resource through node-b (200 through skewgate, the false 404
// with steering off), and node-a's rollback with its grace, inside which
// skewgate is SIGKILLed and the cluster ejected while the garbage
// collector asks for owners of a held type (eject_test.go). The
// runbook's commands run as written where the upgrade reaches them
// (runbook_test.go).
func TestKubeadm(t *testing.T) {
	a, b := plane.Spec.Nodes[0], plane.Spec.Nodes[1]
	c := admin(t)
	t.Run("cluster", func(t *testing.T) { cluster(t, c) })
	if t.Failed() {
		t.FailNow()
	}
	t.Run("daemonset", func(t *testing.T) {
		t0 := time.Now()
		out, err := plane.ApplyKustomize(context.Background(), "../../../deploy/kubernetes", "skewgate", imageTag)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kubectl apply -k:\n%s", out)
		waitPods(t, "app.kubernetes.io/name=skewgate", len(plane.Spec.Nodes), 3*time.Minute)
		t.Logf("DaemonSet on kubeadm's PKI: pods Ready in %s", time.Since(t0).Round(100*time.Millisecond))
		// Mode auto, the DaemonSet's default, on one version: nothing to
		// fix, nothing in the path.
		want(t, b, http.StatusNotFound, "", "one version, mode auto: the apiserver's own answer")
	})
	if t.Failed() {
		t.FailNow()
	}
	t.Run("routine events", func(t *testing.T) { routine(t) })
	t.Run("armed", func(t *testing.T) {
		// The runbook's first step before kubeadm upgrade: arm the cluster.
		armed := time.Now()
		runbook(t, a, "1", 0)
		waitSteering(t, true, 30*time.Second)
		t.Logf("kube-system/skewgate steering=always: steering on every node after %s", time.Since(armed).Round(time.Millisecond))
		want(t, b, http.StatusNotFound, "local", "before the upgrade (nobody serves it: the genuine 404)")
		// The runbook's step 0, on the armed cluster.
		preflight(t)
		runbook(t, b, "0", 0)
	})
	if t.Failed() {
		t.FailNow()
	}
	t.Run("upgrade", func(t *testing.T) {
		t0 := time.Now()
		scrape := scrapeDuring(t, a)
		watch, served := watchWindow(t), lastReady(t, a)
		if err := plane.KubeadmUpgrade(context.Background(), a.Name, lab.NewVersion, true); err != nil {
			t.Fatal(err)
		}
		scrape.end(t, a)
		// kubeadm's announcement (its preflight Job) opens every node's
		// window before node-a's control plane first stops serving (its
		// etcd's restart or its apiserver's): seen open (read every 500 ms)
		// while node-a's /readyz still answered ok (read every 100 ms).
		ready := served()
		for node, w := range watch() {
			t.Logf("%s: window seen open at %s; node-a's apiserver last ready at %s, %s later", node,
				w.window.Format("15:04:05.000"), ready.Format("15:04:05.000"), ready.Sub(w.window).Round(time.Millisecond))
			if w.window.IsZero() || ready.IsZero() || !w.window.Before(ready) {
				t.Errorf("%s: the window was not seen open before node-a's apiserver first failed /readyz", node)
			}
		}
		t.Logf("kubeadm upgrade apply %s on %s in %s; its log (klog lines left out):\n%s", lab.NewVersion, a.Name,
			time.Since(t0).Round(100*time.Millisecond), kubeadmOutput(t, a, "upgrade apply"))
		for n, v := range map[lab.Node]string{a: lab.NewVersion, b: lab.OldVersion} {
			if got := serverVersion(t, n); got != v {
				t.Errorf("%s serves %s, want %s", n.Name, got, v)
			}
		}
		pod, err := c.CoreV1().Pods("kube-system").Get(context.Background(), "kube-apiserver-"+a.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if img := pod.Spec.Containers[0].Image; img != "registry.k8s.io/kube-apiserver:"+lab.NewVersion {
			t.Errorf("%s's static pod runs %s", a.Name, img)
		}
		waitPods(t, "app.kubernetes.io/name=skewgate", len(plane.Spec.Nodes), time.Minute)
	})
	if t.Failed() {
		t.FailNow()
	}
	var owners *gcOwners
	t.Run("skew", func(t *testing.T) {
		wantEventually(t, b, http.StatusOK, "peer", "through old node-b's address", time.Minute)
		owners = makeOwners(t, c)
		want(t, a, http.StatusOK, "local", "through node-a's address")
		rollbackPlan(t)
		runbook(t, a, "0", 1)
		// The runbook's step 6, on one node (on its pinned maps), then
		// on every node.
		runbook(t, b, "6", 0)
		want(t, b, http.StatusNotFound, "", "steering off on node-b (the false 404)")
		shell(t, b, "skewgate steer on --pin-path=/sys/fs/bpf/skewgate")
		want(t, b, http.StatusOK, "peer", "steering on again")
		runbook(t, a, "6", 1)
		waitSteering(t, false, 30*time.Second)
		want(t, b, http.StatusNotFound, "", "steering off on every node (the false 404)")
		shell(t, a, `kubectl -n kube-system patch configmap skewgate -p '{"data":{"steering":"always"}}'`)
		waitSteering(t, true, 30*time.Second)
		want(t, b, http.StatusOK, "peer", "armed again")
		// Disarmed mid-upgrade, mode auto keeps steering: the versions
		// differ, the skew window is open.
		runbook(t, a, "8", 1)
		time.Sleep(2 * time.Second)
		want(t, b, http.StatusOK, "peer", "disarmed while the versions differ (mode auto, in the window)")
	})
	if t.Failed() {
		t.FailNow()
	}
	t.Run("rollback", func(t *testing.T) { rollback(t, c, owners) })
}

// cluster: both nodes Ready as kubeadm registered them, each running
// kubeadm's four static pods of its version, two etcd members.
func cluster(t *testing.T, c kubernetes.Interface) {
	ctx := context.Background()
	for _, n := range plane.Spec.Nodes {
		node, err := c.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := node.Labels[lab.ControlPlaneLabel]; !ok {
			t.Errorf("%s: no %s label (kubeadm's mark-control-plane): %v", n.Name, lab.ControlPlaneLabel, node.Labels)
		}
		if got := node.Status.NodeInfo.KubeletVersion; got != n.Version {
			t.Errorf("%s: kubelet %s, want %s", n.Name, got, n.Version)
		}
		for _, comp := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			pod, err := c.CoreV1().Pods("kube-system").Get(ctx, comp+"-"+n.Name, metav1.GetOptions{})
			if err != nil {
				t.Errorf("static pod %s-%s: %v", comp, n.Name, err)
				continue
			}
			if pod.Status.Phase != corev1.PodRunning {
				t.Errorf("%s: %s", pod.Name, pod.Status.Phase)
			}
		}
		if got := serverVersion(t, n); got != n.Version {
			t.Errorf("%s serves %s, want %s", n.Name, got, n.Version)
		}
	}
	cm, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeadm-config", metav1.GetOptions{})
	if err != nil || !strings.Contains(cm.Data["ClusterConfiguration"], "controlPlaneEndpoint: "+lab.KubeadmEndpoint()) {
		t.Errorf("kubeadm-config: %v %s", err, cm.Data["ClusterConfiguration"])
	}
	t.Logf("etcd members:\n%s", etcdMembers(t))
}

// etcdMembers lists stacked etcd's members with etcd's own client, as
// an operator would (`etcdctl member list`), through the etcd pod's
// endpoint on node-a with kubeadm's healthcheck client certificate.
func etcdMembers(t *testing.T) string {
	t.Helper()
	pki := plane.KubeadmDir(plane.Spec.Nodes[0]) + "/pki/etcd/"
	c, err := (&lab.PKI{CAFile: pki + "ca.crt"}).HTTPClient(lab.KeyPair{CertFile: pki + "healthcheck-client.crt", KeyFile: pki + "healthcheck-client.key"})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Post(fmt.Sprintf("https://%s:2379/v3/cluster/member/list", plane.Spec.Nodes[0].IP), "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Members []struct {
			Name       string   `json:"name"`
			ClientURLs []string `json:"clientURLs"`
		} `json:"members"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	if len(list.Members) != len(plane.Spec.Nodes) {
		t.Errorf("etcd has %d members, want %d: %+v", len(list.Members), len(plane.Spec.Nodes), list.Members)
	}
	var b strings.Builder
	for _, m := range list.Members {
		fmt.Fprintf(&b, "  %s %v\n", m.Name, m.ClientURLs)
	}
	return b.String()
}

func admin(t *testing.T) kubernetes.Interface {
	t.Helper()
	c, err := plane.AdminClient(plane.Spec.Nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func serverVersion(t *testing.T, n lab.Node) string {
	t.Helper()
	v, err := lab.ServerVersion(context.Background(), labtest.FreshClient(t, plane), n)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitPods waits until exactly n pods match selector in kube-system, each
// Ready and not terminating.
func waitPods(t *testing.T, selector string, n int, timeout time.Duration) {
	t.Helper()
	if err := plane.WaitPods(context.Background(), "kube-system", selector, n, timeout); err != nil {
		t.Fatal(err)
	}
}

// waitSteering waits until every node's pins (as the host sees them) say
// steering is want.
func waitSteering(t *testing.T, want bool, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, n := range plane.Spec.Nodes {
		for {
			st, err := lab.KubeletSteering(n)
			if err == nil && st.Steering() == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: steering %t not reached in %s: %v %v", n.Name, want, timeout, st, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func want(t *testing.T, n lab.Node, code int, route, how string) {
	t.Helper()
	got, gotRoute, err := labtest.Get(labtest.FreshClient(t, plane), n.URL()+workloadsPath)
	if err != nil || got != code || gotRoute != route {
		t.Errorf("%s: GET %s on %s: %d (route %q) %v, want %d (route %q)", how, workloadsPath, n.Name, got, gotRoute, err, code, route)
	}
}

// wantEventually: skewgate learns the upgraded server's discovery within
// its refresh; until then it may answer 503, never a 404 once it has.
func wantEventually(t *testing.T, n lab.Node, code int, route, how string, timeout time.Duration) {
	t.Helper()
	t0 := time.Now()
	var last string
	for time.Since(t0) < timeout {
		got, gotRoute, err := labtest.Get(labtest.FreshClient(t, plane), n.URL()+workloadsPath)
		if err == nil && got == code && gotRoute == route {
			t.Logf("%s: %d (route %s) %s after the upgrade finished", how, got, gotRoute, time.Since(t0).Round(time.Millisecond))
			return
		}
		last = fmt.Sprintf("%d (route %q) %v", got, gotRoute, err)
		time.Sleep(250 * time.Millisecond)
	}
	t.Errorf("%s: GET %s on %s: %s for %s, want %d (route %q)", how, workloadsPath, n.Name, last, timeout, code, route)
}

// kubeadmOutput is what kubeadm printed for its last run of sub on node n
// (its own lines, not klog's).
func kubeadmOutput(t *testing.T, n lab.Node, sub string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(plane.Dir, "logs", "kubeadm-"+n.Name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	if i := strings.LastIndex(s, "+ kubeadm "+sub); i >= 0 {
		s = s[i:]
	}
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if len(line) > 5 && (line[0] == 'I' || line[0] == 'W' || line[0] == 'E') && line[1] >= '0' && line[1] <= '9' {
			continue
		}
		fmt.Fprintln(&b, "  "+line)
	}
	return b.String()
}

// scraper reads node n's skewgate metrics on its secure admin listener
// every 500 ms as Prometheus does: with its ServiceAccount's token, bound
// to the shipped ClusterRole skewgate-metrics (prometheusClient). The
// listener asks an apiserver to review the token and the access for each
// scrape, and must keep answering while its own apiserver restarts.
type scraper struct {
	stop                 chan struct{}
	done                 chan struct{}
	ok, failed, whileOut int
	firstErr             string
}

// localOut is a scrape taken while skewgate found its own apiserver out.
var localOut = regexp.MustCompile(`(?m)^skewgate_server_healthy\{local="true"[^}]*\} 0$`)

func scrapeDuring(t *testing.T, n lab.Node) *scraper {
	t.Helper()
	c := prometheusClient(t)
	s := &scraper{stop: make(chan struct{}), done: make(chan struct{})}
	url := fmt.Sprintf("https://%s:16444/metrics", n.IP)
	go func() {
		defer close(s.done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := c.Do(req)
			var body []byte
			if err == nil {
				body, err = io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body[:min(len(body), 200)])))
				}
			}
			cancel()
			switch {
			case err != nil:
				s.failed++
				if s.firstErr == "" {
					s.firstErr = fmt.Sprintf("%s: %v", time.Now().Format(time.TimeOnly), err)
				}
			default:
				s.ok++
				if localOut.Match(body) {
					s.whileOut++
				}
			}
		}
	}()
	return s
}

// prometheusClient scrapes as Prometheus's ServiceAccount does: the
// ClusterRole skewgate-metrics as deploy/kubernetes/monitoring ships it,
// bound to ServiceAccount monitoring/prometheus, and a token of it — not
// a system:masters certificate, which would skip the token review and
// the access review Prometheus's scrapes go through.
func prometheusClient(t *testing.T) *http.Client {
	t.Helper()
	ctx, c := context.Background(), admin(t)
	role := shippedMetricsRole(t)
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus", Namespace: "monitoring"}}
	if _, err := c.CoreV1().ServiceAccounts("monitoring").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "skewgate-metrics"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: "monitoring"}}}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	hour := int64(3600)
	tr, err := c.CoreV1().ServiceAccounts("monitoring").CreateToken(ctx, "prometheus",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc, err := plane.PKI.HTTPClient(lab.KeyPair{}) // the CA only: no client certificate
	if err != nil {
		t.Fatal(err)
	}
	hc.Transport = transport.NewBearerAuthRoundTripper(tr.Status.Token, hc.Transport)
	return hc
}

// shippedMetricsRole is the ClusterRole of deploy/kubernetes/monitoring's
// metrics-rbac.yaml.
func shippedMetricsRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile("../../../deploy/kubernetes/monitoring/metrics-rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---") {
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &role); err == nil && role.Kind == "ClusterRole" {
			return &role
		}
	}
	t.Fatal("metrics-rbac.yaml has no ClusterRole")
	return nil
}

// end stops the scraper and fails t if a scrape failed, or if none was
// taken while the local apiserver was out (then the test proved nothing).
func (s *scraper) end(t *testing.T, n lab.Node) {
	t.Helper()
	close(s.stop)
	<-s.done
	t.Logf("%s: secure admin listener scraped %d times through the upgrade, %d of them while its apiserver was out; %d failed", n.Name, s.ok, s.whileOut, s.failed)
	if s.failed > 0 {
		t.Errorf("%s: %d scrapes failed (first: %s): monitoring went dark during the restart it covers", n.Name, s.failed, s.firstErr)
	}
	if s.whileOut == 0 {
		t.Errorf("%s: no scrape while its apiserver was out", n.Name)
	}
}

// lastReady polls node n's apiserver's /readyz on loopback (never
// steered) every 100 ms until the returned function is called, which
// reports when it last answered ok before its first failure (zero: it
// never answered ok, or never failed): the control plane was still
// serving then.
func lastReady(t *testing.T, n lab.Node) func() time.Time {
	t.Helper()
	c, err := kubernetes.NewForConfig(loopbackConfig(n))
	if err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	var ready, failed time.Time
	go func() {
		defer close(done)
		for failed.IsZero() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := c.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
			cancel()
			switch {
			case err == nil:
				ready = time.Now()
			case !ready.IsZero():
				failed = time.Now()
				t.Logf("%s: /readyz last ok at %s, failed at %s: %v", n.Name, ready.Format("15:04:05.000"), failed.Format("15:04:05.000"), err)
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		<-stop
	}()
	return func() time.Time {
		close(stop)
		<-done
		if failed.IsZero() {
			return time.Time{}
		}
		return ready
	}
}
