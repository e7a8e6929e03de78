// SPDX-License-Identifier: GPL-2.0
/*
 * fabriclab per-packet ECN marker: a tc clsact egress classifier
 * (direct-action) for kernels without sch_red.
 *
 * It runs on a switch port before the packet is queued in the port's
 * HTB(rate, burst) -> FIFO(buffer). It cannot read that FIFO, so it keeps a
 * virtual queue per port that serves like HTB's token bucket: since the last
 * arrival, rate x elapsed bytes of service became available on top of the
 * unused credit (at most the burst); the backlog is served from it and what
 * is left stays as credit. The packet's length is then added if it fits under
 * the buffer (the real FIFO drops it otherwise) and served at once from any
 * credit left. The backlog a packet finds decides its mark:
 *   step: mark if backlog >= K                        (DCTCP, SIGCOMM 2010 s3.1)
 *   red:  p = Pmax (q - Kmin) / (Kmax - Kmin) between Kmin and Kmax, 1 above Kmax
 *         (DCQCN, SIGCOMM 2015 s3.1; RED, Floyd & Jacobson 1993), q the
 *         instantaneous backlog or its EWMA (weight w / 65536).
 * Only ECT(0)/ECT(1) IPv4 packets are marked (RFC 3168 s5); the IP header
 * checksum is updated incrementally (RFC 1624). Every packet is let through
 * (TC_ACT_OK): drops stay with the real FIFO.
 *
 * Maps, keyed by ifindex: fl_ecn_cfg (written by user space: one element is
 * replaced atomically, so a threshold change never shows half-written) and
 * fl_ecn_st (virtual queue and counters, under a spin lock).
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define KIND_OFF 0
#define KIND_STEP 1
#define KIND_RED 2

struct fl_ecn_cfg {
	__u32 kind;
	__u32 weight_q16;          /* EWMA weight x 65536; 0 = instantaneous */
	__u64 rate_bytes_per_s;    /* the port's shaping rate */
	__u64 buffer_bytes;        /* the FIFO's limit */
	__u64 full_drain_ns;       /* buffer_bytes / rate: any longer idle empties the queue */
	__u64 k_bytes;             /* step */
	__u64 kmin_bytes;          /* red */
	__u64 kmax_bytes;
	__u64 pmax_q32;            /* Pmax x 2^32 (<= 2^32) */
	__u64 burst_nb;            /* the shaper's burst in nanobytes */
};

struct fl_ecn_st {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 backlog_nb;          /* virtual backlog in nanobytes (bytes x 1e9) */
	__u64 avg_q16;             /* EWMA of the backlog, bytes x 65536 */
	__u64 t_last_ns;
	__u64 packets;             /* IPv4 packets seen */
	__u64 ect;                 /* ECT(0)/ECT(1) seen */
	__u64 not_ect;
	__u64 ce_in;               /* already CE on arrival */
	__u64 marked;              /* set to CE here */
	__u64 vq_drops;            /* did not fit under the buffer (the FIFO drops them) */
	__u64 max_backlog_bytes;
	__u64 credit_nb;           /* unused service, at most burst_nb */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct fl_ecn_cfg);
} fl_ecn_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct fl_ecn_st);
} fl_ecn_st SEC(".maps");

#define NS 1000000000ULL

SEC("tc")
int fl_ecn_mark(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = data + sizeof(*eth);
	__u32 key = skb->ifindex;
	struct fl_ecn_cfg *cfg;
	struct fl_ecn_st *st;
	__u64 now, len, seen, q, drain, delta;
	__u32 rnd, ecn;
	int mark = 0;

	if ((void *)(iph + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	cfg = bpf_map_lookup_elem(&fl_ecn_cfg, &key);
	st = bpf_map_lookup_elem(&fl_ecn_st, &key);
	if (!cfg || !st)
		return TC_ACT_OK;
	ecn = iph->tos & 3;
	now = bpf_ktime_get_ns();
	rnd = bpf_get_prandom_u32();
	len = skb->len;

	bpf_spin_lock(&st->lock);
	delta = now > st->t_last_ns ? now - st->t_last_ns : 0;
	st->t_last_ns = now > st->t_last_ns ? now : st->t_last_ns;
	if (delta >= cfg->full_drain_ns) {
		st->backlog_nb = 0;
		st->credit_nb = cfg->burst_nb;
	} else {
		drain = delta * cfg->rate_bytes_per_s + st->credit_nb;
		if (st->backlog_nb > drain) {
			st->backlog_nb -= drain;
			st->credit_nb = 0;
		} else {
			drain -= st->backlog_nb;
			st->backlog_nb = 0;
			st->credit_nb = drain < cfg->burst_nb ? drain : cfg->burst_nb;
		}
	}
	seen = st->backlog_nb / NS;
	if (seen + len > cfg->buffer_bytes) {
		st->vq_drops++;
	} else {
		st->backlog_nb += len * NS;
		if (st->credit_nb >= st->backlog_nb) {
			st->credit_nb -= st->backlog_nb;
			st->backlog_nb = 0;
		} else {
			st->backlog_nb -= st->credit_nb;
			st->credit_nb = 0;
		}
	}
	if (seen > st->max_backlog_bytes)
		st->max_backlog_bytes = seen;
	q = seen;
	if (cfg->kind == KIND_RED && cfg->weight_q16) {
		/* avg <- avg + w (q - avg), in bytes x 65536 */
		__u64 target = seen << 16;
		if (target >= st->avg_q16)
			st->avg_q16 += ((target - st->avg_q16) * cfg->weight_q16) >> 16;
		else
			st->avg_q16 -= ((st->avg_q16 - target) * cfg->weight_q16) >> 16;
		q = st->avg_q16 >> 16;
	}
	st->packets++;
	if (ecn == 3)
		st->ce_in++;
	else if (ecn == 0)
		st->not_ect++;
	else
		st->ect++;
	if (ecn == 1 || ecn == 2) {
		if (cfg->kind == KIND_STEP) {
			mark = q >= cfg->k_bytes;
		} else if (cfg->kind == KIND_RED && q > cfg->kmin_bytes) {
			if (q > cfg->kmax_bytes) {
				mark = 1;
			} else {
				__u64 p = cfg->pmax_q32 * (q - cfg->kmin_bytes) / (cfg->kmax_bytes - cfg->kmin_bytes);
				mark = (__u64)rnd < p;
			}
		}
		if (mark)
			st->marked++;
	}
	bpf_spin_unlock(&st->lock);

	if (mark) {
		__u16 *word = (__u16 *)iph;   /* version/ihl and tos */
		__u16 old = *word, new;
		iph->tos |= 3;
		new = *word;
		bpf_l3_csum_replace(skb, sizeof(*eth) + offsetof(struct iphdr, check), old, new, sizeof(__u16));
	}
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
