// SPDX-License-Identifier: GPL-2.0
/* fabriclab's queue sampler, kernel side: every watched port's root-qdisc state, kept current in a
 * memory-mapped array that the sampler copies whole at each tick (no system call per tick).
 *
 * A qdisc's backlog changes only when a packet is enqueued or dequeued, and both fire a
 * tracepoint (include/trace/events/qdisc.h), so writing the qdisc's own counters there keeps a
 * copy that is exact at every instant:
 *   qdisc_enqueue(struct Qdisc *, const struct netdev_queue *, struct sk_buff *)
 *     fired by dev_qdisc_enqueue() (net/core/dev.c) after a root qdisc accepted a packet;
 *   qdisc_dequeue(struct Qdisc *, const struct netdev_queue *, int packets, struct sk_buff *)
 *     fired by dequeue_skb() (net/sched/sch_generic.c) for root qdiscs, after the dequeue.
 * A packet the qdisc drops on arrival fires neither; it changes only the drop counter, and a
 * dropping queue is never empty, so the next dequeue (within one frame time) carries it.
 * Both run under the root qdisc's lock, so the writes to one port never race each other.
 *
 * Per port (fl_qs_port, slot given by userspace for the port's name in fl_qs_slot):
 *   seq                odd while the kernel writes the entry (userspace re-reads a torn copy);
 *   backlog_bytes,     the qdisc's qstats.backlog and q.qlen after the event;
 *   backlog_packets
 *   drops              qstats.drops (since the qdisc was created, as tc shows it);
 *   tx_bytes,          bstats (bytes and packets dequeued since the qdisc was created);
 *   tx_packets
 *   events             enqueue and dequeue events seen.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define IFNAMSIZ 16
#define MAX_PORTS 4096

struct fl_qs_port {
	__u64 seq;
	__u64 backlog_bytes;
	__u64 backlog_packets;
	__u64 drops;
	__u64 tx_bytes;
	__u64 tx_packets;
	__u64 events;
	__u64 pad;
};

struct fl_qs_key {
	char name[IFNAMSIZ];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PORTS);
	__type(key, struct fl_qs_key);
	__type(value, __u32);
} fl_qs_slot SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PORTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct fl_qs_port);
} fl_qs_port SEC(".maps");

/* The few kernel fields read, relocated by libbpf against the kernel's BTF. */
struct net_device {
	char name[IFNAMSIZ];
} __attribute__((preserve_access_index));

struct netdev_queue {
	struct net_device *dev;
} __attribute__((preserve_access_index));

struct qdisc_skb_head {
	__u32 qlen;
} __attribute__((preserve_access_index));

struct gnet_stats_queue {
	__u32 backlog;
	__u32 drops;
} __attribute__((preserve_access_index));

/* bytes then packets, each a 64-bit counter on 64-bit machines (u64_stats_t); read raw at the
 * member's relocated offset, since the counter's own type differs between kernel versions. */
struct gnet_stats_basic_sync {
	__u64 bytes;
} __attribute__((preserve_access_index));

struct Qdisc {
	struct qdisc_skb_head q;
	struct gnet_stats_basic_sync bstats;
	struct gnet_stats_queue qstats;
} __attribute__((preserve_access_index));

static __always_inline void record(struct Qdisc *q, const struct netdev_queue *txq)
{
	struct fl_qs_key k = {};
	__u64 counters[2] = {};

	if (!q || !txq)
		return;
	struct net_device *dev = BPF_CORE_READ(txq, dev);
	if (!dev)
		return;
	bpf_probe_read_kernel_str(k.name, sizeof(k.name), dev->name);
	__u32 *slot = bpf_map_lookup_elem(&fl_qs_slot, &k);
	if (!slot)
		return;
	struct fl_qs_port *p = bpf_map_lookup_elem(&fl_qs_port, slot);
	if (!p)
		return;
	bpf_probe_read_kernel(counters, sizeof(counters),
			      (char *)q + bpf_core_field_offset(struct Qdisc, bstats));
	__u32 backlog = BPF_CORE_READ(q, qstats.backlog);
	__u32 drops = BPF_CORE_READ(q, qstats.drops);
	__u32 qlen = BPF_CORE_READ(q, q.qlen);
	p->seq++;
	asm volatile("" ::: "memory");
	p->backlog_bytes = backlog;
	p->backlog_packets = qlen;
	p->drops = drops;
	p->tx_bytes = counters[0];
	p->tx_packets = counters[1];
	p->events++;
	asm volatile("" ::: "memory");
	p->seq++;
}

SEC("raw_tp/qdisc_enqueue")
int fl_qs_enq(struct bpf_raw_tracepoint_args *ctx)
{
	record((struct Qdisc *)ctx->args[0], (const struct netdev_queue *)ctx->args[1]);
	return 0;
}

SEC("raw_tp/qdisc_dequeue")
int fl_qs_deq(struct bpf_raw_tracepoint_args *ctx)
{
	/* an empty dequeue (a shaper waiting for tokens) changes nothing */
	if (!ctx->args[3])
		return 0;
	record((struct Qdisc *)ctx->args[0], (const struct netdev_queue *)ctx->args[1]);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
