// Package plan tells an operator, before a kubeadm step, what it will
// break: [Rollback] lists the types a rollback to a version takes away and
// what still uses them (objects, namespaces, clients), and [Preflight]
// checks that every control-plane node's skewgate can do its job in the
// upgrade (steering, targets, state file, mode, monitoring).
//
// Both read the cluster as the operator's kubeconfig sees it and each
// node's skewgate through its admin listener; neither changes anything.
// What cannot be read is reported as unknown, never guessed.
package plan
