// SPDX-License-Identifier: GPL-2.0
/* fabriclab's serialisation check: the time between a port's dequeues while it is backlogged.
 *
 * A switch port serialises frames back to back at its line rate: while frames wait, one leaves
 * every (its length x 8 / rate) seconds. The emulated port is an HTB shaper over a FIFO; this
 * program watches every dequeue from the root qdisc of the ports userspace names (by interface
 * name, which is unique across a fabric's switch ports and host NICs) and, whenever the previous
 * dequeue left frames waiting, compares the gap since then with the previous frame's time on the
 * wire. This is Mininet-HiFi's fidelity metric (Handigol et al., CoNEXT 2012, section 3: the
 * distribution of inter-dequeue times on a busy link against one packet time).
 *
 *   qdisc_dequeue raw tracepoint (include/trace/events/qdisc.h):
 *     qdisc_dequeue(struct Qdisc *, const struct netdev_queue *, int packets, struct sk_buff *)
 *   fired by dequeue_skb() (net/sched/sch_generic.c) for root qdiscs only, after the qdisc gave up
 *   the packet, so the root's q.qlen is what still waits.
 *
 * Per port (fl_deq_port, value written whole by userspace to reset it; the kernel updates it
 * under the root qdisc's lock, so dequeues of one port never race each other):
 *   packets, bytes        every frame dequeued;
 *   gaps                  gaps measured while backlogged (the previous dequeue left frames waiting);
 *   within                those within +-10% of the previous frame's time;
 *   gap_ns, frame_ns      their sums (achieved rate while backlogged = rate x frame_ns / gap_ns);
 *   max_len               the longest packet dequeued (a GSO packet would show here);
 *   bins[i]               gap / frame time in tenths: [i/10, (i+1)/10), the last bin open-ended.
 *
 * The ceiling (idle gaps included): a line cannot start frame j before frames i..j-1 have been
 * serialised, so over every window of frames i..j (i < j) the dequeue times must satisfy
 * t_j - t_i >= W(i, j), the wire time of frames i..j-1. This hook fires after the shaper has
 * released a frame, and the CPU can stall in between (an interrupt, the hypervisor taking the
 * vCPU): a frame traced late by that stall is followed by the next one on the shaper's schedule,
 * up to one frame time closer than the line allows, whatever the shaper does. So the window is
 * measured from the END of its first dequeue (a dequeue hands over one frame, or a chain of them
 * at one instant): with S_j the wire time of every frame before j and S+_i that after dequeue i's
 * frames, the lead is max over dequeues j > i of (S_j - t_j) - (S+_i - t_i), kept in O(1) per
 * dequeue with the running minimum of S+_i - t_i. Every frame after dequeue i was released after
 * t_i (dequeues of one qdisc are serial), so an HTB shaper whose bucket holds B bytes leads by
 * B / rate at most however late the hook fires; more means the port sent faster than its shaper
 * allows. A port that never runs ahead has lead_ns 0.
 *   wire_ns               S: wire time of every frame dequeued so far;
 *   first_ns              time of the first dequeue;
 *   min_sv, min_idx, min_t   the minimum of S+_i - t_i so far, the index of the first frame after
 *                         dequeue i and t_i;
 *   lead_ns               the largest lead over any window (0: never ahead of the line);
 *   lead_frames           that window's frames (after dequeue i, before j), lead_span_ns its t_j - t_i,
 *   lead_t_ns             its t_j.
 * And the spread of the backlogged gaps, for a confidence interval on the achieved rate:
 *   ratio_sum, ratio_sq   sums of gap / frame time in permille and of its square, the ratio capped
 *                         at RATIO_CAP permille so that the squares cannot overflow.
 * A packet the driver refused goes back to the qdisc (dev_requeue_skb: qstats.requeues grows) and
 * is traced again when it is handed over again; that second dequeue is counted in `requeued` only.
 *   requeues              the root qdisc's requeue count seen at the last dequeue;
 *   requeued              dequeues of a requeued packet.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define IFNAMSIZ 16
#define NBINS 31
#define MAX_BULK 64
#define RATIO_CAP 1000000

struct fl_deq_port {
	__u64 rate_kbps;          /* the port's line rate (userspace) */
	__u64 last_ns;            /* time of the last dequeue */
	__u64 last_len;           /* its frame's length in bytes */
	__u64 backlogged;         /* 1: the last dequeue left frames waiting */
	__u64 packets;
	__u64 bytes;
	__u64 gaps;
	__u64 within;
	__u64 gap_ns;
	__u64 frame_ns;
	__u64 max_len;            /* the longest packet dequeued (one frame: at most MTU + 14) */
	__u64 wire_ns;            /* S: wire time of every frame dequeued so far */
	__u64 first_ns;           /* time of the first dequeue */
	__s64 min_sv;             /* min over dequeues i of S+_i - t_i */
	__u64 min_idx;            /* the index of the first frame after dequeue i */
	__u64 min_t;              /* its t_i */
	__s64 lead_ns;            /* max over windows of wire time minus elapsed time */
	__u64 lead_frames;        /* that window's frames */
	__u64 lead_span_ns;       /* that window's elapsed time */
	__u64 lead_t_ns;          /* the time of the frame that ended it */
	__u64 ratio_sum;          /* sum over backlogged gaps of gap / frame time in permille (capped) */
	__u64 ratio_sq;           /* sum of its squares (the spread of the gaps) */
	__u64 requeues;           /* the root qdisc's requeue count at the last dequeue */
	__u64 requeued;           /* dequeues of a requeued packet (traced twice: counted once) */
	__u64 bins[NBINS];
};

struct fl_deq_key {
	char name[IFNAMSIZ];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct fl_deq_key);
	__type(value, struct fl_deq_port);
} fl_deq_port SEC(".maps");

/* The few kernel fields read, relocated by libbpf against the kernel's BTF. */
struct sk_buff {
	unsigned int len;
	struct sk_buff *next;
} __attribute__((preserve_access_index));

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
	__u32 requeues;
} __attribute__((preserve_access_index));

struct Qdisc {
	struct qdisc_skb_head q;
	struct gnet_stats_queue qstats;
} __attribute__((preserve_access_index));

SEC("raw_tp/qdisc_dequeue")
int fl_deq(struct bpf_raw_tracepoint_args *ctx)
{
	struct Qdisc *q = (struct Qdisc *)ctx->args[0];
	struct netdev_queue *txq = (struct netdev_queue *)ctx->args[1];
	struct sk_buff *skb = (struct sk_buff *)ctx->args[3];
	struct fl_deq_key k = {};

	if (!skb || !txq)
		return 0;
	struct net_device *dev = BPF_CORE_READ(txq, dev);
	if (!dev)
		return 0;
	bpf_probe_read_kernel_str(k.name, sizeof(k.name), dev->name);
	struct fl_deq_port *p = bpf_map_lookup_elem(&fl_deq_port, &k);
	if (!p || !p->rate_kbps)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u32 qlen = BPF_CORE_READ(q, q.qlen);
	__u32 requeues = BPF_CORE_READ(q, qstats.requeues);
	if (!p->packets && !p->requeued)
		p->requeues = requeues;   /* the count the qdisc had before the port was watched */
	if (requeues != (__u32)p->requeues) {
		/* the packet requeued since the last dequeue is handed over again: traced once already */
		p->requeues = requeues;
		p->requeued++;
		p->last_ns = now;
		p->backlogged = qlen > 0;
		return 0;
	}
	/* the lead of every window that ends with this dequeue (see the header) */
	__s64 sv = (__s64)p->wire_ns - (__s64)now;
	if (p->packets) {
		__s64 lead = sv - p->min_sv;
		if (lead > p->lead_ns) {
			p->lead_ns = lead;
			p->lead_frames = p->packets - p->min_idx;
			p->lead_span_ns = now - p->min_t;
			p->lead_t_ns = now;
		}
	} else {
		p->first_ns = now;
	}
	/* a bulk dequeue hands over a chain of skbs at one instant (args[2] counts them) */
	for (int i = 0; i < MAX_BULK; i++) {
		if (!skb)
			break;
		__u64 len = BPF_CORE_READ(skb, len);
		p->wire_ns += len * 8000000ULL / p->rate_kbps;
		if (p->backlogged && p->last_len) {
			__u64 gap = now - p->last_ns;
			__u64 frame = p->last_len * 8000000ULL / p->rate_kbps;   /* ns on the wire */
			__u64 permille = frame ? gap * 1000 / frame : 0;
			__u64 bin = permille / 100;
			if (bin >= NBINS)
				bin = NBINS - 1;
			p->gaps++;
			p->gap_ns += gap;
			p->frame_ns += frame;
			if (permille >= 900 && permille <= 1100)
				p->within++;
			p->bins[bin]++;
			__u64 r = permille < RATIO_CAP ? permille : RATIO_CAP;
			p->ratio_sum += r;
			p->ratio_sq += r * r;
		}
		p->packets++;
		p->bytes += len;
		if (len > p->max_len)
			p->max_len = len;
		p->last_ns = now;
		p->last_len = len;
		skb = BPF_CORE_READ(skb, next);
		/* frames after this one in the chain, or in the queue, keep the port backlogged */
		p->backlogged = (skb != 0) || qlen > 0;
	}
	/* windows that start after this dequeue's frames */
	sv = (__s64)p->wire_ns - (__s64)now;
	if (!p->min_t || sv < p->min_sv) {
		p->min_sv = sv;
		p->min_idx = p->packets;
		p->min_t = now;
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
