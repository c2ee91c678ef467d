package proxy

import (
	"net/http/httptest"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/skewgate/skewgate/proxy/route"
)

// TestIsolated: what APF's default FlowSchemas exempt or isolate is never
// held at skewgate's bound; a tenant's requests are.
func TestIsolated(t *testing.T) {
	tenant := &user.DefaultInfo{Name: "tenant", Groups: []string{user.AllAuthenticated}}
	cases := []struct {
		name         string
		method, path string
		user         user.Info
		want         bool
	}{
		{"system:masters, anything", "DELETE", "/api/v1/namespaces/default/configmaps/x", &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}, true},
		{"a node lists pods", "GET", "/api/v1/pods", &user.DefaultInfo{Name: "system:node:node-b", Groups: []string{user.NodesGroup, user.AllAuthenticated}}, true},
		{"a node renews its lease", "PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-b", &user.DefaultInfo{Name: "system:node:node-b", Groups: []string{user.NodesGroup}}, true},
		{"kube-controller-manager lists", "GET", "/apis/apps/v1/deployments", &user.DefaultInfo{Name: user.KubeControllerManager}, true},
		{"kube-scheduler binds", "POST", "/api/v1/namespaces/default/pods/p/binding", &user.DefaultInfo{Name: user.KubeScheduler}, true},
		{"a kube-system service account", "GET", "/api/v1/namespaces/kube-system/configmaps", &user.DefaultInfo{Name: "system:serviceaccount:kube-system:coredns", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system"}}, true},
		{"another namespace's service account", "GET", "/api/v1/configmaps", &user.DefaultInfo{Name: "system:serviceaccount:tenant:app", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:tenant"}}, false},
		{"a service account named like kube-system's", "GET", "/api/v1/configmaps", &user.DefaultInfo{Name: "system:serviceaccount:kube-system-x:app"}, false},
		{"anyone's lease renewal", "PUT", "/apis/coordination.k8s.io/v1/namespaces/tenant/leases/operator", tenant, true},
		{"anyone's lease read", "GET", "/apis/coordination.k8s.io/v1/namespaces/tenant/leases/operator", nil, true},
		{"a tenant lists leases", "GET", "/apis/coordination.k8s.io/v1/leases", tenant, false},
		{"a lease of another group", "PUT", "/apis/example.com/v1/namespaces/tenant/leases/x", tenant, false},
		{"readyz, anonymous", "GET", "/readyz", nil, true},
		{"livez", "GET", "/livez", tenant, true},
		{"healthz", "GET", "/healthz", tenant, true},
		{"readyz's checks are not APF's probes", "GET", "/readyz/etcd", nil, false},
		{"a probe path posted", "POST", "/healthz", nil, false},
		{"a tenant lists", "GET", "/api/v1/configmaps", tenant, false},
		{"a tenant writes", "POST", "/api/v1/namespaces/default/configmaps", tenant, false},
		{"a tenant in a group named like the nodes'", "GET", "/api/v1/pods", &user.DefaultInfo{Name: "x", Groups: []string{"system:nodes-x"}}, false},
		{"nobody known", "GET", "/api/v1/configmaps", nil, false},
	}
	c := route.NewClassifier()
	for _, tc := range cases {
		req, err := c.Classify(httptest.NewRequest(tc.method, "https://node-a:6443"+tc.path, nil))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := isolated(req, tc.user); got != tc.want {
			t.Errorf("%s (%s %s): isolated = %t, want %t", tc.name, tc.method, tc.path, got, tc.want)
		}
	}
}
