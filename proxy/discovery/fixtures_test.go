package discovery

import (
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The fixtures follow what kube-apiserver v1.35/v1.36 list (trimmed):
// the same shapes, orders and verbs, with the lab's skew: only the new server
// serves scheduling.k8s.io/v1alpha2 (workloads, podgroups).

var (
	rwVerbs  = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	subVerbs = []string{"get", "patch", "update"}
)

func sub(name, kind string, verbs ...string) apidiscoveryv2.APISubresourceDiscovery {
	return apidiscoveryv2.APISubresourceDiscovery{
		Subresource:  name,
		ResponseKind: &metav1.GroupVersionKind{Kind: kind},
		Verbs:        verbs,
	}
}

func res(name, singular, kind string, scope apidiscoveryv2.ResourceScope, verbs []string, subs ...apidiscoveryv2.APISubresourceDiscovery) apidiscoveryv2.APIResourceDiscovery {
	return apidiscoveryv2.APIResourceDiscovery{
		Resource:         name,
		SingularResource: singular,
		ResponseKind:     &metav1.GroupVersionKind{Kind: kind},
		Scope:            scope,
		Verbs:            verbs,
		Subresources:     subs,
	}
}

func version(v string, resources ...apidiscoveryv2.APIResourceDiscovery) apidiscoveryv2.APIVersionDiscovery {
	return apidiscoveryv2.APIVersionDiscovery{Version: v, Resources: resources, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
}

func group(name string, versions ...apidiscoveryv2.APIVersionDiscovery) apidiscoveryv2.APIGroupDiscovery {
	return apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}, Versions: versions}
}

func pods() apidiscoveryv2.APIResourceDiscovery {
	r := res("pods", "pod", "Pod", apidiscoveryv2.ScopeNamespace, rwVerbs,
		sub("attach", "PodAttachOptions", "create", "get"),
		sub("binding", "Binding", "create"),
		sub("eviction", "Eviction", "create"),
		sub("exec", "PodExecOptions", "create", "get"),
		sub("log", "Pod", "get"),
		sub("status", "Pod", subVerbs...),
	)
	r.ShortNames = []string{"po"}
	r.Categories = []string{"all"}
	return r
}

func coreGroup() apidiscoveryv2.APIGroupDiscovery {
	return group("", version("v1",
		res("configmaps", "configmap", "ConfigMap", apidiscoveryv2.ScopeNamespace, rwVerbs),
		res("namespaces", "namespace", "Namespace", apidiscoveryv2.ScopeCluster,
			[]string{"create", "delete", "get", "list", "patch", "update", "watch"},
			sub("finalize", "Namespace", "update"), sub("status", "Namespace", subVerbs...)),
		pods(),
	))
}

func appsGroup() apidiscoveryv2.APIGroupDiscovery {
	return group("apps", version("v1",
		res("deployments", "deployment", "Deployment", apidiscoveryv2.ScopeNamespace, rwVerbs,
			sub("scale", "Scale", subVerbs...), sub("status", "Deployment", subVerbs...)),
		res("statefulsets", "statefulset", "StatefulSet", apidiscoveryv2.ScopeNamespace, rwVerbs,
			sub("scale", "Scale", subVerbs...), sub("status", "StatefulSet", subVerbs...)),
	))
}

func schedulingV1() apidiscoveryv2.APIVersionDiscovery {
	return version("v1", res("priorityclasses", "priorityclass", "PriorityClass", apidiscoveryv2.ScopeCluster, rwVerbs))
}

func schedulingV1alpha2() apidiscoveryv2.APIVersionDiscovery {
	return version("v1alpha2",
		res("podgroups", "podgroup", "PodGroup", apidiscoveryv2.ScopeNamespace, rwVerbs, sub("status", "PodGroup", subVerbs...)),
		res("workloads", "workload", "Workload", apidiscoveryv2.ScopeNamespace, rwVerbs),
	)
}

// metricsGroup is an APIService-backed group whose backend is down.
func metricsGroup() apidiscoveryv2.APIGroupDiscovery {
	return group("metrics.k8s.io", apidiscoveryv2.APIVersionDiscovery{
		Version: "v1beta1", Freshness: apidiscoveryv2.DiscoveryFreshnessStale,
	})
}

// oldDoc is a v1.35 server.
func oldDoc() *Doc {
	return &Doc{
		API:  Endpoint{Items: []apidiscoveryv2.APIGroupDiscovery{coreGroup()}, Format: FormatV2},
		APIs: Endpoint{Items: []apidiscoveryv2.APIGroupDiscovery{appsGroup(), group("scheduling.k8s.io", schedulingV1()), metricsGroup()}, Format: FormatV2},
	}
}

// newDoc is a v1.36 server: scheduling.k8s.io/v1alpha2 in addition.
func newDoc() *Doc {
	return &Doc{
		API:  Endpoint{Items: []apidiscoveryv2.APIGroupDiscovery{coreGroup()}, Format: FormatV2},
		APIs: Endpoint{Items: []apidiscoveryv2.APIGroupDiscovery{appsGroup(), group("scheduling.k8s.io", schedulingV1(), schedulingV1alpha2()), metricsGroup()}, Format: FormatV2},
	}
}
