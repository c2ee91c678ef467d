package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/skewgate/skewgate/proxy/membership"
	upgradesignal "github.com/skewgate/skewgate/proxy/upgrade"
)

const deployDir = "../../deploy/kubernetes"

// render builds the kustomization in dir as `kubectl apply -k` would.
func render(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range rm.Resources() {
		// Through JSON: kustomize's maps hold int, which unstructured
		// cannot deep-copy.
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, u)
	}
	return objs
}

// uninstallJob is deploy/kubernetes/uninstall rendered (its image set by
// its images:) for node, as the documented loop makes it.
func uninstallJob(t *testing.T, node string) *unstructured.Unstructured {
	t.Helper()
	objs := render(t, deployDir+"/uninstall")
	if len(objs) != 1 {
		t.Fatalf("deploy/kubernetes/uninstall renders %d objects, want the Job", len(objs))
	}
	data, err := objs[0].MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(strings.ReplaceAll(string(data), "NODE", node))); err != nil {
		t.Fatal(err)
	}
	return u
}

// dryRunCreate creates obj on the server with dry run and strict field
// validation: admission, defaulting and validation run, nothing is stored.
func dryRunCreate(ctx context.Context, cfg *rest.Config, mapper meta.RESTMapper, obj *unstructured.Unstructured) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	gvk := obj.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	_, err = dyn.Resource(m.Resource).Namespace(obj.GetNamespace()).Create(ctx, obj,
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict})
	return err
}

func restMapper(t *testing.T, cfg *rest.Config) meta.RESTMapper {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
}

// TestDeployDryRun: every object `kubectl apply -k deploy/kubernetes`
// creates, and the uninstall Job, pass server-side dry-run with strict
// field validation on both apiserver versions.
func TestDeployDryRun(t *testing.T) {
	objs := append(render(t, deployDir), uninstallJob(t, "node-a"))
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind())
	}
	for _, want := range []string{"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "Job"} {
		if !slices.Contains(kinds, want) {
			t.Fatalf("rendered %v: no %s", kinds, want)
		}
	}
	for _, name := range []string{"node-a", "node-b"} {
		n := node(t, name)
		t.Run(name+" "+n.Version, func(t *testing.T) {
			cfg := restConfig(t, n.URL())
			mapper := restMapper(t, cfg)
			for _, o := range objs {
				if err := dryRunCreate(context.Background(), cfg, mapper, o); err != nil {
					t.Errorf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
			// The check has teeth: a misspelt field is refused.
			bad := daemonSet(t, objs).DeepCopy()
			unstructured.SetNestedField(bad.Object, "x", "spec", "template", "spec", "hostNetwrok")
			if err := dryRunCreate(context.Background(), cfg, mapper, bad); err == nil || !strings.Contains(err.Error(), "hostNetwrok") {
				t.Errorf("a DaemonSet with a misspelt field: %v, want it refused", err)
			}
		})
	}
}

func daemonSet(t *testing.T, objs []*unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" {
			return o
		}
	}
	t.Fatal("no DaemonSet rendered")
	return nil
}

// TestDeployMonitoringOverlay: the overlay renders the base (its admin
// listener secure, on the node IP) plus the metrics Service, ServiceMonitor,
// ClusterRole and dashboard ConfigMap, and the PrometheusRule; everything
// but prometheus-operator's ServiceMonitor and PrometheusRule (no CRDs in
// the lab) passes dry-run.
func TestDeployMonitoringOverlay(t *testing.T) {
	objs := render(t, deployDir+"/monitoring")
	var rest []*unstructured.Unstructured
	var sawMonitor, sawRule, sawService bool
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceMonitor":
			sawMonitor = true
			continue
		case "PrometheusRule":
			sawRule = true
			continue
		case "Service":
			sawService = true
		case "DaemonSet":
			checkSecureAdmin(t, o)
		}
		rest = append(rest, o)
	}
	if !sawMonitor || !sawRule || !sawService {
		t.Fatalf("overlay: ServiceMonitor %t, PrometheusRule %t, Service %t", sawMonitor, sawRule, sawService)
	}
	cfg := restConfig(t, node(t, "node-b").URL())
	mapper := restMapper(t, cfg)
	for _, o := range rest {
		if err := dryRunCreate(context.Background(), cfg, mapper, o); err != nil {
			t.Errorf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
}

func checkSecureAdmin(t *testing.T, ds *unstructured.Unstructured) {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	for _, want := range []string{"--secure-admin-address=$(NODE_IP):16444", "--metrics-bind-address="} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v: want %s (the admin listener secure, on the node IP; no plain one)", args, want)
		}
	}
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		if scheme, _, _ := unstructured.NestedString(c, probe, "httpGet", "scheme"); scheme != "HTTPS" {
			t.Errorf("%s scheme %q, want HTTPS", probe, scheme)
		}
	}
}

// TestDeployRBAC creates the base's ServiceAccount and RBAC on node-b for
// real and acts as the ServiceAccount: what skewgate reads is allowed
// (list and watch of the ConfigMap by a metadata.name field selector
// included, which resourceNames permits, and of the built-in APIServices),
// anything more is forbidden (an APIService's get, update or create too).
func TestDeployRBAC(t *testing.T) {
	ctx := context.Background()
	cfg := restConfig(t, node(t, "node-b").URL())
	mapper := restMapper(t, cfg)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range render(t, deployDir) {
		if o.GetKind() == "DaemonSet" {
			continue
		}
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatal(err)
		}
		res := dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		if _, err := res.Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		t.Cleanup(func() { res.Delete(context.Background(), o.GetName(), metav1.DeleteOptions{}) })
	}
	sa := rest.CopyConfig(cfg)
	sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:kube-system:skewgate"}
	c := kubernetes.NewForConfigOrDie(sa)
	apiServices := dynamic.NewForConfigOrDie(sa).Resource(membership.APIServicesGVR)
	onStart := metav1.ListOptions{LabelSelector: membership.AutoManagedLabel + "=" + membership.AutoManagedOnStart}
	byName := metav1.ListOptions{FieldSelector: "metadata.name=extension-apiserver-authentication"}
	allowed := map[string]func() error{
		"list endpointslices in default": func() error {
			_, err := c.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
			return err
		},
		"watch endpointslices in default": func() error {
			return watchOnce(c.DiscoveryV1().EndpointSlices("default").Watch(ctx, metav1.ListOptions{}))
		},
		"list leases in kube-system": func() error {
			_, err := c.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "apiserver.kubernetes.io/identity=kube-apiserver"})
			return err
		},
		"watch leases in kube-system": func() error {
			return watchOnce(c.CoordinationV1().Leases("kube-system").Watch(ctx, metav1.ListOptions{}))
		},
		"get the requestheader configmap": func() error {
			_, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
			return err
		},
		"list it by name": func() error { _, err := c.CoreV1().ConfigMaps("kube-system").List(ctx, byName); return err },
		// The secure admin listener's delegation (system:auth-delegator).
		"create a tokenreview": func() error {
			_, err := c.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "not-a-token"}}, metav1.CreateOptions{})
			return err
		},
		"create a subjectaccessreview": func() error {
			_, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: "system:anonymous", NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}}, metav1.CreateOptions{})
			return err
		},
		"watch it by name": func() error { return watchOnce(c.CoreV1().ConfigMaps("kube-system").Watch(ctx, byName)) },
		// Its node's upgrade lease (proxy/upgrade), through its life:
		// created, read, renewed, deleted.
		"write an upgrade lease": func() error {
			leases := c.CoordinationV1().Leases("kube-system")
			l, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: upgradesignal.LeaseName("rbac-check"),
				Labels: map[string]string{upgradesignal.Label: "true"}}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			defer leases.Delete(context.Background(), l.Name, metav1.DeleteOptions{})
			if l, err = leases.Get(ctx, l.Name, metav1.GetOptions{}); err != nil {
				return err
			}
			if _, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
				return err
			}
			return leases.Delete(ctx, l.Name, metav1.DeleteOptions{})
		},
		// kubeadm's upgrade announcement (proxy/upgrade/announce.go):
		// kube-system's Jobs, by no name (a prefix cannot be selected).
		"list jobs in kube-system": func() error {
			_, err := c.BatchV1().Jobs("kube-system").List(ctx, metav1.ListOptions{})
			return err
		},
		"watch jobs in kube-system": func() error {
			return watchOnce(c.BatchV1().Jobs("kube-system").Watch(ctx, metav1.ListOptions{}))
		},
		// The cluster's steering switch, followed by name.
		"list the steering switch by name": func() error {
			_, err := c.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=skewgate"})
			return err
		},
		"watch the steering switch by name": func() error {
			return watchOnce(c.CoreV1().ConfigMaps("kube-system").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=skewgate"}))
		},
		// The groups kube-apiserver serves itself (proxy/membership/builtin.go).
		"list the built-in apiservices":  func() error { _, err := apiServices.List(ctx, onStart); return err },
		"watch the built-in apiservices": func() error { return watchOnce(apiServices.Watch(ctx, onStart)) },
	}
	forbidden := map[string]func() error{
		"get an apiservice": func() error { _, err := apiServices.Get(ctx, "v1.apps", metav1.GetOptions{}); return err },
		"update an apiservice": func() error {
			_, err := apiServices.Update(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
				"metadata": map[string]any{"name": "v1.apps"}}}, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		},
		"create an apiservice": func() error {
			_, err := apiServices.Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
				"metadata": map[string]any{"name": "v1.rbac-check.example.com"}, "spec": map[string]any{"group": "rbac-check.example.com", "version": "v1", "groupPriorityMinimum": 1000, "versionPriority": 15}}},
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		},
		"list every configmap in kube-system": func() error {
			_, err := c.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
			return err
		},
		"get another configmap": func() error {
			_, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			return err
		},
		"get an endpointslice": func() error {
			_, err := c.DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
			return err
		},
		"list leases in default": func() error {
			_, err := c.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{})
			return err
		},
		"list jobs in default": func() error {
			_, err := c.BatchV1().Jobs("default").List(ctx, metav1.ListOptions{})
			return err
		},
		"get a job in kube-system": func() error {
			_, err := c.BatchV1().Jobs("kube-system").Get(ctx, "upgrade-health-check", metav1.GetOptions{})
			return err
		},
		"list secrets": func() error { _, err := c.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); return err },
		"delete an endpointslice": func() error {
			return c.DiscoveryV1().EndpointSlices("default").Delete(ctx, "kubernetes", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		},
	}
	for what, do := range allowed {
		if err := do(); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	for what, do := range forbidden {
		if err := do(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want forbidden", what, err)
		}
	}
}

func watchOnce(w interface{ Stop() }, err error) error {
	if err == nil {
		w.Stop()
	}
	return err
}
