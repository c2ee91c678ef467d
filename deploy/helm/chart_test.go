// Package helm_test checks the Helm chart deploy/helm/skewgate with the
// helm operators run (helm.sh/helm/v3, built from the Go module proxy into
// the lab cache, outside skewgate's go.mod): it lints, and its renders are
// the kustomize manifests' objects, field for field, so the two ways to
// install cannot drift apart.
package helm_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/deploy/kubernetes"
	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/lab/testenv"
)

const chart = "skewgate"

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helm is the path of helm lab.HelmVersion, built on first use (about two
// minutes on two cores, cached afterwards; `skewlab build --helm` builds it
// ahead). It skips only outside CI, when helm cannot be built here.
func helm(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		helmPath, helmErr = lab.EnsureHelm(ctx, lab.DefaultCacheDir(), os.Stderr)
	})
	if helmErr != nil {
		if testenv.InCI() {
			t.Fatalf("helm %s: %v", lab.HelmVersion, helmErr)
		}
		t.Skipf("helm %s cannot be built here (runs in CI): %v", lab.HelmVersion, helmErr)
	}
	return helmPath
}

// runHelm runs helm with args and returns its standard output.
func runHelm(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

// render is `helm template skewgate deploy/helm/skewgate` with --set
// values, as objects.
func render(t *testing.T, set ...string) objects {
	t.Helper()
	args := []string{"template", "skewgate", chart, "--namespace", "kube-system"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return parse(t, "helm "+strings.Join(args, " "), runHelm(t, args...))
}

// renderValues is `helm template` with a values file.
func renderValues(t *testing.T, values string) objects {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"template", "skewgate", chart, "--namespace", "kube-system", "-f", f}
	return parse(t, "helm template -f "+values, runHelm(t, args...))
}

// kustomize renders directories of deploy/kubernetes as `kubectl apply -k`
// does, as deploy/kubernetes's own tests do.
func kustomize(t *testing.T, dirs ...string) objects {
	t.Helper()
	all := objects{}
	for _, dir := range dirs {
		rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "../kubernetes/"+dir)
		if err != nil {
			t.Fatalf("kustomize build %s: %v", dir, err)
		}
		data, err := rm.AsYaml()
		if err != nil {
			t.Fatal(err)
		}
		for k, o := range parse(t, "kustomize build "+dir, data) {
			all[k] = o
		}
	}
	return all
}

// objects are parsed manifests by kind, namespace and name.
type objects map[string]map[string]any

func parse(t *testing.T, what string, data []byte) objects {
	t.Helper()
	objs := objects{}
	d := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var o map[string]any
		if err := d.Decode(&o); err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatalf("%s: %v", what, err)
		}
		if o == nil {
			continue
		}
		meta, _ := o["metadata"].(map[string]any)
		key := fmt.Sprintf("%s %v/%v", o["kind"], meta["namespace"], meta["name"])
		if _, dup := objs[key]; dup {
			t.Fatalf("%s: %s twice", what, key)
		}
		objs[key] = o
	}
	return objs
}

// requireSame fails t for every object in one set and not the other, and
// for every field where the two differ.
func requireSame(t *testing.T, got, want objects) {
	t.Helper()
	for _, k := range sortedKeys(want) {
		g, ok := got[k]
		if !ok {
			t.Errorf("the chart renders no %s", k)
			continue
		}
		if !reflect.DeepEqual(g, want[k]) {
			gy, _ := sigsyaml.Marshal(g)
			wy, _ := sigsyaml.Marshal(want[k])
			t.Errorf("%s differs: %s", k, firstDiff(string(gy), string(wy)))
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := want[k]; !ok {
			t.Errorf("the chart renders %s, which kustomize does not", k)
		}
	}
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		gl, wl := lineAt(g, i), lineAt(w, i)
		if gl != wl {
			return fmt.Sprintf("line %d of the sorted YAML is %q in the chart, %q in kustomize's", i+1, gl, wl)
		}
	}
	return "(equal as text)"
}

func lineAt(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end)"
}

func sortedKeys(o objects) []string {
	var keys []string
	for k := range o {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestLint: `helm lint --strict` passes with the defaults and with every
// optional part on.
func TestLint(t *testing.T) {
	for _, set := range [][]string{nil, {"monitoring.enabled=true", "switchPolicy.enabled=false", "kubeconfig.enabled=true"}} {
		args := []string{"lint", "--strict", chart}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		t.Logf("%s", runHelm(t, args...))
	}
}

// TestDefaultRenderIsTheBase: with its defaults the chart renders exactly
// the objects of `kubectl apply -k deploy/kubernetes`, the hardened
// DaemonSet included.
func TestDefaultRenderIsTheBase(t *testing.T) {
	got := render(t)
	requireSame(t, got, kustomize(t, "."))
	// Whatever namespace the release is installed in, skewgate's objects
	// are kube-system's (or default's, for the EndpointSlices' Role).
	args := []string{"template", "skewgate", chart, "--namespace", "elsewhere"}
	requireSame(t, parse(t, "helm template -n elsewhere", runHelm(t, args...)), got)
}

// TestMonitoringIsTheOverlay: monitoring.enabled renders
// deploy/kubernetes/monitoring's objects (the base's, the metrics Service,
// ServiceMonitor, RBAC, the generated PrometheusRule and dashboard).
func TestMonitoringIsTheOverlay(t *testing.T) {
	requireSame(t, render(t, "monitoring.enabled=true"), kustomize(t, "monitoring"))
}

// TestSwitchPolicyOff: switchPolicy.enabled=false renders the base without
// its switch policy and binding, and nothing else changes.
func TestSwitchPolicyOff(t *testing.T) {
	want := kustomize(t, ".")
	for _, key := range []string{"ValidatingAdmissionPolicy <nil>/skewgate-switch-writers", "ValidatingAdmissionPolicyBinding <nil>/skewgate-switch-writers"} {
		if _, ok := want[key]; !ok {
			t.Fatalf("the base renders no %s", key)
		}
		delete(want, key)
	}
	requireSame(t, render(t, "switchPolicy.enabled=false"), want)
}

// TestImageRepositoryRequired: the chart names no image it was not told
// (an empty image.repository fails the render, naming the default), and a
// digest pins the image as repository:tag@digest.
func TestImageRepositoryRequired(t *testing.T) {
	cmd := exec.Command(helm(t), "template", "skewgate", chart, "--set", "image.repository=")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "image.repository is required") {
		t.Errorf("helm template with image.repository empty: %v\n%s", err, out)
	}
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	ds := as[appsv1.DaemonSet](t, render(t, "image.tag=v9.9.9", "image.digest="+digest), dsKey)
	if got, want := ds.Spec.Template.Spec.Containers[0].Image, kubernetes.DefaultRepository+":v9.9.9@"+digest; got != want {
		t.Errorf("image %s, want %s", got, want)
	}
}

// TestChartVersion: the chart's appVersion, which tags the image by
// default, is the Makefile's RELEASE, which the kustomize manifests name.
func TestChartVersion(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^RELEASE\s*:=\s*(\S+)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("Makefile: no RELEASE := …")
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	data, err := os.ReadFile(chart + "/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := sigsyaml.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	if c.AppVersion != string(m[1]) {
		t.Errorf("Chart.yaml appVersion %q, Makefile RELEASE %q", c.AppVersion, m[1])
	}
}

// as converts a rendered object into its typed form.
func as[T any](t *testing.T, objs objects, key string) *T {
	t.Helper()
	o, ok := objs[key]
	if !ok {
		t.Fatalf("no %s rendered", key)
	}
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o, &v, true); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return &v
}

const dsKey = "DaemonSet kube-system/skewgate"

// TestValues: what operators change reaches the objects: the image, the
// mode and extra flags, the local apiserver, host paths, scheduling,
// resources, the kubeadm-user credential of the static-pod form, and
// monitoring's selector label and Prometheus.
func TestValues(t *testing.T) {
	objs := renderValues(t, `
image: {repository: registry.example/skewgate, tag: v9.9.9, pullPolicy: Always}
steeringMode: always
localAPIServer: {url: "https://127.0.0.1:6444", serverName: apiserver.example}
extraArgs: [--steering-window-hold=15m]
hostPaths: {pkiDir: /srv/pki}
nodeSelector: {node-role.kubernetes.io/control-plane: null, role: apiserver}
tolerations: [{operator: Exists}]
resources: {limits: {memory: 512Mi}}
podLabels: {team: platform}
commonLabels: {owner: sre}
kubeconfig: {enabled: true, user: "system:skewgate-cp"}
monitoring:
  enabled: true
  selectorLabels: {release: prom}
  prometheus: {serviceAccount: prom-sa, namespace: observability}
switchPolicy: {enabled: true, writers: [ops]}
`)
	ds := as[appsv1.DaemonSet](t, objs, dsKey)
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	if c.Image != "registry.example/skewgate:v9.9.9" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image %s (%s)", c.Image, c.ImagePullPolicy)
	}
	for _, arg := range []string{
		"--steering-mode=always", "--local-apiserver=https://127.0.0.1:6444",
		"--local-apiserver-server-name=apiserver.example", "--steering-window-hold=15m",
		"--kubeconfig=/etc/kubernetes/skewgate.conf",
	} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v: no %s", c.Args, arg)
		}
	}
	if !reflect.DeepEqual(spec.NodeSelector, map[string]string{"role": "apiserver"}) ||
		len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists {
		t.Errorf("nodeSelector %v, tolerations %v", spec.NodeSelector, spec.Tolerations)
	}
	if got := c.Resources.Limits.Memory().String(); got != "512Mi" {
		t.Errorf("memory limit %s", got)
	}
	if ds.Spec.Template.Labels["team"] != "platform" || ds.Labels["owner"] != "sre" {
		t.Errorf("pod labels %v, labels %v", ds.Spec.Template.Labels, ds.Labels)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("kubeconfig.enabled: the ServiceAccount token is still mounted")
	}
	hostFiles := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil && v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathFile {
			hostFiles[v.Name] = v.HostPath.Path
		}
	}
	if len(hostFiles) != 7 || hostFiles["kubeconfig"] != "/etc/kubernetes/skewgate.conf" {
		t.Errorf("hostPath files %v: want the six pki files and the kubeconfig", hostFiles)
	}
	for name, path := range hostFiles {
		if name != "kubeconfig" && !strings.HasPrefix(path, "/srv/pki/") {
			t.Errorf("volume %s: %s, not under hostPaths.pkiDir", name, path)
		}
	}
	for _, key := range []string{
		"RoleBinding default/skewgate", "RoleBinding kube-system/skewgate", "RoleBinding skewgate/skewgate",
		"ClusterRoleBinding <nil>/skewgate:auth-delegator", "ClusterRoleBinding <nil>/skewgate",
	} {
		subj := as[rbacv1.RoleBinding](t, objs, key).Subjects
		if len(subj) != 1 || subj[0].Kind != rbacv1.UserKind || subj[0].Name != "system:skewgate-cp" {
			t.Errorf("%s: subjects %+v, want the kubeconfig's user", key, subj)
		}
	}
	for _, key := range []string{"ServiceMonitor kube-system/skewgate", "PrometheusRule kube-system/skewgate"} {
		if labels := objs[key]["metadata"].(map[string]any)["labels"].(map[string]any); labels["release"] != "prom" || labels["owner"] != "sre" {
			t.Errorf("%s: labels %v, want release: prom", key, labels)
		}
	}
	subj := as[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding <nil>/skewgate-metrics").Subjects
	if len(subj) != 1 || subj[0].Name != "prom-sa" || subj[0].Namespace != "observability" {
		t.Errorf("skewgate-metrics bound to %+v, want observability/prom-sa", subj)
	}
	vap := objs["ValidatingAdmissionPolicy <nil>/skewgate-switch-writers"]
	if got := vap["spec"].(map[string]any)["variables"].([]any)[0].(map[string]any)["expression"]; got != "['ops']" {
		t.Errorf("switch policy writers %v, want ['ops']", got)
	}
}
