"""The PFC pauser (controller.pfc.ports.PfcPorts) driven without root: a fake clock, a fake BPF
accounting (the kernel's per-(switch, ingress port, priority) counters and paused flags) and fake
gates (the upstream transmitters). What a fabric test sees only through timing: which gate an
XOFF closes, that XON reopens it, that a lost ring-buffer event is caught by the sweep, the
watchdog's storm with its drop action, PFC switched off mid-pause, and the report's pauses."""
import pytest

from common.pfc import parse_pfc
from controller.pfc.ports import PfcPorts
from experiments.features.pfc.plan import pfc_plan
from topologies.spineleaf import SpineLeaf

BUF = 100 * 1514
XOFF, XON = 40 * 1514, 34 * 1514


class Clock:
    def __init__(self):
        self.t_ns = 1_000_000_000

    def __call__(self):
        return self.t_ns

    def advance(self, s: float) -> int:
        self.t_ns += int(s * 1e9)
        return self.t_ns


class FakeBpf:
    """The kernel side: counters by (sw, port, prio), with its paused flag, and what was set."""

    def __init__(self):
        self.counters, self.limits, self.storm_drop = {}, {}, {}

    def read(self, sw, port, prio):
        return self.counters.get((sw, port, prio))

    def hold(self, key, nbytes, paused):
        self.counters[key] = {"bytes": nbytes, "paused": paused, "packets": nbytes // 1514}

    def set_limits(self, sw, port, prio, xoff, xon, cap=0):
        self.limits[(sw, port, prio)] = (xoff, xon, cap)

    def set_storm_drop(self, sw, port, prio, on):
        self.storm_drop[(sw, port, prio)] = on


class FakeGates:
    def __init__(self, ifname):
        self.ifname, self.closed, self.calls = ifname, set(), []

    def close_gate(self, prio):
        self.closed.add(prio)
        self.calls.append(("close", prio))

    def open_gate(self, prio):
        self.closed.discard(prio)
        self.calls.append(("open", prio))

    def set_limit(self, prio, limit):
        self.calls.append(("limit", prio, limit))


class InlineWorker:
    """A gate worker that runs what is submitted at once (the real one has a thread per port)."""

    def __init__(self, gates):
        self.gates = gates

    def submit(self, fn, *args):
        fn(*args)

    def wait(self, timeout_s=5.0):
        return True


def pauser(enabled=True, watchdog_s=None, action="keep"):
    fabric = SpineLeaf(spines=2, leaves=2, hosts_per_leaf=2, host_rate_mbps=10, uplink_rate_mbps=40).build()
    pfc = {"enabled": enabled, "xoff_packets": 40, "xon_packets": 34}
    if watchdog_s:
        pfc["watchdog"] = {"timeout_s": watchdog_s, "action": action}
    cfg = parse_pfc(None, pfc, BUF)
    plan = pfc_plan(fabric.to_map(), cfg, BUF, 3028, host_fifo_bytes=1000 * 1514, slack_s=100e-6)
    clock = Clock()
    return plan, clock


def started(tmp_path, **kw):
    plan, clock = pauser(**kw)
    pp = PfcPorts(plan, clock_ns=clock)
    pp.plan_pauses()
    pp.bpf = FakeBpf()
    intfs = {p.peer_intf for s in plan.switches for p in s.ports} | {p.intf for s in plan.switches for p in s.ports}
    pp.workers = {i: InlineWorker(FakeGates(i)) for i in intfs}
    return pp, clock


def port_key(pp, intf):
    """(sw, ingress index) of a switch port, and the link record."""
    for key, link in pp.links.items():
        if link["intf"] == intf:
            return key, link
    raise KeyError(intf)


def event(clock, key, prio, kind, nbytes):
    return {"t_ns": clock(), "sw": key[0], "port": key[1], "prio": prio, "kind": kind, "bytes": nbytes}


def test_xoff_closes_the_upstream_gate_and_xon_reopens_it(tmp_path):
    pp, clock = started(tmp_path)
    key, link = port_key(pp, "leaf1-eth1")          # leaf1's port from h1: XOFF pauses h1's NIC
    gates = pp.workers[link["peer_intf"]].gates
    assert link["peer_intf"] == "h1-eth0"
    pp._on_event(event(clock, key, 3, "xoff", XOFF))
    assert gates.closed == {3}
    clock.advance(0.25)
    pp._on_event(event(clock, key, 3, "xon", XON))
    assert gates.closed == set()
    (pause,) = pp.pauses
    assert pause["port"] == "leaf1-eth1" and pause["upstream_port"] == "h1-eth0" and pause["priority"] == 3
    assert pause["end_s"] - pause["start_s"] == pytest.approx(0.25)
    assert len(pp.reaction_s) == 1


def test_a_lossy_priority_or_pfc_off_pauses_nobody(tmp_path):
    pp, clock = started(tmp_path)
    key, link = port_key(pp, "leaf1-eth1")
    pp._on_event(event(clock, key, 0, "xoff", XOFF))        # priority 0 is lossy
    assert pp.workers[link["peer_intf"]].gates.calls == []
    off, clock = started(tmp_path / "off", enabled=False)
    off._on_event(event(clock, key, 3, "xoff", XOFF))
    assert off.workers[link["peer_intf"]].gates.calls == []


def test_the_sweep_catches_a_lost_event_both_ways(tmp_path):
    pp, clock = started(tmp_path)
    key, link = port_key(pp, "spine1-eth1")         # a spine port: XOFF pauses the leaf's uplink
    gates = pp.workers[link["peer_intf"]].gates
    pp.bpf.hold((*key, 3), XOFF + 1514, paused=True)   # the kernel paused; its event never arrived
    pp._tick()
    assert gates.closed == {3} and pp.lost_events == 1
    clock.advance(0.1)
    pp.bpf.hold((*key, 3), XON - 1514, paused=False)
    pp._tick()
    assert gates.closed == set() and pp.lost_events == 2 and len(pp.pauses) == 1


def test_the_watchdog_drop_action_reopens_the_gate_and_drops_downstream(tmp_path):
    pp, clock = started(tmp_path, watchdog_s=0.5, action="drop")
    key, link = port_key(pp, "leaf1-eth1")
    gates = pp.workers[link["peer_intf"]].gates
    pp._on_event(event(clock, key, 3, "xoff", XOFF))
    pp.bpf.hold((*key, 3), XOFF, paused=True)
    clock.advance(0.3)
    pp._tick()
    assert not pp.storms and gates.closed == {3}
    clock.advance(0.3)                                  # paused 0.6 s > the 0.5 s watchdog
    pp._tick()
    (storm,) = pp.storms
    assert storm["port"] == "leaf1-eth1" and storm["action"] == "drop"
    assert pp.bpf.storm_drop[(*key, 3)] is True and gates.closed == set()
    clock.advance(0.1)
    pp._on_event(event(clock, key, 3, "xon", XON))
    assert pp.bpf.storm_drop[(*key, 3)] is False and pp.pauses[0]["storm"] is True


def test_switching_pfc_off_mid_pause_ends_the_pause_and_lifts_the_limits(tmp_path):
    pp, clock = started(tmp_path)
    key, link = port_key(pp, "leaf1-eth1")
    pp._on_event(event(clock, key, 3, "xoff", XOFF))
    clock.advance(0.2)
    assert pp.set_enabled(False) == len(pp.states)
    assert pp.workers[link["peer_intf"]].gates.closed == set()
    assert pp.bpf.limits[(*key, 3)] == (0, 0, 0) and not pp.enabled
    assert pp.pauses[0]["end_s"] - pp.pauses[0]["start_s"] == pytest.approx(0.2)
    pp.set_enabled(True)
    assert pp.bpf.limits[(*key, 3)] == (XOFF, XON, BUF)
