// SPDX-License-Identifier: GPL-2.0
/* fabriclab's count of the frames Open vSwitch's userspace datapath discards without a counter.
 *
 * With datapath_type=netdev, ovs-vswitchd sends each output batch (the packets one receive batch
 * forwards to one port) with one sendmmsg(2) on its shared AF_PACKET socket
 * (lib/netdev-linux.c, netdev_linux_sock_batch_send). When the port's queue is full, the qdisc
 * drops the frame (its drop counter moves) and sendmmsg fails with ENOBUFS:
 *   - on the call's first message, sendmmsg returns -ENOBUFS; OVS stops and frees the rest of the
 *     batch: those frames reach no qdisc and move no counter anywhere ("discarded");
 *   - on a later message, sendmmsg returns how many went before; OVS sends again from the refused
 *     frame, so the qdisc counts a drop for a frame that is tried again ("retried": a drop
 *     counted once too often, whether the second try is taken or refused again).
 * So the frames a port really lost = its qdisc's drops - retried + discarded.
 *
 *   raw tracepoint sys_exit(struct pt_regs *regs, long ret) (include/trace/events/syscalls.h),
 *   for every system call's return; only sendmmsg(int fd, struct mmsghdr *msgvec, unsigned int
 *   vlen, int flags) of the process whose tgid userspace wrote into fl_ovstx_cfg counts. At the
 *   exit the saved user registers still hold the call's number and its arguments (x86-64: orig_ax,
 *   si, dx; arm64: syscallno, regs[1], regs[2]; chosen at build time by -DFL_ARCH_*), read with
 *   CO-RE against the kernel's BTF. (An fexit on __sys_sendmmsg would be simpler; some kernels,
 *   this project's CI among them, refuse tracing programs.) The port is the first message's
 *   destination (struct sockaddr_ll's sll_ifindex, read from user memory): OVS gives every
 *   message of one call the same one.
 *
 * Per interface index (fl_ovstx_port, kept by the kernel; userspace reads and deletes):
 *   calls, messages       sendmmsg calls and the messages they asked to send;
 *   sent                  messages sendmmsg reported sent;
 *   retried               calls that returned early (a later message refused; OVS tries it again);
 *   refused_first         calls whose first message was refused with ENOBUFS (a qdisc drop);
 *   discarded             the messages after it, which OVS then freed without sending;
 *   other_errors          calls that failed otherwise (their messages all discarded, none counted).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define ENOBUFS 105

/* The saved user registers at a system call's exit: its number and arguments 2 and 3. */
#if defined(FL_ARCH_X86)
#define NR_SENDMMSG 307
struct pt_regs {
	unsigned long si;
	unsigned long dx;
	unsigned long orig_ax;
} __attribute__((preserve_access_index));
#define SYSCALL_NR(r) BPF_CORE_READ(r, orig_ax)
#define ARG2(r) BPF_CORE_READ(r, si)
#define ARG3(r) BPF_CORE_READ(r, dx)
#elif defined(FL_ARCH_ARM64)
#define NR_SENDMMSG 269
struct pt_regs {
	unsigned long long regs[31];
	int syscallno;
} __attribute__((preserve_access_index));
#define SYSCALL_NR(r) BPF_CORE_READ(r, syscallno)
#define ARG2(r) BPF_CORE_READ(r, regs[1])
#define ARG3(r) BPF_CORE_READ(r, regs[2])
#else
#error "build with -DFL_ARCH_X86 or -DFL_ARCH_ARM64 (scripts/build-bpf.sh does)"
#endif

struct fl_ovstx_port {
	__u64 calls;
	__u64 messages;
	__u64 sent;
	__u64 retried;
	__u64 refused_first;
	__u64 discarded;
	__u64 other_errors;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);     /* ovs-vswitchd's tgid */
} fl_ovstx_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);       /* ifindex */
	__type(value, struct fl_ovstx_port);
} fl_ovstx_port SEC(".maps");

SEC("raw_tp/sys_exit")
int fl_ovstx(struct bpf_raw_tracepoint_args *ctx)
{
	__u32 zero = 0;
	__u32 *tgid = bpf_map_lookup_elem(&fl_ovstx_cfg, &zero);
	if (!tgid || *tgid == 0 || (bpf_get_current_pid_tgid() >> 32) != *tgid)
		return 0;
	struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
	if (SYSCALL_NR(regs) != NR_SENDMMSG)
		return 0;
	long ret = (long)ctx->args[1];
	void *mmsg = (void *)ARG2(regs);
	__u32 vlen = (__u32)ARG3(regs);
	if (vlen == 0)
		return 0;
	/* struct mmsghdr starts with struct msghdr, which starts with void *msg_name; a
	 * struct sockaddr_ll has sll_family (u16), sll_protocol (u16), then int sll_ifindex */
	void *name = 0;
	int ifindex = 0;
	if (bpf_probe_read_user(&name, sizeof(name), mmsg) || !name)
		return 0;
	if (bpf_probe_read_user(&ifindex, sizeof(ifindex), name + 4))
		return 0;
	__u32 key = (__u32)ifindex;
	struct fl_ovstx_port *p = bpf_map_lookup_elem(&fl_ovstx_port, &key);
	if (!p) {
		struct fl_ovstx_port init = {};
		bpf_map_update_elem(&fl_ovstx_port, &key, &init, BPF_NOEXIST);
		p = bpf_map_lookup_elem(&fl_ovstx_port, &key);
		if (!p)
			return 0;
	}
	__sync_fetch_and_add(&p->calls, 1);
	__sync_fetch_and_add(&p->messages, vlen);
	if (ret >= 0) {
		__sync_fetch_and_add(&p->sent, ret);
		if ((__u32)ret < vlen)
			__sync_fetch_and_add(&p->retried, 1);
	} else if (ret == -ENOBUFS) {
		__sync_fetch_and_add(&p->refused_first, 1);
		__sync_fetch_and_add(&p->discarded, vlen - 1);
	} else {
		__sync_fetch_and_add(&p->other_errors, 1);
		__sync_fetch_and_add(&p->discarded, vlen);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
