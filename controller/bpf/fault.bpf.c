// SPDX-License-Identifier: GPL-2.0
/* fabriclab's fault injector at a port's receive side: drops a configured fraction of the frames
 * that arrive on one interface, at random, and counts what it saw and what it dropped.
 *
 * It is an XDP program attached in generic (skb) mode: it runs in the kernel's receive path
 * before any packet socket sees the frame, so Open vSwitch's userspace datapath (which reads its
 * ports through packet sockets) and the kernel datapath both never see a dropped frame, and the
 * frame has already crossed the link (its sender's shaper and queue spent its time), as a frame
 * damaged on the wire is dropped by the receiving MAC. Userspace reads the counters and decides
 * what they mean: receive errors of the port (a corrupt fault: CRC errors) or nothing a port
 * counter shows (a drop fault: a switch that loses frames it forwards).
 *
 *   fl_fault_cfg[0].drop_below  a frame is dropped when a fresh 32-bit random number is below it
 *                               (the fraction times 2^32; 2^32 drops every frame, 0 none)
 *   fl_fault_st[0]              frames and bytes seen, frames and bytes dropped (since loading)
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct fault_cfg {
	__u64 drop_below;
};

struct fault_st {
	__u64 seen_packets;
	__u64 seen_bytes;
	__u64 dropped_packets;
	__u64 dropped_bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fault_cfg);
} fl_fault_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fault_st);
} fl_fault_st SEC(".maps");

SEC("xdp")
int fl_fault(struct xdp_md *ctx)
{
	__u32 key = 0;
	struct fault_cfg *cfg = bpf_map_lookup_elem(&fl_fault_cfg, &key);
	struct fault_st *st = bpf_map_lookup_elem(&fl_fault_st, &key);
	__u64 bytes = (__u64)(long)ctx->data_end - (__u64)(long)ctx->data;

	if (!cfg || !st)
		return XDP_PASS;
	__sync_fetch_and_add(&st->seen_packets, 1);
	__sync_fetch_and_add(&st->seen_bytes, bytes);
	if ((__u64)bpf_get_prandom_u32() < cfg->drop_below) {
		__sync_fetch_and_add(&st->dropped_packets, 1);
		__sync_fetch_and_add(&st->dropped_bytes, bytes);
		return XDP_DROP;
	}
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
