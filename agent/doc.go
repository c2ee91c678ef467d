// Package agent runs skewgate's kernel side on a node. It loads, pins and
// attaches the steer (sk_lookup) and connstat (sock_ops) programs from
// package bpf, holds the steering lease, flips the kill switch for the
// operator, and exports the maps as Prometheus metrics. Node is all of it
// on one node; it never imports the proxy, whose readiness, peer addresses
// and probe reach it as NodeConfig's function values.
//
// Everything lives under one pin path on a bpffs (default
// /sys/fs/bpf/skewgate): the maps, the links, and a layout map recording
// the version of the map layout. A restarted agent re-opens the pins and
// swaps the programs in place with link.Update, so the attachment never
// lapses. docs/bpf.md lists every pin.
//
// Steering fails open in layers: the program passes on every miss or error;
// the SOCKMAP slot empties when the proxy's listener closes; steering holds
// only while the lease in steer_config is in the future; and the operator's
// kill switch (steer_config.enabled) overrides all of it.
package agent
