"""The Datapath protocol: what a switch implementation gives the live fabric and the run loop.

The live fabric (:class:`experiments.fabric.LiveFabric`) builds Mininet with
:meth:`Datapath.switch_class`, waits until :meth:`Datapath.unconnected` is empty, and tears down
with :meth:`Datapath.shutdown`; the run state (:mod:`experiments.state`) asks every registered
datapath for leftovers by name (:meth:`Datapath.present` and :meth:`Datapath.remove`, class
methods: a clean-up after a crash has no fabric); the CPU
accounting reads :meth:`Datapath.forwarders`; traced paths use :meth:`Datapath.trace_hop`.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ClassVar, Protocol, runtime_checkable

#: The label of a userspace datapath's one forwarding thread among :meth:`Datapath.forwarders`
#: (the CPU account reports it apart). Open vSwitch forwards every port that no PMD thread polls
#: (all of fabriclab's veth ports) in ovs-vswitchd's main thread (its thread id is the process id).
#: On a k=4 Fat-Tree or a Spine-Leaf carrying more than it can forward, that thread reads
#: 0.96-1.01 of a core per second while the rest of the process (handlers, revalidators) stays near 0.
FORWARDING_THREAD = "forwarding_thread"


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
