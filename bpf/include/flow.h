/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Definitions shared by steer (sk_lookup) and connstat (sock_ops).
 *
 * Addresses are always 16 bytes: IPv6 as is, IPv4 as an IPv4-mapped IPv6
 * address (::ffff:a.b.c.d), both in network byte order. This is what Go's
 * netip.Addr.As16 returns, so keys are built the same way on both sides.
 */
#ifndef __SKEWGATE_FLOW_H__
#define __SKEWGATE_FLOW_H__

#define AF_INET 2
#define AF_INET6 10

/*
 * A TCP flow as seen from the server side: local is the address the client
 * dialled (the steered target), remote is the client.
 */
struct flow_key {
	__u8 local_addr[16];
	__u8 remote_addr[16];
	__u16 local_port;  /* host byte order */
	__u16 remote_port; /* host byte order */
	__u32 _pad;
};

/* When steer assigned the flow's SYN to the proxy's listener. */
struct flow_value {
	__u64 syn_ns; /* bpf_ktime_get_ns */
};

/*
 * steered_flows tells connstat which accepted sockets were steered. With
 * sk_lookup the accepted socket keeps the port the client dialled (6443),
 * so ports cannot tell the proxy's connections from the apiserver's; the
 * only component that knows is steer, at the moment it assigns the SYN.
 * connstat deletes the entry when the handshake completes; LRU eviction
 * removes the entries of handshakes that never complete.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct flow_key);
	__type(value, struct flow_value);
} steered_flows SEC(".maps");

/*
 * ctx_u32 reads one 32-bit context field. The volatile load keeps clang from
 * merging neighbouring fields into one 64-bit load, which the verifier
 * rejects for context structs.
 */
#define ctx_u32(field) (*(volatile __u32 *)&(field))

static __always_inline void addr_from_ip4(__u8 addr[16], __u32 ip4)
{
	__builtin_memset(addr, 0, 10);
	addr[10] = 0xff;
	addr[11] = 0xff;
	__builtin_memcpy(&addr[12], &ip4, 4);
}

static __always_inline void addr_from_ip6(__u8 addr[16], __u32 a, __u32 b, __u32 c, __u32 d)
{
	__builtin_memcpy(&addr[0], &a, 4);
	__builtin_memcpy(&addr[4], &b, 4);
	__builtin_memcpy(&addr[8], &c, 4);
	__builtin_memcpy(&addr[12], &d, 4);
}

/* An LPM trie key over the 16-byte address form; IPv4 /n is /(96+n). */
struct prefix_key {
	__u32 prefixlen;
	__u8 addr[16];
};

#endif /* __SKEWGATE_FLOW_H__ */
