package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
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
	for _, want := range []string{"Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "Job"} {
		if !slices.Contains(kinds, want) {
			t.Fatalf("rendered %v: no %s", kinds, want)
		}
	}
	for _, name := range []string{"node-a", "node-b"} {
		n := node(t, name)
		t.Run(name+" "+n.Version, func(t *testing.T) {
			cfg := restConfig(t, n.URL())
			mapper := restMapper(t, cfg)
			ensureNamespaces(t, cfg, objs) // a dry-run create needs its namespace
			for _, o := range objs {
				err := dryRunCreate(context.Background(), cfg, mapper, o)
				if o.GetKind() == "Namespace" && apierrors.IsAlreadyExists(err) {
					continue // created for real just before, as it was rendered
				}
				if err != nil {
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
	ensureNamespaces(t, cfg, rest) // a dry-run create needs its namespace
	for _, o := range rest {
		err := dryRunCreate(context.Background(), cfg, mapper, o)
		if o.GetKind() == "Namespace" && apierrors.IsAlreadyExists(err) {
			continue // created for real, here or by an earlier test: never deleted
		}
		if err != nil {
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

// ensureNamespaces creates, for real, every Namespace among objs that does
// not exist yet. They are never deleted: the lab runs no namespace
// controller, so a deleted namespace would stay Terminating and refuse
// every later create in it.
func ensureNamespaces(t *testing.T, cfg *rest.Config, objs []*unstructured.Unstructured) {
	t.Helper()
	c := kubernetes.NewForConfigOrDie(cfg)
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			continue
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.GetName(), Labels: o.GetLabels()}}
		if _, err := c.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create namespace %s: %v", o.GetName(), err)
		}
	}
}

// skewgateSA is who the base's ServiceAccount authenticates as.
var skewgateSA = struct {
	name   string
	groups []string
}{"system:serviceaccount:kube-system:skewgate", []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}

// access is one question to the authorizer about skewgate's ServiceAccount.
type access struct {
	verb, group, resource, namespace, name string
}

func (a access) String() string {
	return strings.TrimSpace(fmt.Sprintf("%s %s.%s %s/%s", a.verb, a.resource, a.group, a.namespace, a.name))
}

// allowedFor asks the apiserver, with a SubjectAccessReview, whether
// skewgate's ServiceAccount may do a.
func allowedFor(ctx context.Context, c kubernetes.Interface, a access) (bool, string, error) {
	r, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: skewgateSA.name, Groups: skewgateSA.groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: a.verb, Group: a.group, Resource: a.resource, Namespace: a.namespace, Name: a.name},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, "", err
	}
	return r.Status.Allowed, r.Status.Reason, nil
}

// TestDeployRBAC creates the base's Namespace, ServiceAccount and RBAC on
// node-b for real and asks the apiserver's authorizer, with
// SubjectAccessReviews, what skewgate's ServiceAccount may do: everything
// skewgate does (proxy/membership, proxy/cluster.go, proxy/steeringswitch.go,
// proxy/upgrade, the admin listener's delegation) is allowed; writing the
// controller-manager's, the scheduler's or an apiserver's Lease, creating
// any Lease in kube-system, reading every ConfigMap or a Secret, writing
// the switch, patching or deleting its leases wholesale, and anything on
// APIServices but listing and watching them, are denied. It then
// acts as the ServiceAccount (impersonated) for the reads and its
// lease's life, and is refused the rest: the review and the request agree.
func TestDeployRBAC(t *testing.T) {
	ctx := context.Background()
	cfg := restConfig(t, node(t, "node-b").URL())
	mapper := restMapper(t, cfg)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	objs := render(t, deployDir)
	ensureNamespaces(t, cfg, objs)
	for _, o := range objs {
		switch o.GetKind() {
		case "DaemonSet", "Namespace", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			continue // TestSwitchPolicyOnALab applies the policy
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

	admin := kubernetes.NewForConfigOrDie(cfg)
	identity, err := admin.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "apiserver.kubernetes.io/identity=kube-apiserver"})
	if err != nil || len(identity.Items) == 0 {
		t.Fatalf("the apiservers' identity leases: %v (%d)", err, len(identity.Items))
	}
	apiserverLease := identity.Items[0].Name
	ns, own := upgradesignal.LeaseNamespace, upgradesignal.LeaseName("node-a")
	const lease, coord = "leases", "coordination.k8s.io"
	var allowed, denied []access
	for _, v := range []string{"get", "list", "watch", "create", "update", "delete"} {
		allowed = append(allowed, access{v, coord, lease, ns, own})
	}
	allowed = append(allowed,
		access{"create", coord, lease, ns, ""}, // a create names nothing the authorizer sees
		access{"list", coord, lease, "kube-system", ""}, access{"watch", coord, lease, "kube-system", ""},
		access{"get", "", "configmaps", "kube-system", "extension-apiserver-authentication"},
		access{"list", "", "configmaps", "kube-system", "extension-apiserver-authentication"},
		access{"watch", "", "configmaps", "kube-system", "extension-apiserver-authentication"},
		access{"list", "", "configmaps", "kube-system", "skewgate"}, access{"watch", "", "configmaps", "kube-system", "skewgate"},
		access{"list", "batch", "jobs", "kube-system", ""}, access{"watch", "batch", "jobs", "kube-system", ""},
		access{"list", "discovery.k8s.io", "endpointslices", "default", ""}, access{"watch", "discovery.k8s.io", "endpointslices", "default", ""},
		access{"create", "authentication.k8s.io", "tokenreviews", "", ""},
		access{"create", "authorization.k8s.io", "subjectaccessreviews", "", ""},
		// The groups kube-apiserver serves itself (proxy/membership/builtin.go).
		access{"list", "apiregistration.k8s.io", "apiservices", "", ""}, access{"watch", "apiregistration.k8s.io", "apiservices", "", ""},
	)
	for _, name := range []string{"kube-controller-manager", "kube-scheduler", apiserverLease} {
		for _, v := range []string{"update", "patch", "delete"} {
			denied = append(denied, access{v, coord, lease, "kube-system", name})
		}
	}
	denied = append(denied,
		access{"create", coord, lease, "kube-system", ""},
		access{"get", coord, lease, "kube-system", "kube-controller-manager"},
		access{"deletecollection", coord, lease, "kube-system", ""},
		access{"patch", coord, lease, ns, own}, access{"deletecollection", coord, lease, ns, ""},
		access{"list", coord, lease, "default", ""},
		access{"list", "", "configmaps", "kube-system", ""}, access{"list", "", "configmaps", "", ""},
		access{"get", "", "configmaps", "kube-system", "kube-root-ca.crt"},
		access{"get", "", "configmaps", "kube-system", "skewgate"},
		access{"create", "", "configmaps", "kube-system", ""},
		access{"update", "", "configmaps", "kube-system", "skewgate"}, access{"delete", "", "configmaps", "kube-system", "skewgate"},
		access{"get", "", "secrets", "kube-system", "any"}, access{"list", "", "secrets", "kube-system", ""}, access{"list", "", "secrets", "", ""},
		access{"list", "", "secrets", ns, ""}, access{"create", "", "configmaps", ns, ""},
		access{"get", "batch", "jobs", "kube-system", "upgrade-health-check"}, access{"list", "batch", "jobs", "default", ""},
		access{"get", "discovery.k8s.io", "endpointslices", "default", "kubernetes"},
		access{"delete", "discovery.k8s.io", "endpointslices", "default", "kubernetes"},
		access{"get", "apiregistration.k8s.io", "apiservices", "", "v1.apps"},
		access{"update", "apiregistration.k8s.io", "apiservices", "", "v1.apps"},
		access{"create", "apiregistration.k8s.io", "apiservices", "", ""},
	)
	for _, a := range allowed {
		if ok, reason, err := allowedFor(ctx, admin, a); err != nil || !ok {
			t.Errorf("SubjectAccessReview %s: allowed %v (%s) %v, want allowed", a, ok, reason, err)
		}
	}
	for _, a := range denied {
		if ok, reason, err := allowedFor(ctx, admin, a); err != nil || ok {
			t.Errorf("SubjectAccessReview %s: allowed %v (%s) %v, want denied", a, ok, reason, err)
		}
	}

	sa := rest.CopyConfig(cfg)
	sa.Impersonate = rest.ImpersonationConfig{UserName: skewgateSA.name, Groups: skewgateSA.groups}
	c := kubernetes.NewForConfigOrDie(sa)
	apiServices := dynamic.NewForConfigOrDie(sa).Resource(membership.APIServicesGVR)
	onStart := metav1.ListOptions{LabelSelector: membership.AutoManagedLabel + "=" + membership.AutoManagedOnStart}
	byName := metav1.ListOptions{FieldSelector: "metadata.name=extension-apiserver-authentication"}
	requests := map[string]func() error{
		"list the built-in apiservices":  func() error { _, err := apiServices.List(ctx, onStart); return err },
		"watch the built-in apiservices": func() error { return watchOnce(apiServices.Watch(ctx, onStart)) },
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
		"list it by name":  func() error { _, err := c.CoreV1().ConfigMaps("kube-system").List(ctx, byName); return err },
		"watch it by name": func() error { return watchOnce(c.CoreV1().ConfigMaps("kube-system").Watch(ctx, byName)) },
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
		// Its node's upgrade lease (proxy/upgrade), through its life:
		// created, read, renewed, deleted; and every node's followed.
		"write an upgrade lease": func() error {
			leases := c.CoordinationV1().Leases(ns)
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
		"watch the upgrade leases": func() error {
			return watchOnce(c.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{LabelSelector: upgradesignal.Label + "=true"}))
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
	}
	dryRun := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	refused := map[string]func() error{
		"update an apiserver's identity lease": func() error {
			l := identity.Items[0].DeepCopy()
			_, err := c.CoordinationV1().Leases("kube-system").Update(ctx, l, dryRun)
			return err
		},
		"create a lease in kube-system": func() error {
			_, err := c.CoordinationV1().Leases("kube-system").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kube-scheduler"}},
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		},
		"list every configmap in kube-system": func() error {
			_, err := c.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
			return err
		},
		"list secrets": func() error { _, err := c.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); return err },
		"delete an endpointslice": func() error {
			return c.DiscoveryV1().EndpointSlices("default").Delete(ctx, "kubernetes", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		},
	}
	for what, do := range requests {
		if err := do(); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	for what, do := range refused {
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
