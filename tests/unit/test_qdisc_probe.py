"""The environment probe's qdisc requests (controller.dataplane.tcqdisc.probe_qdisc_message):
what tc sent for the probe's former command lines, so a kernel accepts them as it accepted tc's.
Which kinds this kernel accepts is checked live in tests/integration/test_lane.py."""
import pytest

from controller.dataplane import tcqdisc
from controller.dataplane.netlink import TCA_KIND, TCA_OPTIONS, nl_attrs
from experiments.probe import QDISC_PROBES

#: What iproute2 6.1 sent for ``tc qdisc add dev IF root handle 1: <kind> <args>`` (``tc qdisc add
#: dev IF clsact``) with the probe's former arguments, read with ``strace -xx -e trace=sendmsg``:
#: {kind: (handle, parent, TCA_OPTIONS hex or None when tc sent none)}.
TC_PROBE_REQUESTS = {
    "htb": (0x10000, 0xFFFFFFFF, "18000200030000000a000000000000000000000000000000"),    # htb
    "pfifo": (0x10000, 0xFFFFFFFF, None),                                               # pfifo
    "bfifo": (0x10000, 0xFFFFFFFF, None),                                               # bfifo
    "netem": (0x10000, 0xFFFFFFFF, "093d0000e803000000000000000000000000000000000000"),  # netem delay 1ms
    "fq_codel": (0x10000, 0xFFFFFFFF, ""),                                              # fq_codel
    "clsact": (0xFFFF0000, 0xFFFFFFF1, None),                                           # clsact
    # red limit 400000 min 30000 max 90000 avpkt 1000 burst 55 bandwidth 10mbit probability 0.1 ecn
    "red": (0x10000, 0xFFFFFFFF, (
            "14000100801a060030750000905f010005140f0004010200000000000000000000000000000101010101010101010101"
            "010202020202020202020202020303030303030303030303030404040404040404040404040505050505050505050505"
            "050606060606060606060606060707070707070707070707070808080808080808080808080909090909090909090909"
            "090a0a0a0a0a0a0a0a0a0a0a0a0b0b0b0b0b0b0b0b0b0b0b0b0c0c0c0c0c0c0c0c0c0c0c0c0d0d0d0d0d0d0d0d0d0d0d"
            "0d0e0e0e0e0e0e0e0e0e0e0e0e0f0f0f0f0f0f0f0f0f0f0f0f1010101010101010101010101111111111111111111111"
            "1112121212121212121212121213131313131313131313131314141414141414141414141415151f0800030099999919"
            "0c000400010000000f000000")),
}

#: tc's prio request: struct tc_prio_qopt (3 bands, the default priomap), then an empty attribute
#: the kernel does not read.
TC_PRIO = "030000000102020201020000010101010101010104000200"


def _request(kind):
    msg = tcqdisc.probe_qdisc_message(kind, 5)
    msg["header"]["type"], msg["header"]["flags"] = 36, 0x605
    msg.encode()
    data = bytes(msg.data)
    return msg, nl_attrs(data, 36, len(data))


def test_every_probed_kind_has_a_request():
    for kind in QDISC_PROBES:
        msg, attrs = _request(kind)
        assert attrs[TCA_KIND] == kind.encode() + b"\0" and msg["index"] == 5


@pytest.mark.parametrize("kind", sorted(TC_PROBE_REQUESTS))
def test_the_probe_requests_what_tc_requested(kind):
    from pyroute2.netlink.rtnl.tcmsg.common import tick_in_usec
    if kind in ("netem", "red") and tick_in_usec != 15.625:
        pytest.skip(f"this kernel's psched ticks ({tick_in_usec} per us) are not those the bytes were read with")
    handle, parent, hexed = TC_PROBE_REQUESTS[kind]
    msg, attrs = _request(kind)
    assert (msg["handle"], msg["parent"]) == (handle, parent)
    assert (attrs[TCA_OPTIONS].hex() if TCA_OPTIONS in attrs else None) == hexed


def test_prio_and_tbf_carry_what_the_kernel_reads():
    _, attrs = _request("prio")
    assert attrs[TCA_OPTIONS].hex() == TC_PRIO[:40]           # struct tc_prio_qopt, as tc's
    _, attrs = _request("tbf")
    parms = nl_attrs(attrs[TCA_OPTIONS], 0, len(attrs[TCA_OPTIONS]))[1]     # TCA_TBF_PARMS
    # tc's: rate 1.25e6 B/s, limit 72740 B (10 Mbit/s x 50 ms + 10 kB), the same buffer in ticks
    tc = bytes.fromhex("03010000ffff0000d0121300000000000000000000000000241c010000f4010000000000")
    assert parms[8:12] == tc[8:12] and parms[24:] == tc[24:] and parms[0] == tc[0]
