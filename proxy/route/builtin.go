package route

import "k8s.io/client-go/kubernetes/scheme"

// BuiltIn reports whether kube-apiserver's binary serves group itself: the
// groups of client-go's scheme (every built-in group of the release
// skewgate is built with, alpha ones included) and the two that
// kube-apiserver's extension and aggregation layers serve. A group only a
// newer release adds is not known here; it comes with a version
// difference. CRD groups — even those under k8s.io, such as
// gateway.networking.k8s.io — and APIService-backed groups such as
// metrics.k8s.io are not built in: every server serves them from the same
// etcd and aggregator configuration.
func BuiltIn(group string) bool {
	switch group {
	case "", "apiextensions.k8s.io", "apiregistration.k8s.io":
		return true
	}
	return scheme.Scheme.IsGroupRegistered(group)
}
