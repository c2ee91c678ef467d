# Targets are added by the owners of each area; keep each block self-contained.

# --- bpf: generated Go bindings for the programs under bpf/ -----------------
# The bpf2go output (bpf/*/*_bpfel.{go,o}) is committed so that go build and
# go test need no clang. `make generate` rebuilds it; with the same clang and
# libbpf headers the output is byte-for-byte identical.
# bpf/include/vmlinux.h is trimmed by hand and not regenerated here.
.PHONY: generate bpf-toolchain
generate: bpf-toolchain
	go generate ./bpf/...

# bpf-toolchain installs clang, llvm, bpftool and libbpf headers when missing.
bpf-toolchain:
	@if ! command -v clang >/dev/null || ! command -v bpftool >/dev/null || ! test -e /usr/include/bpf/bpf_helpers.h; then \
		apt-get update && apt-get install -y clang llvm bpftool libbpf-dev; \
	fi
