package removal

import (
	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/skewgate/skewgate/proxy/status"
	"github.com/skewgate/skewgate/proxy/upgrade"
)

// Permissions are every request Uninstall makes, as the attributes of a
// SubjectAccessReview: the rights its user needs, and no more
// (docs/security.md, "Who may uninstall"). Name is set where the request
// names one object the authorizer sees (RBAC resourceNames can hold the
// grant to it); a list, a create, or a name that differs per node has
// none.
func Permissions(o Options) []authorizationv1.ResourceAttributes {
	ns := o.Namespace
	return []authorizationv1.ResourceAttributes{
		// Refuse while skewgate runs; wait for its pods; take their image.
		{Verb: "get", Group: "apps", Resource: "daemonsets", Namespace: ns, Name: status.DaemonSetName},
		{Verb: "list", Resource: "pods", Namespace: ns},
		// The control-plane nodes, a Job on each, its log.
		{Verb: "list", Resource: "nodes"},
		{Verb: "create", Group: "batch", Resource: "jobs", Namespace: ns},
		{Verb: "get", Group: "batch", Resource: "jobs", Namespace: ns},
		{Verb: "delete", Group: "batch", Resource: "jobs", Namespace: ns},
		{Verb: "get", Resource: "pods", Subresource: "log", Namespace: ns},
		// The switch, and the upgrade Leases where they are.
		{Verb: "delete", Resource: "configmaps", Namespace: switchNamespace, Name: SwitchConfigMap},
		{Verb: "get", Resource: "namespaces", Name: upgrade.LeaseNamespace},
		{Verb: "list", Group: "coordination.k8s.io", Resource: "leases", Namespace: upgrade.LeaseNamespace},
		{Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Namespace: upgrade.LeaseNamespace},
		{Verb: "list", Group: "coordination.k8s.io", Resource: "leases", Namespace: oldLeaseNamespace},
		{Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Namespace: oldLeaseNamespace},
	}
}
