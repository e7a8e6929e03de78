"""The queues a port should have, as a pure plan, and what to do when the kernel shows others.

fabriclab gives every switch port and host NIC an HTB root at the link rate over one FIFO
(:mod:`controller.portsetup`); a round with kernel RED marking has RED in the FIFO's place, and a
BPF hook (the ECN marker, a delay line) adds a clsact qdisc. :class:`PortIntent` says which of
these one port should have this round, :func:`expected_nodes` turns it into the nodes a dump of
the port shows (:func:`qdisc_node`, :func:`class_node`: the one text form both sides use), and
:func:`compare` / :func:`restore_plan` say what differs and what would put it back. Intended, not
found: a tree left replaced by a previous round is not taken as the next round's baseline.

Pure: no netlink, no processes; :mod:`controller.dataplane` reads the trees and applies the plans.
"""
from __future__ import annotations

from dataclasses import dataclass

#: The hooks' qdisc (tc's clsact and the older ingress qdisc both sit at ``ffff:`` under ``ffff:fff1``).
HOOK_KINDS = ("clsact", "ingress")
FIFO_KINDS = ("pfifo", "bfifo")


def qdisc_node(kind: str, handle: str, parent: str, limit: int | None = None) -> str:
    """One qdisc as a node of a port's tree: ``"pfifo 10: parent 1:1 limit 50"`` (``limit``: a
    FIFO's, in its unit: packets for pfifo, bytes for bfifo; other kinds have none here)."""
    return f"{kind} {handle} parent {parent}" + (f" limit {limit}" if limit is not None else "")


def class_node(kind: str, classid: str, parent: str, rate_bps: int, ceil_bps: int) -> str:
    """One shaping class as a node: ``"class htb 1:1 parent root rate 10000000 ceil 10000000"``
    (bit/s, to the byte per second the kernel keeps; ``parent`` as the kernel reports it: a class
    directly under its qdisc shows ``root``)."""
    return f"class {kind} {classid} parent {parent} rate {int(rate_bps) // 8 * 8} ceil {int(ceil_bps) // 8 * 8}"


@dataclass(frozen=True)
class PortIntent:
    """What one interface's queues should be for a round.

    Attributes:
        rate_bps: the HTB class ``1:1``'s rate and ceiling in bit/s (the link rate).
        fifo_kind: ``pfifo`` or ``bfifo``; ``fifo_limit`` its limit (packets or bytes).
        red: True when kernel RED (ECN marking) replaces the FIFO under ``1:1`` this round.
        clsact: True when a BPF hook (tc clsact) belongs on the port.
        unchecked: why this port's tree is not checked (another mechanism owns it, e.g. the
            per-priority queues of PFC), or None.
    """
    rate_bps: int
    fifo_kind: str
    fifo_limit: int
    red: bool = False
    clsact: bool = False
    unchecked: str | None = None

    def __post_init__(self):
        if self.fifo_kind not in FIFO_KINDS:
            raise ValueError(f"fifo_kind must be one of {FIFO_KINDS}, got {self.fifo_kind!r}")
        if not self.rate_bps > 0 or not self.fifo_limit > 0:
            raise ValueError(f"rate_bps and fifo_limit must be > 0, got {self.rate_bps}, {self.fifo_limit}")


#: The intended root: fabriclab's HTB ``1:`` and its link-rate class ``1:1`` (controller.dataplane).
ROOT_NODE = qdisc_node("htb", "1:", "root")
HOOK_NODE = qdisc_node("clsact", "ffff:", "ffff:fff1")


def expected_nodes(p: PortIntent) -> tuple[str, ...]:
    """The sorted nodes a dump of a port with intent ``p`` shows (as :func:`qdisc_node` /
    :func:`class_node` write them); empty for an unchecked port."""
    if p.unchecked:
        return ()
    nodes = [ROOT_NODE, class_node("htb", "1:1", "root", p.rate_bps, p.rate_bps),
             qdisc_node("red", "20:", "1:1") if p.red else qdisc_node(p.fifo_kind, "10:", "1:1", p.fifo_limit)]
    if p.clsact:
        nodes.append(HOOK_NODE)
    return tuple(sorted(nodes))


def compare(expected: tuple[str, ...], found: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(missing, extra)``: the expected nodes not found and the found nodes not expected, sorted."""
    e, f = set(expected), set(found)
    return tuple(sorted(e - f)), tuple(sorted(f - e))


def _is_hook(node: str) -> bool:
    return node.split(" ", 1)[0] in HOOK_KINDS


@dataclass(frozen=True)
class RestorePlan:
    """What puts one port back: ``reinstall`` (delete the root qdisc, then the HTB, its class and
    the FIFO, and RED over it when intended), ``delete_hooks`` (remove a clsact/ingress qdisc that
    does not belong; its filters go with it), or ``impossible``: why it cannot be put back from
    here (None: it can). ``missing`` and ``extra`` are what the comparison found."""
    missing: tuple[str, ...]
    extra: tuple[str, ...]
    reinstall: bool = False
    delete_hooks: bool = False
    impossible: str | None = None

    @property
    def needed(self) -> bool:
        """Whether anything differs."""
        return bool(self.missing or self.extra)


def restore_plan(p: PortIntent, found: tuple[str, ...]) -> RestorePlan:
    """What to do to a port with intent ``p`` whose dump shows ``found``.

    A missing BPF hook cannot be put back from outside its owner (the program lives in the
    controller; re-attaching a different one would not be the run's): ``impossible``. A hook that
    does not belong is deleted; any difference in the root, its class or the leaf reinstalls the
    root tree (a root replaced in place would keep a stranger's classes)."""
    missing, extra = compare(expected_nodes(p), found)
    if p.unchecked or not (missing or extra):
        return RestorePlan((), ())
    if any(_is_hook(n) for n in missing):
        return RestorePlan(missing, extra, impossible="its BPF hook (tc clsact) was removed, with the program "
                                                      "fabriclab attached to it; only the run that loaded it can attach it")
    tree = [n for n in missing + extra if not _is_hook(n)]
    return RestorePlan(missing, extra, reinstall=bool(tree), delete_hooks=any(_is_hook(n) for n in extra))


def describe(port: str, plan: RestorePlan) -> str:
    """One line: what differed on ``port`` (``found ... instead of ...``)."""
    parts = []
    if plan.extra:
        parts.append(f"found {'; '.join(plan.extra)}")
    if plan.missing:
        parts.append(f"{'instead of' if plan.extra else 'missing'} {'; '.join(plan.missing)}")
    return f"{port}: {' '.join(parts)}"
