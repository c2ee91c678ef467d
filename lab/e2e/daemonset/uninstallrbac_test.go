package daemonset

import (
	"context"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/proxy/removal"
)

// uninstaller is the user `kubectl skewgate uninstall` runs as (--as) in
// the kustomize round: it holds removal.Permissions and nothing else.
const uninstaller = "skewgate-e2e-uninstaller"

// grantUninstall gives uninstaller exactly removal.Permissions, as RBAC
// an operator would write from docs/security.md's "Who may uninstall" (a
// ClusterRole for the cluster-scoped rows, a Role per namespace; a
// resourceName where the request names its object), and asks the
// apiserver with SubjectAccessReviews that each is allowed and that what
// the table says the grant does not reach is denied. The uninstall that
// follows, as that user, proves the rights enough.
func grantUninstall(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	perms := removal.Permissions(removal.Defaults())
	byNS := map[string][]rbacv1.PolicyRule{}
	for _, p := range perms {
		res := p.Resource
		if p.Subresource != "" {
			res += "/" + p.Subresource
		}
		r := rbacv1.PolicyRule{APIGroups: []string{p.Group}, Resources: []string{res}, Verbs: []string{p.Verb}}
		if p.Name != "" {
			r.ResourceNames = []string{p.Name}
		}
		byNS[p.Namespace] = append(byNS[p.Namespace], r)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: uninstaller}}
	meta := metav1.ObjectMeta{Name: uninstaller}
	for ns, rules := range byNS {
		var err error
		if ns == "" {
			_, err = c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: meta, Rules: rules}, metav1.CreateOptions{})
			if err == nil {
				_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: meta, Subjects: subject,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: uninstaller}}, metav1.CreateOptions{})
			}
			t.Cleanup(func() {
				c.RbacV1().ClusterRoleBindings().Delete(context.Background(), uninstaller, metav1.DeleteOptions{})
				c.RbacV1().ClusterRoles().Delete(context.Background(), uninstaller, metav1.DeleteOptions{})
			})
		} else {
			m := meta
			m.Namespace = ns
			_, err = c.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: m, Rules: rules}, metav1.CreateOptions{})
			if err == nil {
				_, err = c.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: m, Subjects: subject,
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: uninstaller}}, metav1.CreateOptions{})
			}
			t.Cleanup(func() {
				c.RbacV1().RoleBindings(ns).Delete(context.Background(), uninstaller, metav1.DeleteOptions{})
				c.RbacV1().Roles(ns).Delete(context.Background(), uninstaller, metav1.DeleteOptions{})
			})
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("grant %s in %q: %v", uninstaller, ns, err)
		}
	}

	review := func(a authorizationv1.ResourceAttributes) bool {
		t.Helper()
		r, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: uninstaller, Groups: []string{"system:authenticated"}, ResourceAttributes: &a}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Status.Allowed
	}
	for _, p := range perms {
		if !review(p) {
			t.Errorf("SubjectAccessReview for %s: %+v denied, want allowed", uninstaller, p)
		}
	}
	// What the table says the grant does not reach.
	for _, a := range []authorizationv1.ResourceAttributes{
		{Verb: "update", Resource: "configmaps", Namespace: "kube-system", Name: removal.SwitchConfigMap},
		{Verb: "delete", Resource: "configmaps", Namespace: "kube-system", Name: "kube-proxy"},
		{Verb: "get", Resource: "secrets", Namespace: "kube-system", Name: "any"},
		{Verb: "create", Resource: "pods", Namespace: "kube-system"},
		{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "kube-system", Name: "any"},
		{Verb: "delete", Group: "apps", Resource: "daemonsets", Namespace: "kube-system", Name: "skewgate"},
		{Verb: "get", Group: "apps", Resource: "daemonsets", Namespace: "kube-system", Name: "kube-proxy"},
		{Verb: "update", Group: "batch", Resource: "jobs", Namespace: "kube-system", Name: "any"},
		{Verb: "get", Resource: "namespaces", Name: "default"},
		{Verb: "delete", Resource: "namespaces", Name: "skewgate"},
		{Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Namespace: "default", Name: "any"},
		{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system"},
	} {
		if review(a) {
			t.Errorf("SubjectAccessReview for %s: %+v allowed, want denied", uninstaller, a)
		}
	}
	var rows []string
	for _, p := range perms {
		rows = append(rows, strings.TrimSpace(p.Verb+" "+p.Resource+"/"+p.Subresource+" "+p.Namespace+" "+p.Name))
	}
	t.Logf("%s holds only: %s", uninstaller, strings.Join(rows, "; "))
}
