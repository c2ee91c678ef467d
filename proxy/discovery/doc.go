// Package discovery knows what each kube-apiserver serves and what clients
// see when skewgate merges the servers' discovery.
//
// Data flows one way: an [HTTPFetcher] reads one server's *local* discovery
// into a [Doc]; [NewCapabilities] indexes a Doc for the per-request routing
// question "does this server serve group/version/resource[/subresource]?";
// [Merge] combines the docs of the healthy servers exactly like the
// peer-aggregated discovery of Kubernetes 1.36; a [*Merged] serves that view.
// [Store] ties these together for the proxy: it keeps each server's
// last-known-good Doc and recomputes capabilities and the merged view when a
// doc or the healthy set changes, never per request.
//
// # Stale group-versions
//
// Aggregated discovery marks a group-version Stale when the server lists it
// but cannot currently describe it: in practice an APIService whose backend
// is unavailable. A server answers requests for such a group-version with a
// 503, so a Stale group-version does not count as served: its resources are
// not in [Capabilities], and [Capabilities.ServesGroupVersion] is false. A
// peer that lists it as Current is therefore preferred, and when every server
// lists it Stale nobody serves it and the local server gives its genuine
// answer. Stale versions stay in the merged view, as in Kubernetes, so that
// clients report them as failed group-versions rather than missing ones.
//
// Health is not this package's business: the caller says which servers are
// healthy ([Store.SetHealthy], [Merge]).
package discovery
