// Package steer holds the sk_lookup program that steers new connections for
// the apiserver's address into the proxy's listener, and its generated Go
// bindings. The C source is steer.c; see docs/bpf.md for the maps.
package steer

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -target bpfel -type config -type target -type dest -type exempt -type reason -type flow_key -type flow_value -type prefix_key Steer steer.c -- -I../include -Wall -Werror
