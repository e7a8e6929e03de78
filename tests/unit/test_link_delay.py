"""The link-delay feature's pure parts: the configured round trip, netem's limit, the keys, what it
refuses before anything starts, and the netlink requests of a delay line (the live delay runs in
the stock-kernel lane; the ifb device, clsact and the redirect also live in
tests/integration/test_netlink_requests.py)."""
from __future__ import annotations

import pytest

from pyroute2.netlink.exceptions import NetlinkError

from common.errors import CapabilityError, ScenarioError, SetupError
from controller.dataplane import tcqdisc
from controller.dataplane.netlink import TCA_OPTIONS, nl_attrs
from controller.dataplane.tcqdisc import delay_line_limit_packets
from experiments.features.delay import LinkDelay, configured_rtt_s, path_links
from experiments.plan import check_against_fabric
from experiments.rounds import run_context as _context
from experiments.scenario import validate
from topologies.spineleaf import SpineLeaf


def test_a_path_counts_its_links():
    fmap = SpineLeaf(spines=2, leaves=2, hosts_per_leaf=2).build().to_map()
    assert path_links(fmap, "h1", "h2") == 2                 # one leaf
    assert path_links(fmap, "h1", "h3") == 4                 # leaf, spine, leaf
    assert configured_rtt_s(fmap, "h3", "h1", 5000) == pytest.approx(0.040)


def test_the_delay_line_holds_what_the_link_has_in_flight():
    # 100 Mbit/s x 10 ms of 84-byte minimum frames is 1488; half again as margin
    assert delay_line_limit_packets(100, 10_000) == int(1.5 * 100e6 * 0.01 / (84 * 8)) + 1
    assert delay_line_limit_packets(10, 100) == 1000


def _feature(data, env):
    sc = validate(data)
    ctx = _context(sc, check_against_fabric(sc), env, None, True)
    return LinkDelay(ctx), ctx


STOCK = {"qdiscs": {"netem": True}, "datapath": "kernel"}


@pytest.mark.parametrize("env, match", [
    ({"qdiscs": {"netem": False}, "datapath": "kernel"}, "links.delay_us: this kernel has no netem"),
    ({"qdiscs": {"netem": True}, "datapath": "user"}, "links.delay_us: Open vSwitch's userspace datapath"),
])
def test_a_kernel_that_cannot_delay_is_refused_naming_the_key(env, match):
    f, _ = _feature({"name": "x", "links": {"delay_us": 100}}, env)
    with pytest.raises(CapabilityError, match=match):
        f.plan(1)


def test_delay_with_priority_queues_is_refused_naming_the_key():
    f, _ = _feature({"name": "x", "links": {"delay_us": 100}, "pfc": {"xoff_packets": 20}}, STOCK)
    with pytest.raises(ScenarioError) as e:
        f.plan(2)
    assert e.value.key == "links.delay_us"


def test_no_delay_plans_nothing_and_records_zero():
    f, ctx = _feature({"name": "x"}, {"qdiscs": {}, "datapath": "user"})
    assert f.plan(1) == 0 and ctx.env["links"] == {"delay_us": 0, "jitter_us": 0}
    assert f.headline() is None


def test_the_keys_are_checked():
    assert validate({"name": "x", "links": {"delay_us": 250, "jitter_us": 50}}).links.jitter_us == 50
    for bad, key in (({"delay_us": -1}, "links.delay_us"), ({"delay_us": 10, "jitter_us": 11}, "links.jitter_us"),
                     ({"delay_ms": 1}, "links.delay_ms"), ({"delay_us": 1.5}, "links.delay_us")):
        with pytest.raises(ScenarioError) as e:
            validate({"name": "x", "links": bad})
        assert e.value.key == key


#: What iproute2 6.1 sent (``strace -xx -e trace=sendmsg``), the kernel here having no netem: the
#: TCA_OPTIONS of ``tc qdisc replace dev IFB root handle 1: netem limit L delay Dus [Jus]``
#: {(delay_us, jitter_us, limit): hex} (delay and jitter in psched ticks, 15.625 per us) ...
TC_NETEM_OPTIONS = {
    (123, 45, 1000): "81070000e8030000000000000000000000000000bf020000",
    (20000, 0, 4465): "b4c404007111000000000000000000000000000000000000",
    (7, 3, 1000): "6d000000e80300000000000000000000000000002e000000",
    (5000000, 100000, 1000000): "c817a80440420f0000000000000000000000000084d71700",
}

#: ... and of ``tc filter add dev IF ingress pref 1 protocol all u32 match u32 0 0 action mirred
#: egress redirect dev IFB`` with IFB's ifindex 4 (tcm_info 0x10300, parent ffff:fff2).
TC_REDIRECT_OPTIONS = ("38000700340001000b0001006d69727265640000240002802000020000000000000000000400000000000000"
                       "0000000001000000040000002400050001000100000000000000000000000000"
                       "00000000000000000000000000000000")


def _encoded(msg, msg_type) -> tuple[dict, dict]:
    """(tcmsg fields, {attr type: payload}) of a request as it goes on the wire."""
    msg["header"]["type"], msg["header"]["flags"] = msg_type, 0x505
    msg.encode()
    data = bytes(msg.data)
    return ({k: msg[k] for k in ("index", "handle", "parent", "info")}, nl_attrs(data, 36, len(data)))


def test_netem_is_requested_as_tc_requests_it():
    from pyroute2.netlink.rtnl.tcmsg.common import tick_in_usec
    if tick_in_usec != 15.625:
        pytest.skip(f"this kernel's psched ticks ({tick_in_usec} per us) are not those the bytes were read with")
    for (delay, jitter, limit), hexed in TC_NETEM_OPTIONS.items():
        fields, attrs = _encoded(tcqdisc.netem_message(9, delay, jitter, limit), 36)
        assert fields == {"index": 9, "handle": 0x10000, "parent": 0xFFFFFFFF, "info": 0}
        assert attrs[1] == b"netem\0" and attrs[TCA_OPTIONS].hex() == hexed, (delay, jitter)


def test_the_redirect_is_requested_as_tc_requests_it():
    fields, attrs = _encoded(tcqdisc.redirect_filter_message(3, 4), 44)
    assert fields == {"index": 3, "handle": 0, "parent": 0xFFFFFFF2, "info": 0x10300}
    assert attrs[1] == b"u32\0" and attrs[TCA_OPTIONS].hex() == TC_REDIRECT_OPTIONS


class _FakeIPRoute:
    """Records a delay line's requests; ``refuse`` maps a step's name to the errno it meets."""

    def __init__(self, refuse=None):
        self.calls, self.refuse, self.links = [], dict(refuse or {}), {"eth1": 2}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def link_lookup(self, ifname):
        return [self.links[ifname]] if ifname in self.links else []

    def _maybe_refuse(self, step):
        self.calls.append(step)
        if step in self.refuse:
            raise NetlinkError(self.refuse[step], "the kernel's words")

    def link(self, command, **kw):
        self._maybe_refuse(f"link {command} {kw.get('ifname', kw.get('index'))} {kw.get('kind', kw.get('state', ''))}")
        if command == "add":
            self.links[kw["ifname"]] = 9

    def nlm_request_batch(self, msgs):
        self._maybe_refuse(f"tc {msgs[0].get_attr('TCA_KIND')} on {msgs[0]['index']}")


def test_a_delay_line_is_requested_in_order_on_one_socket(monkeypatch):
    fake = _FakeIPRoute()
    monkeypatch.setattr(tcqdisc, "ipr_entered", lambda pid: fake)
    tcqdisc.install_delay_line("eth1", "fldelay1", 100, 10, 1000, netns_pid=123)
    assert fake.calls == ["link add fldelay1 ifb", "link set 9 up", "tc netem on 9", "tc clsact on 2", "tc u32 on 2"]


def test_a_clsact_already_there_is_kept_and_a_refusal_names_the_interface_and_the_step(monkeypatch):
    fake = _FakeIPRoute(refuse={"tc clsact on 2": 17})
    monkeypatch.setattr(tcqdisc, "ipr_entered", lambda pid: fake)
    tcqdisc.install_delay_line("eth1", "fldelay1", 100, 0, 1000)
    assert fake.calls[-1] == "tc u32 on 2"
    fake = _FakeIPRoute(refuse={"tc netem on 9": 2})
    monkeypatch.setattr(tcqdisc, "ipr_entered", lambda pid: fake)
    with pytest.raises(SetupError, match=r"delay line on eth1: netem on fldelay1: kernel refused "
                                         r"\(2: the kernel's words\)"):
        tcqdisc.install_delay_line("eth1", "fldelay1", 100, 0, 1000)
    monkeypatch.setattr(tcqdisc, "ipr_entered", lambda pid: _FakeIPRoute())
    with pytest.raises(SetupError, match="delay line: no interface 'eth9'"):
        tcqdisc.install_delay_line("eth9", "fldelay1", 100, 0, 1000)
