"""The Datapath seam: Open vSwitch satisfies the protocol, a second datapath is one class plus one
registration, the run's choice comes back from its environment, and a crash's leftovers are removed
only where a datapath has them."""
from __future__ import annotations

import contextlib

import pytest

from common.errors import SetupError
from controller.dataplane import ovsctl
from controller.datapaths import registry
from controller.datapaths.base import FORWARDING_THREAD, Datapath
from controller.datapaths.ovs.datapath import OvsDatapath


class ThrowawayDatapath:
    """A second datapath as a contributor would add one (a class; its registration is the test's)."""
    name = "throwaway"
    routes_via = "maps"
    switches: set[str] = set()
    removed: list[str] = []

    def __init__(self, mode: str):
        self.mode = mode

    @classmethod
    def available(cls):
        return "fast"

    def record(self):
        return {"impl": self.name, "mode": self.mode}

    def switch_class(self):
        return object

    def unconnected(self, switches):
        return []

    def shutdown(self, switches):
        pass

    @classmethod
    def present(cls):
        return set(cls.switches)

    @classmethod
    def remove(cls, names):
        cls.removed += names
        cls.switches -= set(names)

    def forwarders(self):
        return {}

    def trace_hop(self, switch, flow):
        return 1, {}

    @contextlib.contextmanager
    def hold_for_run(self, buffer_bytes, state):
        yield {}


def test_open_vswitch_is_a_datapath_and_says_what_it_is():
    dp = OvsDatapath("user")
    assert isinstance(dp, Datapath)
    assert dp.record() == {"impl": "ovs", "mode": "user", "datapath_type": "netdev", "routes_via": "openflow13"}
    assert OvsDatapath("kernel").record()["datapath_type"] == "system"
    assert dp == OvsDatapath("user") and dp != OvsDatapath("kernel")
    with pytest.raises(SetupError, match="'bpf'"):
        OvsDatapath("bpf")


def test_the_userspace_datapath_names_its_forwarding_thread(monkeypatch):
    monkeypatch.setattr(ovsctl, "ovs_vswitchd_pid", lambda: 4242)
    assert OvsDatapath("user").forwarders() == {"ovs-vswitchd": 4242, FORWARDING_THREAD: (4242, 4242)}
    assert OvsDatapath("kernel").forwarders() == {"ovs-vswitchd": 4242}


def test_the_kernel_datapath_holds_nothing_for_a_run():
    with OvsDatapath("kernel").hold_for_run(1 << 20, state=None) as rec:
        assert rec == {}


def test_a_second_datapath_is_one_class_plus_one_registration(monkeypatch):
    monkeypatch.setitem(registry.DATAPATHS, ThrowawayDatapath.name, ThrowawayDatapath)
    assert isinstance(ThrowawayDatapath("fast"), Datapath)
    dp = registry.from_environment({"datapath_impl": "throwaway", "datapath": "fast"})
    assert isinstance(dp, ThrowawayDatapath) and dp.mode == "fast"
    # chosen when the ones before it cannot run here
    monkeypatch.setattr(OvsDatapath, "available", classmethod(lambda cls: None))
    assert isinstance(registry.choose(), ThrowawayDatapath)


def test_nothing_can_run_here_is_an_error_naming_what_was_tried(monkeypatch):
    monkeypatch.setattr(OvsDatapath, "available", classmethod(lambda cls: None))
    with pytest.raises(SetupError, match="no datapath can run on this machine .tried ovs"):
        registry.choose()


def test_a_recorded_run_without_an_implementation_was_open_vswitch():
    assert registry.from_environment({"datapath": "kernel"}) == OvsDatapath("kernel")
    with pytest.raises(SetupError, match="datapath_impl 'gone'"):
        registry.from_environment({"datapath_impl": "gone", "datapath": "user"})


def test_leftovers_are_removed_only_where_a_datapath_has_them(monkeypatch):
    deleted = []
    monkeypatch.setattr(ovsctl, "ovs_bridges", lambda: ["s1", "l1", "other"])
    monkeypatch.setattr(ovsctl, "ovs_del_bridges", lambda names: deleted.extend(names))
    monkeypatch.setitem(registry.DATAPATHS, ThrowawayDatapath.name, ThrowawayDatapath)
    monkeypatch.setattr(ThrowawayDatapath, "switches", {"x1"})
    monkeypatch.setattr(ThrowawayDatapath, "removed", [])
    assert registry.present_everywhere() == {"s1", "l1", "other", "x1"}
    assert sorted(registry.remove_everywhere(["s1", "x1", "gone"])) == ["s1", "x1"]
    assert deleted == ["s1"] and ThrowawayDatapath.removed == ["x1"]
