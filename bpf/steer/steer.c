// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * steer: an sk_lookup program that assigns new TCP connections for the
 * configured {address, port} targets to the proxy's listening socket.
 *
 * It fails open: every miss or error returns SK_PASS without an assignment,
 * so the kernel's regular socket lookup (the apiserver's own listener) takes
 * the connection. One bounded exception: while the agent's hold is in the
 * future (a rollback grace holds a type) and the proxy is gone, SK_DROP (see
 * held()).
 *
 * sk_lookup requires Linux 5.9; the __be16 remote_port field 5.19.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "flow.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/*
 * steer_config is memory-mapped by the agent: the agent stores
 * lease_until_ns and hold_until_ns and the operator stores enabled, each
 * with a single aligned store, so neither can undo the other's write.
 */
struct config {
	__u32 enabled; /* 0: off, the kill switch; 1: steer while the lease holds */
	__u32 _pad0;
	__u64 lease_until_ns; /* bpf_ktime_get_ns (CLOCK_MONOTONIC) deadline */
	__u64 hold_until_ns;  /* the same clock; see held() */
	__u64 _reserved;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} steer_config SEC(".maps");

struct target {
	__u8 addr[16]; /* IPv6 or IPv4-mapped IPv6, network byte order */
	__u16 port;    /* host byte order */
	__u16 family;  /* AF_INET (2) or AF_INET6 (10), as the connection */
};

struct dest {
	__u32 socket; /* index into steer_socket */
	__u32 _pad0;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct target);
	__type(value, struct dest);
} steer_targets SEC(".maps");

/*
 * The proxy's listener. The kernel removes a socket from a SOCKMAP when the
 * socket is destroyed, i.e. when its last file descriptor closes: a dead
 * agent leaves the slot empty and its connections fall back.
 */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} steer_socket SEC(".maps");

struct exempt {
	__u32 reserved;
};

/* Source prefixes that are never steered: peers' forwarded connections. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 256);
	__type(key, struct prefix_key);
	__type(value, struct exempt);
} steer_exempt SEC(".maps");

/* Why a lookup ended as it did; the index into steer_counters. */
enum reason {
	REASON_NOT_TARGET = 0, /* not TCP, or not a configured target */
	REASON_STEERED = 1,
	REASON_OFF = 2,
	REASON_LEASE_EXPIRED = 3,
	REASON_EXEMPT = 4,
	REASON_NO_SOCKET = 5,
	REASON_ASSIGN_ERROR = 6,
	REASON_HELD = 7, /* refused: the proxy gone inside the hold */
	REASON_MAX = 8,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, REASON_MAX);
	__type(key, __u32);
	__type(value, __u64);
} steer_counters SEC(".maps");

/*
 * pass counts reason and lets the kernel's regular lookup proceed. It is a
 * subprogram rather than inlined so that enum reason appears in the
 * object's BTF and bpf2go can export it to Go.
 */
static __noinline int pass(enum reason reason)
{
	__u32 key = reason;
	__u64 *n = bpf_map_lookup_elem(&steer_counters, &key);

	if (n)
		*n += 1;
	return SK_PASS;
}

/*
 * held refuses a connection while the proxy is gone (its listener out of the
 * SOCKMAP, or its lease lapsed) and the agent's hold is in the future. The
 * agent keeps the hold about 15 s ahead, renewed with its lease, only while
 * a rollback grace or its settle holds a type: then the local apiserver
 * answers 404 for a type the clients still map from skewgate's merged
 * discovery, and a garbage collector reads that 404 as "the owner is gone"
 * and deletes its dependents. A refused SYN (the kernel answers it with a
 * RST) is retried until a restarted skewgate takes it; a 404 is acted on.
 * So a crashed or killed agent (SIGKILL, OOM) fails open only when its hold
 * ends. Every deliberate withdrawal (standby, shedding, shutdown) clears the
 * hold first, and the kill switch and exempt sources pass whatever it says.
 */
static __noinline int held(void)
{
	__u32 key = REASON_HELD;
	__u64 *n = bpf_map_lookup_elem(&steer_counters, &key);

	if (n)
		*n += 1;
	return SK_DROP;
}

static __always_inline bool local_addr(struct bpf_sk_lookup *ctx, __u8 addr[16])
{
	if (ctx->family == AF_INET) {
		addr_from_ip4(addr, ctx->local_ip4);
		return true;
	}
	if (ctx->family == AF_INET6) {
		addr_from_ip6(addr, ctx_u32(ctx->local_ip6[0]), ctx_u32(ctx->local_ip6[1]), ctx_u32(ctx->local_ip6[2]),
			      ctx_u32(ctx->local_ip6[3]));
		return true;
	}
	return false;
}

static __always_inline void remote_addr(struct bpf_sk_lookup *ctx, __u8 addr[16])
{
	if (ctx->family == AF_INET)
		addr_from_ip4(addr, ctx->remote_ip4);
	else
		addr_from_ip6(addr, ctx_u32(ctx->remote_ip6[0]), ctx_u32(ctx->remote_ip6[1]), ctx_u32(ctx->remote_ip6[2]),
			      ctx_u32(ctx->remote_ip6[3]));
}

/* record_flow tells connstat that this flow is the proxy's (see flow.h). */
static __always_inline void record_flow(struct bpf_sk_lookup *ctx, struct target *target)
{
	struct flow_key key = {};
	struct flow_value value = {.syn_ns = bpf_ktime_get_ns()};

	__builtin_memcpy(key.local_addr, target->addr, 16);
	remote_addr(ctx, key.remote_addr);
	key.local_port = target->port;
	key.remote_port = bpf_ntohs(ctx->remote_port);
	/* BPF_NOEXIST keeps the first SYN's time when the client retransmits. */
	bpf_map_update_elem(&steered_flows, &key, &value, BPF_NOEXIST);
}

SEC("sk_lookup")
int steer(struct bpf_sk_lookup *ctx)
{
	struct target target = {};
	struct prefix_key source = {.prefixlen = 128};
	struct config *cfg;
	struct dest *dest;
	struct bpf_sock *sk;
	__u32 zero = 0;
	__u64 now;
	bool hold;
	long err;

	if (ctx->protocol != IPPROTO_TCP)
		return pass(REASON_NOT_TARGET);
	if (!local_addr(ctx, target.addr))
		return pass(REASON_NOT_TARGET);
	target.port = ctx->local_port;
	target.family = ctx->family;

	dest = bpf_map_lookup_elem(&steer_targets, &target);
	if (!dest)
		return pass(REASON_NOT_TARGET);
	cfg = bpf_map_lookup_elem(&steer_config, &zero);
	if (!cfg || !cfg->enabled)
		return pass(REASON_OFF);
	now = bpf_ktime_get_ns();
	hold = cfg->hold_until_ns > now;
	remote_addr(ctx, source.addr);
	if (cfg->lease_until_ns <= now) {
		if (hold && !bpf_map_lookup_elem(&steer_exempt, &source))
			return held();
		return pass(REASON_LEASE_EXPIRED);
	}

	if (bpf_map_lookup_elem(&steer_exempt, &source))
		return pass(REASON_EXEMPT);

	sk = bpf_map_lookup_elem(&steer_socket, &dest->socket);
	if (!sk)
		return hold ? held() : pass(REASON_NO_SOCKET);
	err = bpf_sk_assign(ctx, sk, 0);
	bpf_sk_release(sk);
	if (err)
		return pass(REASON_ASSIGN_ERROR);

	record_flow(ctx, &target);
	return pass(REASON_STEERED);
}
