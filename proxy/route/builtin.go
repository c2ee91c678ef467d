package route

import "k8s.io/client-go/kubernetes/scheme"

// BuiltInGroups are the groups kube-apiserver's binary serves itself, as
// the cluster says at run time (membership reads them from the
// aggregator's local APIServices and keeps every one it saw): a group
// only a newer release adds is built in from the moment a server of that
// release registers it, without a new skewgate.
type BuiltInGroups map[string]bool

// BuiltIn reports whether group is served by kube-apiserver itself: a
// group the cluster's APIServices named (groups; nil while they were
// never read) or one CompiledBuiltIn knows. The compiled groups stay in
// even when the APIServices are read: a server of the previous release
// that starts after one of a newer release deletes the newer one's
// registrations, and a skewgate without a state file must still know its
// own release's groups then. CRD groups — even those under k8s.io, such
// as gateway.networking.k8s.io — and APIService-backed groups such as
// metrics.k8s.io are not built in: every server serves them from the same
// etcd and aggregator configuration.
func (groups BuiltInGroups) BuiltIn(group string) bool {
	return groups[group] || CompiledBuiltIn(group)
}

// CompiledBuiltIn reports whether group is the core group, one of the
// extension and aggregation layers' own, or a group of client-go's scheme:
// the built-in groups of the release skewgate was built with (alpha ones
// included), all it knows when the cluster's APIServices cannot be read.
// A group only a newer release adds is not among them.
func CompiledBuiltIn(group string) bool {
	switch group {
	case "", "apiextensions.k8s.io", "apiregistration.k8s.io":
		return true
	}
	return scheme.Scheme.IsGroupRegistered(group)
}
