"""Open vSwitch (kernel or userspace datapath) behind the Datapath seam.

Switches are Mininet's ``OVSSwitch`` on OpenFlow 1.3 in fail mode ``secure`` (no forwarding
until the controller's routes are in), all bridges and ports made in one ``ovs-vsctl``
transaction (``batch=True``); the os-ken app installs routes and ECMP groups (the ``multipath``
action: :mod:`controller.app`). On the userspace datapath one ovs-vswitchd thread forwards every
frame (its CPU is accounted as the forwarding thread) and ovs-vswitchd's shared transmit socket
is enlarged for a run so that every queue can fill (:class:`controller.dataplane.ovsctl.OvsTxBuffer`),
and a BPF program counts the frames it frees unsent after a full queue (:mod:`controller.ovstxbpf`;
:meth:`OvsDatapath.transmit_losses`). Before each round, the switch ports' QoS and ingress policing
and the bridges' flow tables are read back and put back (:class:`OvsSwitchState`).
"""
from __future__ import annotations

import contextlib
import shutil
import sys
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from common.datapath import chosen_datapath
from common.errors import SetupError
from common.lazy import lazy_module
from controller.datapaths.base import FORWARDING_THREAD, TransmitLossCount
from controller.flowtables import FlowEntry, ofctl_line

if TYPE_CHECKING:
    from mininet import node as mininet_node

    from controller import ovstxbpf
    from controller.dataplane import ovsctl
else:    # loaded when a switch is made or asked: the registry imports without Mininet or netlink
    mininet_node = lazy_module("mininet.node")
    ovsctl = lazy_module("controller.dataplane.ovsctl")
    ovstxbpf = lazy_module("controller.ovstxbpf")

#: Modes: Open vSwitch's datapath (Mininet's ``datapath=`` and OVS's ``datapath_type``).
MODES = {"kernel": "system", "user": "netdev"}

#: Why the kernel datapath has no transmit losses to count (:meth:`OvsDatapath.transmit_losses`).
KERNEL_LOSES_NOTHING = "the kernel datapath sends each frame into its qdisc: nothing is lost outside one"


class OvsSwitchState:
    """The switch ports' QoS and ingress policing and the bridges' flow tables
    (:class:`controller.datapaths.base.SwitchState`), through :mod:`controller.dataplane.ovsctl`;
    the intended entries are compared and installed as ovs-ofctl lines
    (:func:`controller.flowtables.ofctl_line`), rendered once per switch and kept while its
    entries stay the same."""

    port_settings = "Open vSwitch QoS and ingress policing on the switch ports"

    def __init__(self) -> None:
        #: switch -> (the entries last rendered, their ovs-ofctl lines)
        self._lines: dict[str, tuple[tuple[FlowEntry, ...], list[str]]] = {}

    def ofctl_lines(self, switch: str, flows: list[FlowEntry]) -> list[str]:
        """``[ovs-ofctl line, ...]``: ``switch``'s intended ``flows`` as ovs-ofctl lines, one per
        entry in their order (kept from the last call for this switch when its entries are equal).

        Raises:
            KeyError, TypeError: an entry :func:`controller.flowtables.ofctl_line` has no line for.
        """
        key = tuple(flows)
        kept = self._lines.get(switch)
        if kept is None or kept[0] != key:
            kept = self._lines[switch] = (key, [ofctl_line(e) for e in key])
        return kept[1]

    def port_overrides(self, ports: list[str]) -> dict[str, str]:
        """Ports with an Open vSwitch QoS or ingress policing (``ovs_port_qos``, one ovs-vsctl call),
        each as ``an Open vSwitch QoS (uuid, n queue(s))`` and/or ``ingress policing at r kbit/s,
        burst b kbit``."""
        out = {}
        for p, r in ovsctl.ovs_port_qos(ports).items():
            what = []
            if r["qos"]:
                what.append(f"an Open vSwitch QoS ({r['qos']}, {len(r['queues'])} queue(s))")
            if r["ingress_policing_rate"] or r["ingress_policing_burst"]:
                what.append(f"ingress policing at {r['ingress_policing_rate']} kbit/s, burst "
                            f"{r['ingress_policing_burst']} kbit")
            if what:
                out[p] = " and ".join(what)
        return out

    def clear_port_overrides(self, ports: list[str]) -> None:
        """QoS and ingress policing off the ports in one transaction (``ovs_clear_qos``; Open vSwitch
        takes the qdiscs it installed away with the QoS)."""
        ovsctl.ovs_clear_qos(ports)

    def flow_fingerprint(self, switch: str) -> bytes | None:
        """``ovs_flow_fingerprint`` (about a millisecond, on the bridge's management socket), None when
        it cannot be had."""
        try:
            return ovsctl.ovs_flow_fingerprint(switch)
        except SetupError:
            return None

    def flow_differences(self, switch: str, flows: list[FlowEntry]) -> list[str]:
        """``ovs-ofctl diff-flows`` lines (``ovs_flow_differences``) against ``flows``' lines
        (:meth:`ofctl_lines`)."""
        return ovsctl.ovs_flow_differences(switch, self.ofctl_lines(switch, flows))

    def replace_flows(self, switch: str, flows: list[FlowEntry]) -> None:
        """``ovs-ofctl replace-flows`` (``ovs_replace_flows``) with ``flows``' lines (:meth:`ofctl_lines`)."""
        ovsctl.ovs_replace_flows(switch, self.ofctl_lines(switch, flows))


@dataclass(frozen=True)
class OvsDatapath:
    """Open vSwitch in ``mode`` ``kernel`` or ``user`` (see :class:`controller.datapaths.base.Datapath`).

    Raises:
        SetupError: an unknown mode.
    """

    name: ClassVar[str] = "ovs"
    routes_via: ClassVar[str] = "openflow13"
    mode: str

    def __post_init__(self):
        if self.mode not in MODES:
            raise SetupError(f"datapath {self.mode!r}: Open vSwitch's are {', '.join(MODES)}")

    @classmethod
    def available(cls) -> str | None:
        """``kernel`` where the openvswitch module loads, else ``user``; None without ``ovs-vsctl``."""
        if shutil.which("ovs-vsctl") is None:
            return None
        return chosen_datapath()

    def record(self) -> dict[str, Any]:
        """``{"impl": "ovs", "mode", "datapath_type", "routes_via"}``."""
        return {"impl": self.name, "mode": self.mode, "datapath_type": MODES[self.mode], "routes_via": self.routes_via}

    def switch_class(self) -> Callable[..., Any]:
        """Mininet's ``OVSSwitch`` on this mode, OpenFlow 1.3, fail mode ``secure``, batched."""
        return partial(mininet_node.OVSSwitch, datapath=self.mode, protocols="OpenFlow13", failMode="secure", batch=True)

    def unconnected(self, switches: list) -> list[str]:
        """Switches whose bridge does not report its controller connected (``ovs-vsctl get controller``)."""
        out = []
        for sw in switches:
            st = sw.cmd("ovs-vsctl --timeout=2 get controller", sw.name, "is_connected").strip()
            if "true" not in st:
                out.append(sw.name)
        return out

    def shutdown(self, switches: list) -> None:
        """Every bridge deleted in one ``ovs-vsctl`` transaction (Mininet's batch shutdown, which also
        ends the switches' shells)."""
        if switches:
            type(switches[0]).batchShutdown(tuple(switches))

    @classmethod
    def present(cls) -> set[str]:
        """Every Open vSwitch bridge on the machine (empty when ovsdb is not reachable)."""
        return set(ovsctl.ovs_bridges())

    @classmethod
    def remove(cls, names: list[str]) -> None:
        """Delete the named bridges in one transaction (:func:`controller.dataplane.ovsctl.ovs_del_bridges`)."""
        ovsctl.ovs_del_bridges(list(names))

    def forwarders(self) -> dict[str, int | tuple[int, int]]:
        """``{"ovs-vswitchd": pid}``, and on the userspace datapath also ``{FORWARDING_THREAD: (pid, pid)}``:
        its main thread forwards every frame there (:data:`controller.datapaths.base.FORWARDING_THREAD`)."""
        pid = ovsctl.ovs_vswitchd_pid()
        out: dict[str, int | tuple[int, int]] = {"ovs-vswitchd": pid}
        if self.mode == "user":
            out[FORWARDING_THREAD] = (pid, pid)
        return out

    def trace_hop(self, switch: str, flow: str) -> tuple[int | None, dict[str, str]]:
        """``ovs-appctl ofproto/trace`` (:func:`controller.dataplane.ovsctl.ovs_trace_hop`)."""
        return ovsctl.ovs_trace_hop(switch, flow)

    @contextlib.contextmanager
    def hold_for_run(self, buffer_bytes: int, state):
        """On the userspace datapath, ovs-vswitchd's shared transmit socket enlarged to ``buffer_bytes``
        for the run (:class:`controller.dataplane.ovsctl.OvsTxBuffer`, undone at exit and by a clean-up
        after a crash); yields ``{"ovs_userspace_tx_buffer": its record}``, with a warning on stderr
        when it could not be enlarged. The kernel datapath hands each frame straight to its port's
        qdisc: nothing to hold, yields ``{}``."""
        if self.mode != "user":
            yield {}
            return
        with ovsctl.OvsTxBuffer(buffer_bytes, state) as txbuf:
            if not txbuf.applied and txbuf.reason != "already large enough":
                print(f"fabriclab: WARNING: could not enlarge Open vSwitch's transmit buffer "
                      f"({txbuf.reason}); all queues of the fabric together are capped near "
                      f"{txbuf.before_bytes} bytes of packet memory, and excess packets are dropped "
                      "inside OVS, not in the qdiscs", file=sys.stderr)
            yield {"ovs_userspace_tx_buffer": txbuf.record()}

    def transmit_losses(self) -> TransmitLossCount:
        """On the userspace datapath, the BPF count of the frames ovs-vswitchd frees unsent or sends
        again after a full queue refused one of a batch (:class:`controller.ovstxbpf.OvsTxCounts`
        on ovs-vswitchd's sendmmsg calls); the kernel datapath sends each frame into its qdisc, so
        nothing is counted (:data:`KERNEL_LOSES_NOTHING`)."""
        if self.mode != "user":
            return TransmitLossCount(reason=KERNEL_LOSES_NOTHING)
        return TransmitLossCount(load=lambda: ovstxbpf.OvsTxCounts.load(ovsctl.ovs_vswitchd_pid()))

    def switch_state(self) -> OvsSwitchState:
        """The ports' QoS and ingress policing and the bridges' flow tables (:class:`OvsSwitchState`)."""
        return OvsSwitchState()
