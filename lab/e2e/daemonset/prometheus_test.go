package daemonset

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/lab/testenv"
)

const monitoringDir = "../../../deploy/kubernetes/monitoring"

// promAddr is the test's Prometheus (loopback only).
const promAddr = "127.0.0.1:19091"

// serviceMonitor is the part of the shipped ServiceMonitor a scrape config
// is generated from.
type serviceMonitor struct {
	Metadata struct{ Name, Namespace string }
	Spec     struct {
		JobLabel string `json:"jobLabel"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port, Path, Interval, Scheme, BearerTokenFile string
			TLSConfig                                     struct{ CAFile, ServerName string } `json:"tlsConfig"`
			Relabelings                                   []struct {
				SourceLabels []string `json:"sourceLabels"`
				TargetLabel  string   `json:"targetLabel"`
			} `json:"relabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// labelName is Prometheus Operator's sanitizeLabelName.
func labelName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// scrapeConfig is the scrape job Prometheus Operator generates for the
// ServiceMonitor's endpoint (its pkg/prometheus/promcfg.go,
// generateServiceMonitorConfig, role endpoints): keep the selected
// Services' endpoints on the named port; namespace, service, pod,
// container from the meta labels; job from the Service's name, then from
// its jobLabel label; endpoint the port's name; then the endpoint's own
// relabelings. The scrape token (a ServiceAccount's) and CA come from
// files, as with the operator's bearerTokenFile and tlsConfig. Targets come
// from sdFile (see discover): Debian's Prometheus is built without
// Kubernetes service discovery.
func scrapeConfig(sm serviceMonitor, sdFile, token, ca string) map[string]any {
	ep := sm.Spec.Endpoints[0]
	relabel := []map[string]any{}
	keys := make([]string, 0, len(sm.Spec.Selector.MatchLabels))
	for k := range sm.Spec.Selector.MatchLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		relabel = append(relabel, map[string]any{"action": "keep",
			"source_labels": []string{"__meta_kubernetes_service_label_" + labelName(k), "__meta_kubernetes_service_labelpresent_" + labelName(k)},
			"regex":         "(" + sm.Spec.Selector.MatchLabels[k] + ");true"})
	}
	relabel = append(relabel,
		map[string]any{"action": "keep", "source_labels": []string{"__meta_kubernetes_endpoint_port_name"}, "regex": ep.Port},
		map[string]any{"source_labels": []string{"__meta_kubernetes_endpoint_address_target_kind", "__meta_kubernetes_endpoint_address_target_name"},
			"separator": ";", "regex": "Node;(.*)", "replacement": "${1}", "target_label": "node"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_endpoint_address_target_kind", "__meta_kubernetes_endpoint_address_target_name"},
			"separator": ";", "regex": "Pod;(.*)", "replacement": "${1}", "target_label": "pod"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "service"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "pod"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_pod_container_name"}, "target_label": "container"},
		map[string]any{"action": "drop", "source_labels": []string{"__meta_kubernetes_pod_phase"}, "regex": "(Failed|Succeeded)"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "job", "replacement": "${1}"},
	)
	if sm.Spec.JobLabel != "" {
		relabel = append(relabel, map[string]any{"source_labels": []string{"__meta_kubernetes_service_label_" + labelName(sm.Spec.JobLabel)},
			"target_label": "job", "regex": "(.+)", "replacement": "${1}"})
	}
	relabel = append(relabel, map[string]any{"target_label": "endpoint", "replacement": ep.Port})
	for _, r := range ep.Relabelings {
		relabel = append(relabel, map[string]any{"source_labels": r.SourceLabels, "target_label": r.TargetLabel})
	}
	return map[string]any{
		"job_name":        fmt.Sprintf("serviceMonitor/%s/%s/0", sm.Metadata.Namespace, sm.Metadata.Name),
		"scrape_interval": ep.Interval,
		"metrics_path":    ep.Path,
		"scheme":          ep.Scheme,
		"authorization":   map[string]any{"credentials_file": token},
		"tls_config":      map[string]any{"ca_file": ca, "server_name": ep.TLSConfig.ServerName},
		"file_sd_configs": []map[string]any{{"files": []string{sdFile}, "refresh_interval": "2s"}},
		"relabel_configs": relabel,
	}
}

// prometheusScrapes: a real Prometheus, configured as Prometheus Operator
// configures it from the shipped ServiceMonitor (targets as its Kubernetes
// discovery would find them, see discover), scrapes every node's pod
// over HTTPS with a ServiceAccount token that the shipped ClusterRole
// skewgate-metrics allows: every target is up as job "skewgate", with the
// labels the rule tests feed promtool, and the alerts on up{job="skewgate"}
// see them. A token without the binding is refused.
func prometheusScrapes(t *testing.T) {
	promBin := testenv.RequireCommand(t, "prometheus", "prometheus")
	c := admin(t)
	ctx := context.Background()
	var sm serviceMonitor
	readYAML(t, filepath.Join(monitoringDir, "servicemonitor.yaml"), &sm)
	var svc corev1.Service
	readYAML(t, filepath.Join(monitoringDir, "service.yaml"), &svc)
	var role rbacv1.ClusterRole
	readYAML(t, filepath.Join(monitoringDir, "metrics-rbac.yaml"), &role)
	if _, err := c.CoreV1().Services(svc.Namespace).Create(ctx, &svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	dir := filepath.Join(plane.Dir, "prometheus-e2e")
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	writeToken(t, c, "prometheus", role.Name, token)
	unbound := filepath.Join(dir, "unbound-token")
	writeToken(t, c, "stranger", "", unbound)

	waitEndpoints(t, c, svc.Namespace, svc.Name, len(plane.Spec.Nodes))
	sdFile := filepath.Join(dir, "endpoints.json")
	discover(t, c, sm.Spec.NamespaceSelector.MatchNames, sdFile)
	cfg := map[string]any{
		"global":         map[string]any{"scrape_interval": "2s", "evaluation_interval": "2s"},
		"rule_files":     []string{mustAbs(t, "../../../deploy/monitoring/alerts.yaml")},
		"scrape_configs": []any{scrapeConfig(sm, sdFile, token, plane.PKI.CAFile)},
	}
	unboundJob := scrapeConfig(sm, sdFile, unbound, plane.PKI.CAFile)
	// Its own job label: the same targets with the same labels would be
	// one series scraped by two jobs.
	unboundJob["job_name"] = "unbound"
	unboundJob["relabel_configs"] = append(unboundJob["relabel_configs"].([]map[string]any), map[string]any{"target_label": "job", "replacement": "unbound"})
	cfg["scrape_configs"] = append(cfg["scrape_configs"].([]any), unboundJob)
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("promtool", "check", "config", filepath.Join(dir, "prometheus.yml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config: %v\n%s\n%s", err, out, data)
	}
	proc, err := plane.StartAux("prometheus-e2e", promBin, []string{"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "data"), "--web.listen-address=" + promAddr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(proc.PID, syscall.SIGTERM) })

	want := len(plane.Spec.Nodes)
	var up []promSample
	deadline := time.Now().Add(90 * time.Second)
	for {
		up, err = promInstant(`up{job="skewgate"}`)
		up = slices.DeleteFunc(up, func(s promSample) bool { return len(s.Value) != 2 || s.Value[1] != "1" })
		if err == nil && len(up) == want {
			break
		}
		if time.Now().After(deadline) {
			targets, _ := promGet("/api/v1/targets", nil)
			t.Fatalf(`up{job="skewgate"} == 1: %d series, want %d (one per node) %v; targets:\n%s`, len(up), want, err, targets)
		}
		time.Sleep(time.Second)
	}
	// No container: the pod declares no ports (they would be host ports,
	// and maxSurge could not start a new pod beside the old one), so the
	// endpoint's port names no container.
	wantLabels := []string{"__name__", "endpoint", "instance", "job", "namespace", "pod", "service"}
	var nodes []string
	for _, s := range up {
		names := slices.Sorted(func(yield func(string) bool) {
			for k := range s.Metric {
				if !yield(k) {
					return
				}
			}
		})
		if !slices.Equal(names, wantLabels) || s.Metric["namespace"] != "kube-system" || s.Metric["service"] != "skewgate-metrics" ||
			s.Metric["endpoint"] != "metrics" || !strings.HasPrefix(s.Metric["pod"], "skewgate-") {
			t.Errorf("target labels %v, want exactly %v as alerts_test.yaml has them", s.Metric, wantLabels)
		}
		nodes = append(nodes, s.Metric["instance"])
	}
	t.Logf("Prometheus scraped skewgate over HTTPS with a ServiceAccount token: up{job=\"skewgate\"} on %v, labels %v", nodes, up[0].Metric)
	for _, q := range []string{`max(skewgate_members) > count(up{job="skewgate"} == 1)`, `absent(up{job="skewgate"} == 1)`} {
		if s, err := promInstant(q); err != nil || len(s) != 0 {
			t.Errorf("%s: %v %v, want nothing while every node's skewgate is up", q, s, err)
		}
	}
	if s, err := promInstant(`max(skewgate_members)`); err != nil || len(s) != 1 || s[0].Value[1] != fmt.Sprint(want) {
		t.Errorf("max(skewgate_members) = %v %v, want %d (SkewgateMissing compares it with the targets up)", s, err, want)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		s, err := promInstant(`up{job="unbound"}`)
		s = slices.DeleteFunc(s, func(s promSample) bool { return len(s.Value) != 2 || s.Value[1] != "0" })
		if err == nil && len(s) == want {
			break
		}
		if time.Now().After(deadline) {
			targets, _ := promGet("/api/v1/targets", nil)
			t.Fatalf("a token without skewgate-metrics: up == 0 on %d targets, want %d; targets:\n%s", len(s), want, targets)
		}
		time.Sleep(time.Second)
	}
	targets, _ := promGet("/api/v1/targets", url.Values{"state": {"active"}})
	if !strings.Contains(targets, "403") {
		t.Errorf("the unbound token's scrapes failed, but not with 403:\n%s", targets)
	}
}

// waitEndpoints waits until Endpoints ns/name list n ready addresses.
func waitEndpoints(t *testing.T, c kubernetes.Interface, ns, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		eps, err := c.CoreV1().Endpoints(ns).Get(context.Background(), name, metav1.GetOptions{})
		var ready int
		if err == nil {
			for _, sub := range eps.Subsets {
				ready += len(sub.Addresses)
			}
		}
		if ready == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Endpoints %s/%s: %d ready addresses, want %d (%v)", ns, name, ready, n, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// discover writes to path, as file_sd targets, what Prometheus's
// kubernetes_sd_configs role "endpoints" discovers in namespaces: every
// address and port of every Endpoints object, with the documented
// __meta_kubernetes_* labels of its Service, endpoint and Pod (container
// name and port when a container declares the port). Prometheus then
// applies the generated relabeling to them as it would to its own
// discoveries.
func discover(t *testing.T, c kubernetes.Interface, namespaces []string, path string) {
	t.Helper()
	ctx := context.Background()
	type group struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	var groups []group
	for _, ns := range namespaces {
		svcs, err := c.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, svc := range svcs.Items {
			eps, err := c.CoreV1().Endpoints(ns).Get(ctx, svc.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			} else if err != nil {
				t.Fatal(err)
			}
			for _, sub := range eps.Subsets {
				for _, addr := range sub.Addresses {
					for _, port := range sub.Ports {
						l := map[string]string{"__meta_kubernetes_namespace": ns, "__meta_kubernetes_service_name": svc.Name,
							"__meta_kubernetes_endpoints_name": eps.Name, "__meta_kubernetes_endpoint_port_name": port.Name,
							"__meta_kubernetes_endpoint_port_protocol": string(port.Protocol), "__meta_kubernetes_endpoint_ready": "true"}
						for k, v := range svc.Labels {
							l["__meta_kubernetes_service_label_"+labelName(k)] = v
							l["__meta_kubernetes_service_labelpresent_"+labelName(k)] = "true"
						}
						if ref := addr.TargetRef; ref != nil && ref.Kind == "Pod" {
							l["__meta_kubernetes_endpoint_address_target_kind"], l["__meta_kubernetes_endpoint_address_target_name"] = "Pod", ref.Name
							podLabels(t, c, ns, ref.Name, port.Port, l)
						}
						groups = append(groups, group{Targets: []string{fmt.Sprintf("%s:%d", addr.IP, port.Port)}, Labels: l})
					}
				}
			}
		}
	}
	data, err := json.Marshal(groups)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// podLabels adds the pod meta labels of the endpoints role for the pod
// serving port.
func podLabels(t *testing.T, c kubernetes.Interface, ns, name string, port int32, l map[string]string) {
	t.Helper()
	pod, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l["__meta_kubernetes_pod_name"], l["__meta_kubernetes_pod_ip"] = pod.Name, pod.Status.PodIP
	l["__meta_kubernetes_pod_node_name"], l["__meta_kubernetes_pod_host_ip"] = pod.Spec.NodeName, pod.Status.HostIP
	l["__meta_kubernetes_pod_phase"] = string(pod.Status.Phase)
	for _, ctr := range pod.Spec.Containers {
		for _, p := range ctr.Ports {
			if p.ContainerPort == port {
				l["__meta_kubernetes_pod_container_name"], l["__meta_kubernetes_pod_container_port_name"] = ctr.Name, p.Name
			}
		}
	}
}

// writeToken creates ServiceAccount monitoring/name, binds clusterRole to
// it (none: unbound) and writes a token of it to path.
func writeToken(t *testing.T, c kubernetes.Interface, name, clusterRole, path string) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "monitoring"}}
	if _, err := c.CoreV1().ServiceAccounts("monitoring").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if clusterRole != "" {
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: clusterRole + "-" + name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: "monitoring"}}}
		if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	hour := int64(3600)
	tr, err := c.CoreV1().ServiceAccounts("monitoring").CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
}

func promInstant(q string) ([]promSample, error) {
	body, err := promGet("/api/v1/query", url.Values{"query": {q}})
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string
		Data   struct{ Result []promSample }
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.Status != "success" {
		return nil, fmt.Errorf("query %s: %v %s", q, err, body)
	}
	return r.Data.Result, nil
}

func promGet(path string, q url.Values) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+promAddr+path+"?"+q.Encode(), nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
