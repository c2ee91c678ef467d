package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/lab"
	"github.com/skewgate/skewgate/proxy"
)

// TestSwitchPolicyOnALab: on a real apiserver, a user whose Role writes
// every ConfigMap in kube-system (as cluster-autoscaler's, or `edit` bound
// there) turns steering off on every node with RBAC alone — node-a's
// skewgate reads and counts the change; with the base's admission policy
// applied that user is refused every create, update and delete of the
// switch, and only the operator group may write it, and only values
// skewgate takes.
func TestSwitchPolicyOnALab(t *testing.T) {
	ctx := context.Background()
	cfg := restConfig(t, node(t, "node-b").URL())
	admin := kubernetes.NewForConfigOrDie(cfg)
	const role = "skewgate-test-configmap-writer"
	rules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
		Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}
	if _, err := admin.RbacV1().Roles("kube-system").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.RbacV1().Roles("kube-system").Delete(context.Background(), role, metav1.DeleteOptions{}) })
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "eve", APIGroup: rbacv1.GroupName}, {Kind: rbacv1.UserKind, Name: "olivia", APIGroup: rbacv1.GroupName}}}
	if _, err := admin.RbacV1().RoleBindings("kube-system").Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.RbacV1().RoleBindings("kube-system").Delete(context.Background(), role, metav1.DeleteOptions{})
	})
	as := func(name string, groups ...string) kubernetes.Interface {
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: name, Groups: append(groups, "system:authenticated")}
		return kubernetes.NewForConfigOrDie(c)
	}
	eve, operator := as("eve"), as("olivia", "skewgate:operators")
	switchCM := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: proxy.SwitchConfigMap, Namespace: "kube-system"}, Data: data}
	}
	cms := func(c kubernetes.Interface) func(ctx context.Context, cm *corev1.ConfigMap) error {
		return func(ctx context.Context, cm *corev1.ConfigMap) error {
			_, err := c.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{})
			return err
		}
	}
	t.Cleanup(func() {
		admin.CoreV1().ConfigMaps("kube-system").Delete(context.Background(), proxy.SwitchConfigMap, metav1.DeleteOptions{})
	})

	// Without the policy: RBAC alone lets eve turn every node off.
	changes := `skewgate_switch_changes_total{key="steering"}`
	a := node(t, "node-a")
	before := metricValues(lab.SkewgateAdminURL(a)+"/metrics", changes)[changes]
	if err := cms(eve)(ctx, switchCM(map[string]string{"steering": "always"})); err != nil {
		t.Fatalf("without the policy, eve creates the switch: %v", err)
	}
	patch := []byte(`{"data":{"steering":"off"}}`)
	if _, err := eve.CoreV1().ConfigMaps("kube-system").Patch(ctx, proxy.SwitchConfigMap, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("without the policy, eve turns steering off: %v", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for metricValues(lab.SkewgateAdminURL(a)+"/metrics", changes)[changes] < before+1 {
		if time.Now().After(deadline) {
			t.Fatalf("node-a's skewgate never counted eve's change of the switch (%s stayed %v)", changes, before)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("without the policy: eve created the switch and turned steering off; node-a counted it")
	if err := eve.CoreV1().ConfigMaps("kube-system").Delete(ctx, proxy.SwitchConfigMap, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("without the policy, eve deletes the switch: %v", err)
	}

	applySwitchPolicy(t, cfg)
	// The policy takes effect once the apiserver's admission informer has
	// it: poll with dry runs.
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	deadline = time.Now().Add(30 * time.Second)
	for {
		_, err := eve.CoreV1().ConfigMaps("kube-system").Create(ctx, switchCM(map[string]string{"steering": "off"}), dry)
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy never took effect: eve's dry-run create %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}

	if err := cms(eve)(ctx, switchCM(map[string]string{"steering": "off"})); !apierrors.IsForbidden(err) {
		t.Errorf("with the policy, eve creates the switch: %v, want forbidden", err)
	}
	if err := cms(operator)(ctx, switchCM(map[string]string{"steering": "always"})); err != nil {
		t.Fatalf("with the policy, an operator arms the cluster: %v", err)
	}
	if _, err := eve.CoreV1().ConfigMaps("kube-system").Patch(ctx, proxy.SwitchConfigMap, types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("with the policy, eve turns steering off: %v, want forbidden", err)
	}
	if err := eve.CoreV1().ConfigMaps("kube-system").Delete(ctx, proxy.SwitchConfigMap, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("with the policy, eve deletes the switch: %v, want forbidden", err)
	}
	for _, bad := range []string{`{"data":{"steering":"Off"}}`, `{"data":{"steeering":"off"}}`, `{"data":{"rollback-grace-until":"10m"}}`} {
		if _, err := operator.CoreV1().ConfigMaps("kube-system").Patch(ctx, proxy.SwitchConfigMap, types.MergePatchType, []byte(bad), metav1.PatchOptions{}); err == nil {
			t.Errorf("with the policy, an operator writes %s: allowed, want refused", bad)
		}
	}
	good := fmt.Sprintf(`{"data":{"steering":"off","rollback-grace-until":%q}}`, time.Now().UTC().Format(time.RFC3339))
	if _, err := operator.CoreV1().ConfigMaps("kube-system").Patch(ctx, proxy.SwitchConfigMap, types.MergePatchType, []byte(good), metav1.PatchOptions{}); err != nil {
		t.Errorf("with the policy, an operator writes %s: %v", good, err)
	}
	if err := operator.CoreV1().ConfigMaps("kube-system").Delete(ctx, proxy.SwitchConfigMap, metav1.DeleteOptions{}); err != nil {
		t.Errorf("with the policy, an operator deletes the switch: %v", err)
	}
	// Other ConfigMaps of kube-system are eve's as before.
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "skewgate-test-other"}, Data: map[string]string{"steering": "off"}}
	if _, err := eve.CoreV1().ConfigMaps("kube-system").Create(ctx, other, dry); err != nil {
		t.Errorf("with the policy, eve creates another ConfigMap: %v", err)
	}
}

// applySwitchPolicy creates the base's switch policy and binding on the
// apiserver for real, until the test ends.
func applySwitchPolicy(t *testing.T, cfg *rest.Config) {
	t.Helper()
	mapper := restMapper(t, cfg)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range render(t, deployDir) {
		if o.GetKind() != "ValidatingAdmissionPolicy" && o.GetKind() != "ValidatingAdmissionPolicyBinding" {
			continue
		}
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatal(err)
		}
		res := dyn.Resource(m.Resource)
		if _, err := res.Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		t.Cleanup(func() { res.Delete(context.Background(), o.GetName(), metav1.DeleteOptions{}) })
		n++
	}
	if n != 2 {
		t.Fatalf("the base renders %d of the switch policy's objects, want the policy and its binding", n)
	}
}
