"""The Datapath protocol: what a switch implementation gives the live fabric and the run loop.

The live fabric (:class:`experiments.fabric.LiveFabric`) builds Mininet with
:meth:`Datapath.switch_class`, waits until :meth:`Datapath.unconnected` is empty, and tears down
with :meth:`Datapath.shutdown`; the run state (:mod:`experiments.state`) asks every registered
datapath for leftovers by name (:meth:`Datapath.present` and :meth:`Datapath.remove`, class
methods: a clean-up after a crash has no fabric); the CPU
accounting reads :meth:`Datapath.forwarders`; traced paths use :meth:`Datapath.trace_hop`.

Two capabilities are optional: a datapath that has no such thing answers None, and the feature
that needs it records itself not applicable instead of failing. :meth:`Datapath.transmit_losses`
counts the frames the datapath loses on their way into a port's qdisc (Open vSwitch's userspace
datapath; experiments.features.ovstx corrects each round's drops with it);
:meth:`Datapath.switch_state` reads back and puts back the switches' own state before each round
(experiments.features.restore).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:
    from controller.flowtables import FlowEntry

#: The label of a userspace datapath's one forwarding thread among :meth:`Datapath.forwarders`
#: (the CPU account reports it apart). Open vSwitch forwards every port that no PMD thread polls
#: (all of fabriclab's veth ports) in ovs-vswitchd's main thread (its thread id is the process id).
#: On a k=4 Fat-Tree or a Spine-Leaf carrying more than it can forward, that thread reads
#: 0.96-1.01 of a core per second while the rest of the process (handlers, revalidators) stays near 0.
FORWARDING_THREAD = "forwarding_thread"


@dataclass(frozen=True)
class TransmitLossCount:
    """A datapath's count of the frames it loses between forwarding them and a port's qdisc taking
    them, which no qdisc counts (:meth:`Datapath.transmit_losses`).

    Attributes:
        load: () -> a context that loads the count for a run and unloads it at exit; its value's
            ``read()`` returns ``{interface index: {counter: n}}`` since loading, with at least
            ``discarded`` (frames freed unsent), ``retried`` (refused frames sent again, which the
            qdisc counted twice) and ``other_errors``; entering it raises SetupError when this
            machine refuses the count. None when this mode loses nothing outside a qdisc.
        reason: why there is nothing to count (``load`` None), recorded as the count's ``reason``.
    """

    load: Callable[[], contextlib.AbstractContextManager[Any]] | None = None
    reason: str | None = None


class SwitchState(Protocol):
    """The switches' own state that the check before each round compares with the plan and puts
    back (:meth:`Datapath.switch_state`; experiments.features.restore): settings of the datapath's
    own on a switch port that replace or police its qdiscs (fabriclab sets none), and every
    switch's flow tables. The intended tables come as the routing strategy gives them
    (``flows``: ``[FlowEntry, ...]``, :meth:`controller.routing.RoutingStrategy.switch_flows`,
    :mod:`controller.flowtables` types, in installation order), and the datapath renders them in
    its own form (Open vSwitch: ovs-ofctl lines, :func:`controller.flowtables.ofctl_line`, the
    form ``routes_via`` ``openflow13`` installs). The check asks for one SwitchState per run and
    passes the same entries every round, so an implementation may keep what it renders from them.
    Every method but :meth:`flow_fingerprint` raises SetupError with the tool's reason.

    Attributes:
        port_settings: what :meth:`port_overrides` looks for, in words, as the round's
            ``fidelity.data_plane.checked`` names it (Open vSwitch: ``Open vSwitch QoS and ingress
            policing on the switch ports``).
    """

    port_settings: str

    def port_overrides(self, ports: list[str]) -> dict[str, str]:
        """The ``ports`` (switch ports) that carry such a setting, each with what it is, in words
        (``{port: "an Open vSwitch QoS (uuid, 1 queue(s))"}``); ``{}`` when none does."""

    def clear_port_overrides(self, ports: list[str]) -> None:
        """Take those settings off ``ports`` (the qdiscs the datapath installed for them go too)."""

    def flow_fingerprint(self, switch: str) -> bytes | None:
        """A cheap fingerprint of ``switch``'s flow tables (equal: the same entries), or None when it
        cannot be had (the tables are then compared entry by entry)."""

    def flow_differences(self, switch: str, flows: list[FlowEntry]) -> list[str]:
        """How ``switch``'s flow tables differ from ``flows`` (its intended entries), a line per
        difference in the datapath's own words; ``[]`` when the same."""

    def replace_flows(self, switch: str, flows: list[FlowEntry]) -> None:
        """Make ``switch``'s flow tables exactly ``flows`` (its intended entries)."""


@runtime_checkable
class Datapath(Protocol):
    """One way of forwarding a fabric's frames between its switch ports.

    Attributes:
        name: the registry key (:data:`controller.datapaths.registry.DATAPATHS`), recorded in every
            result's environment.json as ``datapath_impl``.
        mode: the implementation's variant, recorded as ``datapath`` (Open vSwitch: ``kernel``, its
            kernel module, or ``user``, its userspace datapath ``netdev``).
        routes_via: how the controller's routes and ECMP groups reach the switches
            (``openflow13``: the os-ken app, :mod:`controller.app`, installs them over OpenFlow 1.3).
    """

    name: ClassVar[str]
    mode: str
    routes_via: ClassVar[str]

    def record(self) -> dict[str, Any]:
        """What environment.json records about this datapath (JSON-able)."""

    def switch_class(self) -> Callable[..., Any]:
        """A Mininet switch factory (``switch=`` of ``Mininet``): called with a switch's name and
        Mininet's parameters, it creates the switch; Mininet's links attach its ports."""

    def unconnected(self, switches: list) -> list[str]:
        """Names of the started ``switches`` (Mininet switch objects) not yet taking routes from
        the controller (``[]`` when all are)."""

    def shutdown(self, switches: list) -> None:
        """Stop every one of a fabric's ``switches`` at once (the ports' links are removed
        separately, by the fabric)."""

    @classmethod
    def available(cls) -> str | None:
        """The mode this datapath would run in on this machine, or None when it cannot run here."""

    @classmethod
    def present(cls) -> set[str]:
        """Names of this datapath's switches on the machine now (whoever made them)."""

    @classmethod
    def remove(cls, names: list[str]) -> None:
        """Remove the named switches that exist (a crash's leftovers, by recorded name).

        Raises:
            SetupError: the tool refused (its own message).
        """

    def forwarders(self) -> dict[str, int | tuple[int, int]]:
        """The processes (``pid``) or threads (``(pid, tid)``; a tid equal to the pid stands for the
        process's main thread) that forward frames in user space, by label, for the CPU account;
        ``{}`` when the kernel forwards. Raises SetupError when a forwarding process is missing."""

    def trace_hop(self, switch: str, flow: str) -> tuple[int | None, dict[str, str]]:
        """The port ``switch`` sends a packet of ``flow`` out of, with the ECMP hash evaluated as for a
        real packet (``flow``: ``in_port=..,udp,nw_src=..,nw_dst=..,udp_src=..,udp_dst=..``; None
        when it would be dropped), and the header fields it rewrote as ovs-fields (``{"dl_src":
        mac}``: a routing strategy's tag; ``{}`` when none), which the next switch's flow carries.

        Raises:
            SetupError: no such switch, or the tool refused the flow.
        """

    def hold_for_run(self, buffer_bytes: int, state) -> contextlib.AbstractContextManager[dict]:
        """What the datapath itself needs while a run's queues may all fill at once (``buffer_bytes``:
        the packet memory all switch queues together can hold), undone at exit; recorded machine-wide
        changes go through ``state`` (:class:`experiments.state.RunState`). Yields the entries for
        environment.json (``{key: record}``; ``{}`` when there is nothing to hold)."""

    def transmit_losses(self) -> TransmitLossCount | None:
        """Optional: the count of frames this datapath loses where no qdisc counts them
        (:class:`TransmitLossCount`), or None when it offers no such count."""

    def switch_state(self) -> SwitchState | None:
        """Optional: its switches' own state, read back and put back before each round
        (:class:`SwitchState`), or None when it offers none (the check then covers the qdiscs only)."""
