// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * connstat: a sock_ops program on the cgroup v2 root that counts and times
 * the proxy's TCP connections per hop:
 *
 *   client→proxy  accepted by the proxy: steered by steer (found in
 *                 steered_flows), or dialled at the proxy's own port
 *   proxy→local   dialled to an upstream_port address classified local
 *   proxy→peer    dialled to an upstream_port address classified peer
 *
 * The cgroup root sees every network namespace on the host, so sockets are
 * filtered by the configured netns cookie first, and outgoing ones by the
 * dialling process (proxy_tgid).
 *
 * Requires Linux 5.15 (bpf_get_netns_cookie in sock_ops; bpf_sock_ops.sk
 * with socket storage is 5.10).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "flow.h"

char __license[] SEC("license") = "Dual BSD/GPL";

struct config {
	__u64 netns_cookie;   /* only sockets of this netns; 0 disables the program */
	__u16 upstream_port;  /* remote port of proxy→apiserver connections (6443) */
	__u16 proxy_port;     /* local port of the proxy's listener */
	__u32 proxy_tgid;     /* only this process's connects are proxy hops; 0: any */
	__u64 _reserved[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} connstat_config SEC(".maps");

enum hop {
	HOP_NONE = 0, /* not counted */
	HOP_CLIENT_PROXY = 1,
	HOP_PROXY_LOCAL = 2,
	HOP_PROXY_PEER = 3,
};

struct upstream {
	enum hop hop;
};

/*
 * Classifies the remote address of an outgoing connection to upstream_port
 * by longest prefix: e.g. 127.0.0.0/8 local, the steered node address none
 * (a client of the proxy, counted on the accepting side), ::/0 peer.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 256);
	__type(key, struct prefix_key);
	__type(value, struct upstream);
} connstat_upstreams SEC(".maps");

/*
 * The server of a hop: the remote apiserver for proxy→*, the address the
 * client dialled for client→proxy (never the client: unbounded labels).
 */
struct hop_key {
	enum hop hop;
	__u16 port;   /* host byte order */
	__u16 family; /* AF_INET or AF_INET6 */
	__u8 addr[16];
};

struct hop_counters {
	__u64 opens;       /* handshakes completed */
	__u64 closes;      /* established connections closed */
	__u64 failed;      /* connects that closed before establishing */
	__u64 retransmits; /* segments retransmitted, added at close */
	__u64 handshake_us_sum;
	__u64 min_rtt_us_sum;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct hop_key);
	__type(value, struct hop_counters);
} connstat_counters SEC(".maps");

enum metric {
	METRIC_HANDSHAKE = 0, /* connect (SYN) → established */
	METRIC_MIN_RTT = 1,   /* tcp_sock.rtt_min at close */
	METRIC_SRTT = 2,      /* tcp_sock.srtt while open, at most once a second per socket */
};

/*
 * Histogram buckets are log2(µs): bucket b < HIST_BUCKETS-1 counts values
 * in [2^b, 2^(b+1)) µs (0 µs lands in bucket 0); the last bucket counts
 * everything from 2^(HIST_BUCKETS-1) µs (33.5 s) on. The collector turns
 * them into cumulative Prometheus buckets.
 */
#define HIST_BUCKETS 26

struct hist_key {
	struct hop_key hop;
	enum metric metric;
	__u32 bucket;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024 * 2 * HIST_BUCKETS);
	__type(key, struct hist_key);
	__type(value, __u64);
} connstat_hist SEC(".maps");

/* Per-socket state, from connect or accept until close. */
struct sock_state {
	struct hop_key key;
	__u64 start_ns;
	__u32 established;
	__u32 rtt_sampled_s; /* bpf_ktime_get_ns() / 1e9 of the last srtt sample */
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sock_state);
} connstat_socks SEC(".maps");

static __always_inline __u32 log2_u32(__u32 v)
{
	__u32 r, shift;

	r = (v > 0xFFFF) << 4;
	v >>= r;
	shift = (v > 0xFF) << 3;
	v >>= shift;
	r |= shift;
	shift = (v > 0xF) << 2;
	v >>= shift;
	r |= shift;
	shift = (v > 0x3) << 1;
	v >>= shift;
	r |= shift;
	r |= (v >> 1);
	return r;
}

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 hi = v >> 32;

	if (hi)
		return log2_u32(hi) + 32;
	return log2_u32(v);
}

static __always_inline void observe(struct hop_key *hop, enum metric metric, __u64 us)
{
	struct hist_key key = {.metric = metric};
	__u64 one = 1, *n;

	key.hop = *hop;
	key.bucket = log2_u64(us);
	if (key.bucket > HIST_BUCKETS - 1)
		key.bucket = HIST_BUCKETS - 1;
	n = bpf_map_lookup_elem(&connstat_hist, &key);
	if (n)
		*n += 1;
	else
		bpf_map_update_elem(&connstat_hist, &key, &one, BPF_NOEXIST);
}

static __always_inline struct hop_counters *counters(struct hop_key *key)
{
	struct hop_counters zero = {}, *c;

	c = bpf_map_lookup_elem(&connstat_counters, key);
	if (c)
		return c;
	bpf_map_update_elem(&connstat_counters, key, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&connstat_counters, key);
}

static __always_inline struct config *config_for(struct bpf_sock_ops *skops)
{
	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&connstat_config, &zero);

	if (!cfg || !cfg->netns_cookie)
		return NULL;
	if (bpf_get_netns_cookie(skops) != cfg->netns_cookie)
		return NULL;
	if (skops->family != AF_INET && skops->family != AF_INET6)
		return NULL;
	return cfg;
}

static __always_inline void sock_addrs(struct bpf_sock_ops *skops, __u8 local[16], __u8 remote[16])
{
	if (skops->family == AF_INET) {
		addr_from_ip4(local, skops->local_ip4);
		addr_from_ip4(remote, skops->remote_ip4);
		return;
	}
	addr_from_ip6(local, ctx_u32(skops->local_ip6[0]), ctx_u32(skops->local_ip6[1]), ctx_u32(skops->local_ip6[2]),
		      ctx_u32(skops->local_ip6[3]));
	addr_from_ip6(remote, ctx_u32(skops->remote_ip6[0]), ctx_u32(skops->remote_ip6[1]), ctx_u32(skops->remote_ip6[2]),
		      ctx_u32(skops->remote_ip6[3]));
}

static __always_inline struct sock_state *track(struct bpf_sock_ops *skops, struct hop_key *key,
						__u64 start_ns)
{
	struct bpf_sock *sk = skops->sk;
	struct sock_state *st;

	if (!sk)
		return NULL;
	st = bpf_sk_storage_get(&connstat_socks, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return NULL;
	st->key = *key;
	st->start_ns = start_ns;
	st->established = 0;
	st->rtt_sampled_s = 0;
	/*
	 * The state callback reports the close, and a connect that fails; the
	 * RTT callback samples long-lived connections (HTTP/2 to peers) while
	 * they are open, which rtt_min at close never shows.
	 */
	bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_STATE_CB_FLAG | BPF_SOCK_OPS_RTT_CB_FLAG);
	return st;
}

static __always_inline void on_connect(struct bpf_sock_ops *skops)
{
	struct config *cfg = config_for(skops);
	struct prefix_key remote = {.prefixlen = 128};
	struct hop_key key = {};
	__u8 local[16];
	struct upstream *up;

	if (!cfg || bpf_ntohl(skops->remote_port) != cfg->upstream_port)
		return;
	/*
	 * connect() runs in the dialling process: on kubeadm, the kubelet,
	 * controller-manager and scheduler of the node dial :6443 too, and are
	 * no hop of the proxy's.
	 */
	if (cfg->proxy_tgid && (bpf_get_current_pid_tgid() >> 32) != cfg->proxy_tgid)
		return;
	sock_addrs(skops, local, remote.addr);
	up = bpf_map_lookup_elem(&connstat_upstreams, &remote);
	if (!up || up->hop == HOP_NONE)
		return;
	key.hop = up->hop;
	key.port = cfg->upstream_port;
	key.family = skops->family;
	__builtin_memcpy(key.addr, remote.addr, 16);
	track(skops, &key, bpf_ktime_get_ns());
}

static __always_inline void on_active_established(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	struct sock_state *st;
	struct hop_counters *c;
	__u64 us;

	if (!sk)
		return;
	st = bpf_sk_storage_get(&connstat_socks, sk, 0, 0);
	if (!st)
		return;
	st->established = 1;
	us = (bpf_ktime_get_ns() - st->start_ns) / 1000;
	c = counters(&st->key);
	if (!c)
		return;
	c->opens += 1;
	c->handshake_us_sum += us;
	observe(&st->key, METRIC_HANDSHAKE, us);
}

static __always_inline void on_passive_established(struct bpf_sock_ops *skops)
{
	struct config *cfg = config_for(skops);
	struct flow_key flow = {};
	struct flow_value *steered;
	struct hop_key key = {.hop = HOP_CLIENT_PROXY};
	struct sock_state *st;
	struct hop_counters *c;
	__u64 start_ns = 0, us;

	if (!cfg)
		return;
	sock_addrs(skops, flow.local_addr, flow.remote_addr);
	flow.local_port = skops->local_port;
	flow.remote_port = bpf_ntohl(skops->remote_port);

	steered = bpf_map_lookup_elem(&steered_flows, &flow);
	if (steered) {
		start_ns = steered->syn_ns;
		bpf_map_delete_elem(&steered_flows, &flow);
	} else if (flow.local_port != cfg->proxy_port) {
		return;
	}
	key.port = flow.local_port;
	key.family = skops->family;
	__builtin_memcpy(key.addr, flow.local_addr, 16);

	st = track(skops, &key, start_ns);
	if (!st)
		return;
	st->established = 1;
	c = counters(&key);
	if (!c)
		return;
	c->opens += 1;
	/* Only steered flows carry the SYN's time; direct ones are not timed. */
	if (!start_ns)
		return;
	us = (bpf_ktime_get_ns() - start_ns) / 1000;
	c->handshake_us_sum += us;
	observe(&key, METRIC_HANDSHAKE, us);
}

static __always_inline void on_close(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	struct sock_state *st;
	struct hop_counters *c;
	__u32 rtt;

	if (!sk)
		return;
	st = bpf_sk_storage_get(&connstat_socks, sk, 0, 0);
	if (!st)
		return;
	c = counters(&st->key);
	if (c && !st->established) {
		c->failed += 1;
	} else if (c) {
		c->closes += 1;
		c->retransmits += skops->total_retrans;
		rtt = skops->rtt_min;
		/* rtt_min stays ~0U until the first RTT sample. */
		if (rtt != ~0U) {
			c->min_rtt_us_sum += rtt;
			observe(&st->key, METRIC_MIN_RTT, rtt);
		}
	}
	bpf_sk_storage_delete(&connstat_socks, sk);
}

/*
 * on_rtt samples the smoothed RTT of an open, tracked connection, at most
 * once a second: the RTT callback runs for every ACK that carries an RTT
 * sample, far too often to count each. srtt is inflated by delayed ACKs on
 * request/response traffic; it is what the hop costs a request, not the
 * path's floor (rtt_min at close is that).
 */
static __always_inline void on_rtt(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	struct sock_state *st;
	__u32 now_s;

	if (!sk)
		return;
	st = bpf_sk_storage_get(&connstat_socks, sk, 0, 0);
	if (!st || !st->established)
		return;
	now_s = bpf_ktime_get_ns() / 1000000000;
	if (st->rtt_sampled_s == now_s)
		return;
	st->rtt_sampled_s = now_s;
	observe(&st->key, METRIC_SRTT, skops->srtt_us >> 3);
}

SEC("sockops")
int connstat(struct bpf_sock_ops *skops)
{
	switch (skops->op) {
	case BPF_SOCK_OPS_TCP_CONNECT_CB:
		on_connect(skops);
		break;
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
		on_active_established(skops);
		break;
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		on_passive_established(skops);
		break;
	case BPF_SOCK_OPS_STATE_CB:
		if (skops->args[1] == BPF_TCP_CLOSE)
			on_close(skops);
		break;
	case BPF_SOCK_OPS_RTT_CB:
		on_rtt(skops);
		break;
	}
	/* sock_ops return values only matter for a few ops, none of these. */
	return 1;
}
