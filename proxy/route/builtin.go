package route

import "k8s.io/client-go/kubernetes/scheme"

// BuiltInGroups are the groups kube-apiserver's binary serves itself, as
// the cluster says at run time (membership reads them from the
// aggregator's local APIServices and keeps every one it saw): a group
// only a newer release adds is built in from the moment a server of that
// release registers it, without a new skewgate.
type BuiltInGroups map[string]bool

// BuiltIn reports whether group is served by kube-apiserver itself: the
// core group and the extension and aggregation layers' own groups always;
// any other group as the cluster's APIServices said (groups), or, while
// they were never read (groups nil), as CompiledBuiltIn says. CRD groups
// — even those under k8s.io, such as gateway.networking.k8s.io — and
// APIService-backed groups such as metrics.k8s.io are not built in: every
// server serves them from the same etcd and aggregator configuration.
func (groups BuiltInGroups) BuiltIn(group string) bool {
	switch group {
	case "", "apiextensions.k8s.io", "apiregistration.k8s.io":
		return true
	}
	if groups == nil {
		return CompiledBuiltIn(group)
	}
	return groups[group]
}

// CompiledBuiltIn is the fallback when the cluster's APIServices cannot be
// read: the groups of client-go's scheme, the built-in groups of the
// release skewgate was built with (alpha ones included). A group only a
// newer release adds is not known to it.
func CompiledBuiltIn(group string) bool {
	switch group {
	case "", "apiextensions.k8s.io", "apiregistration.k8s.io":
		return true
	}
	return scheme.Scheme.IsGroupRegistered(group)
}
