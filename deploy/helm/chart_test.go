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
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"

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
	for _, set := range [][]string{nil, {"monitoring.enabled=true", "switchPolicy.enabled=true", "kubeconfig.enabled=true"}} {
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

// TestSwitchPolicyIsTheKustomization: switchPolicy.enabled adds
// deploy/kubernetes/switch-policy's policy and binding to the base.
func TestSwitchPolicyIsTheKustomization(t *testing.T) {
	requireSame(t, render(t, "switchPolicy.enabled=true"), kustomize(t, ".", "switch-policy"))
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
