// Package connstat holds the sock_ops program that counts and times the
// proxy's TCP connections per hop, and its generated Go bindings. The C
// source is connstat.c; see docs/bpf.md for the maps.
package connstat

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -target bpfel -type config -type hop -type upstream -type hop_key -type hop_counters -type metric -type hist_key -type sock_state -type flow_key -type flow_value -type prefix_key Connstat connstat.c -- -I../include -Wall -Werror
