"""The sampler's netlink parser, on hand-built RTM_NEWQDISC messages."""
import struct

import pytest

from controller.qstats import (NLMSG_DONE, NLMSG_ERROR, RTM_NEWQDISC, TC_H_ROOT, TCA_STATS,
                               parse_qdisc_dump)


def attr(atype, payload):
    raw = struct.pack("=HH", 4 + len(payload), atype) + payload
    return raw + b"\0" * ((4 - len(raw) % 4) % 4)


def qdisc_msg(seq, ifindex, parent, kind=b"htb\0", stats=(0, 0, 0, 0, 0, 0, 0, 0)):
    body = struct.pack("=BxxxiIII", 0, ifindex, 0x10000, parent, 1)
    body += attr(1, kind) + attr(2, b"\0" * 12) + attr(TCA_STATS, struct.pack("=QIIIIIII", *stats))
    return struct.pack("=IHHII", 16 + len(body), RTM_NEWQDISC, 2, seq, 0) + body


def done(seq):
    return struct.pack("=IHHII", 20, NLMSG_DONE, 2, seq, 0) + b"\0" * 4


def test_reads_root_qdisc_of_watched_interfaces_only():
    # tc_stats: bytes, packets, drops, overlimits, bps, pps, qlen, backlog
    data = (qdisc_msg(7, 5, TC_H_ROOT, stats=(123456, 90, 3, 0, 0, 0, 12, 18168))
            + qdisc_msg(7, 5, 0x10001, kind=b"pfifo\0", stats=(1, 1, 1, 1, 1, 1, 1, 1))   # child: ignored
            + qdisc_msg(7, 6, TC_H_ROOT, stats=(9, 9, 9, 9, 9, 9, 9, 9))                  # unwatched
            + qdisc_msg(6, 5, TC_H_ROOT, stats=(8, 8, 8, 8, 8, 8, 8, 8)))                 # stale seq
    out = {}
    assert parse_qdisc_dump(memoryview(data), 7, {5: "leaf1-eth1"}, out) is False
    assert out == {"leaf1-eth1": (18168, 12, 3, 123456, 90)}
    assert parse_qdisc_dump(memoryview(done(7)), 7, {5: "leaf1-eth1"}, out) is True


def test_netlink_error_raises():
    err = struct.pack("=IHHII", 36, NLMSG_ERROR, 0, 1, 0) + struct.pack("=i", -1) + b"\0" * 16
    with pytest.raises(OSError):
        parse_qdisc_dump(memoryview(err), 1, {}, {})


def test_malformed_raises():
    with pytest.raises(OSError, match="malformed"):
        parse_qdisc_dump(memoryview(struct.pack("=IHHII", 4, RTM_NEWQDISC, 0, 1, 0)), 1, {}, {})


def _bpf_reader_over(entries, seed=None):
    """A BpfQueueReader whose mapped array is ``entries`` (rows of seq, backlog_bytes,
    backlog_packets, drops, tx_bytes, tx_packets, events, pad): its copying and decoding without
    the kernel."""
    import numpy as np
    from controller.qstats import BpfQueueReader
    r = BpfQueueReader.__new__(BpfQueueReader)
    r.names = [f"p{i}" for i in range(len(entries))]
    r.view = np.array(entries, dtype=np.uint64)
    r.seed = np.zeros((len(entries), 6), dtype=np.uint64)
    r.torn_rereads = 0
    if seed:
        r.seed_from(seed)
    return r


def test_bpf_reader_shows_the_seed_until_a_ports_first_event_then_the_kernels_counters():
    r = _bpf_reader_over([[2, 1500, 1, 3, 9000, 6, 4, 0],
                          [0, 0, 0, 0, 0, 0, 0, 0]],
                         seed={"p0": (0, 0, 1, 10, 1), "p1": (0, 0, 2, 777, 7)})
    assert r.read() == {"p0": (1500, 1, 3, 9000, 6), "p1": (0, 0, 2, 777, 7)}


def test_bpf_reader_copies_an_entry_again_while_the_kernel_is_writing_it():
    import numpy as np
    r = _bpf_reader_over([[3, 1, 1, 0, 0, 0, 1, 0], [2, 5, 5, 0, 0, 0, 1, 0]])

    class Settling:
        """The array as seen at two moments: entry 0 half-written at the first copy."""
        def __init__(self, first, then):
            self.reads, self.first, self.then = 0, first, then

        def copy(self):
            self.reads += 1
            return self.first.copy()

        def __getitem__(self, idx):
            return self.then[idx]

    settled = np.array([[4, 3000, 2, 0, 0, 0, 2, 0], [2, 5, 5, 0, 0, 0, 1, 0]], dtype=np.uint64)
    r.view = Settling(r.view, settled)
    assert r.decode(r.read_raw()) == {"p0": (3000, 2, 0, 0, 0), "p1": (5, 5, 0, 0, 0)}
    assert r.torn_rereads == 1


def test_the_sample_loop_decodes_nothing_and_the_writer_decodes_each_tick(tmp_path):
    from controller.qstats import sample_loop, write_samples
    r = _bpf_reader_over([[2, 100, 1, 0, 50, 1, 1, 0]])
    samples = sample_loop(r, 1000.0, lambda: False, duration_s=0.02)
    assert samples and all(not isinstance(raw, dict) for _, raw in samples)
    assert write_samples(samples, tmp_path / "q.csv", r.decode) == len(samples)
    assert (tmp_path / "q.csv").read_text().splitlines()[1].split(",")[1:] == ["p0", "100", "1", "0", "50", "1"]


def test_auto_reads_the_default_fabric_and_a_k4_fat_tree_by_netlink_and_k6_k8_by_bpf():
    from controller.qstats import AUTO_NETLINK_MAX_CORE, netlink_cpu_estimate
    # switch ports: default Spine-Leaf 40, Fat-Tree k=4 80, k=6 270, k=8 640
    assert netlink_cpu_estimate(40, 200) == pytest.approx(0.033, abs=0.001)
    assert [netlink_cpu_estimate(n, 200) <= AUTO_NETLINK_MAX_CORE for n in (40, 80, 270, 640)] == \
        [True, True, False, False]
    assert netlink_cpu_estimate(640, 20) <= AUTO_NETLINK_MAX_CORE   # a slow sampler stays on netlink
