"""Link propagation delay (a scenario's ``links`` section): a delay line at the receiving end of
every link, in each direction, after the sending port's shaper and buffer. Each interface's tc
ingress hook redirects its arriving frames to an ifb device of its own whose root qdisc is netem
(``controller.dataplane.tcqdisc.install_delay_line``); the ifb hands each frame back to the interface's
receive path once its delay has passed. The switch buffers, the ECN marker and the queue sampler
see exactly what they see without delay, and the delay line never holds buffer (case L3).

Needs netem (stock kernels have it; this project's development kernel does not) and Open
vSwitch's kernel datapath: the userspace datapath reads a port's frames through a packet socket,
before the tc ingress hook, so a delay line there would be bypassed. Both are refused with the key
named, before anything starts.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import networkx as nx

from common.errors import CapabilityError, ScenarioError, SetupError
from common.lazy import lazy_module
from common.units import FRAME_BYTES
from controller.routing import switch_graph
from experiments.features.base import Feature

if TYPE_CHECKING:
    from controller.dataplane import hostknobs
    from controller.dataplane import tcqdisc
else:    # the live half, loaded when a live hook first runs (common.lazy): analyze and plot run without it
    hostknobs = lazy_module("controller.dataplane.hostknobs")
    tcqdisc = lazy_module("controller.dataplane.tcqdisc")


MECHANISM = ("tc ingress redirect of every interface's arriving frames to an ifb device with netem as its "
             "root qdisc; the frames re-enter the interface's receive path after the delay")


def path_links(fabric_map: dict, src: str, dst: str) -> int:
    """The number of links on a shortest path from host ``src`` to host ``dst`` (2 under one switch).

    Raises:
        KeyError: a host not in the fabric.
    """
    hosts = {h["name"]: h for h in fabric_map["hosts"]}
    a, b = hosts[src]["switch"], hosts[dst]["switch"]
    return 2 + (0 if a == b else nx.shortest_path_length(switch_graph(fabric_map), a, b))


def configured_rtt_s(fabric_map: dict, src: str, dst: str, delay_us: int) -> float:
    """The propagation round trip between two hosts: twice the links on the path times the delay."""
    return 2 * path_links(fabric_map, src, dst) * delay_us * 1e-6


class LinkDelay(Feature):
    """Every link's propagation delay (see the module docstring)."""
    name = "links"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.state = None
        self.root_ifbs: list[str] = []

    def plan(self, queues_per_port: int) -> int:
        """Refuse what cannot delay (CapabilityError or ScenarioError naming ``links.delay_us``);
        record the configured delay and round trip."""
        ctx, links = self.ctx, self.ctx.sc.links
        ctx.env["links"] = {"delay_us": links.delay_us, "jitter_us": links.jitter_us}
        if not links.delay_us:
            return 0
        if not ctx.env["qdiscs"].get("netem"):
            raise CapabilityError("links.delay_us: this kernel has no netem qdisc (sch_netem), which the delay "
                                  "line needs; stock Debian and Ubuntu kernels have it")
        if ctx.env["datapath"] != "kernel":
            raise CapabilityError("links.delay_us: Open vSwitch's userspace datapath reads each port's frames "
                                  "before the tc ingress hook that delays them; it needs the openvswitch kernel module")
        if queues_per_port > 1 or ctx.sc.pfc is not None:
            raise ScenarioError("links.delay_us", "not available with priorities or pfc yet: the delay line sits "
                                "ahead of PFC's ingress accounting")
        if not tcqdisc.ifb_available():
            raise CapabilityError("links.delay_us: this kernel cannot make ifb devices, which carry the delay line")
        first = ctx.plan[0]
        rtt = configured_rtt_s(ctx.fabric_map, first["src"], first["dst"], links.delay_us)
        rate = ctx.sc.topology.host_rate_mbps
        ctx.env["links"].update(mechanism=MECHANISM, pair=[first["src"], first["dst"]],
                                path_links=path_links(ctx.fabric_map, first["src"], first["dst"]),
                                configured_rtt_s=rtt,
                                bdp_packets_configured=rate * 1e6 * rtt / 8 / FRAME_BYTES)
        return 0

    def restore(self) -> None:
        """Nothing to restore: the record is environment.json's ``links``."""

    def headline(self) -> str | None:
        """``delay 100 us per link`` when links are delayed."""
        d = self.ctx.sc.links
        return f"delay {d.delay_us} us per link" + (f" +- {d.jitter_us}" if d.jitter_us else "") if d.delay_us else None

    def enter(self, stack: contextlib.ExitStack, state) -> None:
        """Remember the run's state (the root namespace's ifb devices are claimed there before they
        exist) and remove them when the run ends, whatever the exit."""
        self.state = state
        stack.callback(lambda: hostknobs.delete_root_links(self.root_ifbs))

    def port_intent(self, rnd) -> dict | None:
        """Every interface's delay line hangs on its tc clsact hook."""
        return {"*": {"clsact": True}} if self.ctx.sc.links.delay_us else None

    def after_fabric(self, lf) -> None:
        """A delay line on every interface of every link (switch ports in the root namespace, host
        NICs in their hosts')."""
        links = self.ctx.sc.links
        if not links.delay_us:
            return
        n = 0
        for link in self.ctx.fabric.links:
            for node, intf in ((link.a, link.a_intf), (link.b, link.b_intf)):
                n += 1
                ifb = f"fldelay{n}"
                pid = lf.net.get(node).pid if self.ctx.fabric.node(node).is_host else None
                if pid is None:
                    self.state.claim([], [ifb])
                    self.root_ifbs.append(ifb)
                limit = tcqdisc.delay_line_limit_packets(link.rate_mbps, links.delay_us, links.jitter_us)
                try:
                    tcqdisc.install_delay_line(intf, ifb, links.delay_us, links.jitter_us, limit, pid)
                except SetupError as e:
                    raise SetupError(f"links.delay_us on {intf}: {e}") from None
        self.ctx.env["links"]["delay_lines"] = n
