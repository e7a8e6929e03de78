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
