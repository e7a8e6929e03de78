"""The fault-injector protocol (pure: no netlink, no tc, no os-ken): a fault is what a scenario or
a user asks for (:class:`FaultSpec`: a registered kind, a place, its own keys, start and stop
times), and an injector turns it into data-plane actions on named interfaces (:class:`FrameDrop`,
:class:`RateLimit`, :class:`LinkFlap`) that the controller's fault manager
(controller.faultports) applies and takes back. A new injector is one module with a subclass of
:class:`Injector` plus its entry in :data:`controller.faults.FAULTS`.

Places are written the way an operator names them:

- a link direction ``"p0a1->c1"`` (frames from p0a1 to c1), or both directions ``"p0a1<->c1"``;
  with parallel links, the sender's port: ``"l1:3->s1"``;
- a switch ``"p0a1"`` (with ``ports``: OpenFlow port numbers; default every port);
- a host ``"h3"``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from common.errors import ScenarioError
from common.params import F

#: A node name in a place (switches and hosts of every registered topology).
NODE = r"[A-Za-z][A-Za-z0-9]{0,14}"
#: A link place: ``a->b``, ``a<->b``, ``a:PORT->b``.
LINK_RE = re.compile(rf"^(?P<a>{NODE})(?::(?P<port>[0-9]{{1,4}}))?(?P<arrow>->|<->)(?P<b>{NODE})$")
#: The pattern a link place must match (the scenario schema's).
LINK_PATTERN = rf"{NODE}(?::[0-9]{{1,4}})?(?:->|<->){NODE}"


@dataclass(frozen=True)
class Direction:
    """One direction of a link: frames leave ``tx_node``'s ``tx_intf`` and arrive on ``rx_node``'s
    ``rx_intf``. ``rate_mbps``: the link's nominal rate."""
    tx_node: str
    tx_intf: str
    rx_node: str
    rx_intf: str
    rate_mbps: float

    @property
    def name(self) -> str:
        """``tx->rx`` (the place as written)."""
        return f"{self.tx_node}->{self.rx_node}"


@dataclass(frozen=True)
class FrameDrop:
    """Drop ``fraction`` of the frames arriving on ``intf`` (of ``node``; a host's interface lives
    in its namespace), at random, after they crossed the link. ``counter``: ``rx_errors`` (the
    port counts them as receive errors: CRC errors) or ``none`` (no port counter shows them)."""
    node: str
    intf: str
    fraction: float
    counter: str


@dataclass(frozen=True)
class RateLimit:
    """Shape ``intf``'s transmitter (of ``node``) at ``rate_mbps`` instead of ``nominal_mbps``.
    ``link_peer``: the interface at the link's other end when the link itself runs slower (it
    trained down: both ports report the lower speed); None when only the sender is slow."""
    node: str
    intf: str
    rate_mbps: float
    nominal_mbps: float
    link_peer: str | None = None


@dataclass(frozen=True)
class LinkFlap:
    """Take the link of ``intf`` (of ``node``) down for ``down_s``, up for ``up_s``, and so on,
    ``flaps`` times (None: until the fault stops); the peer ``peer_intf`` loses its carrier."""
    node: str
    intf: str
    peer_intf: str
    down_s: float
    up_s: float
    flaps: int | None


Action = FrameDrop | RateLimit | LinkFlap


@dataclass(frozen=True)
class FaultSpec:
    """One fault as asked for, checked against the fabric (:func:`controller.faults.parse_fault`).

    Attributes:
        kind: the registered injector's name.
        target: the key that names the place (the injector's ``TARGET``: link, switch, host).
        place: where, as written (a link direction, a switch, a host).
        params: the injector's own keys (``{key: value}``, every key present).
        start_s: seconds after the round's start (or the request) when it begins.
        stop_s: seconds after the same origin when it ends; None: at the round's end (or when
            removed).
        ports: a switch fault's OpenFlow ports, None: every port.
    """
    kind: str
    target: str
    place: str
    params: dict = field(default_factory=dict)
    start_s: float = 0.0
    stop_s: float | None = None
    ports: tuple[int, ...] | None = None

    def __post_init__(self):
        if not self.start_s >= 0:
            raise ValueError(f"start_s must be >= 0, got {self.start_s}")
        if self.stop_s is not None and not self.stop_s > self.start_s:
            raise ValueError(f"stop_s must be after start_s {self.start_s}, got {self.stop_s}")

    def to_data(self) -> dict:
        """The fault in scenario syntax (what faults.csv and the REST API show)."""
        out: dict[str, Any] = {"kind": self.kind, self.target: self.place, **self.params,
                               "start_s": self.start_s, "stop_s": self.stop_s}
        if self.ports is not None:
            out["ports"] = list(self.ports)
        return out


@dataclass(frozen=True)
class Evidence:
    """What the troubleshooter knows of one suspect, for each kind to recognise its fault
    (:meth:`Injector.recognise`). Port rows are controller.portstats rows over the diagnosis
    (counters as differences: ``rx_errors``, ``tx_dropped``, ``carrier_changes``; ``rate_mbps``,
    ``nominal_mbps`` and ``state`` as read at the end).

    Attributes:
        element: ``switch`` (``a`` is the switch), ``link`` (one direction ``a`` -> ``b``),
            ``cable`` (both directions of ``a`` -- ``b``), or ``host`` (``a`` is a host whose
            every probe was slow and lost nothing).
        a, b: the element's nodes (``b`` None for a switch or a host).
        rx: ``b``'s port toward ``a`` (None when ``b`` is no switch); for a host, the switch's
            port toward it.
        tx: ``a``'s port toward ``b`` (None when ``a`` is no switch).
        ends: the port rows at the element's two ends (``tx`` and ``rx``, those that exist): a
            cable's two directions leave from them.
        b_is_switch: whether ``b`` is a switch.
    """
    element: str
    a: str
    b: str | None = None
    rx: dict | None = None
    tx: dict | None = None
    ends: tuple[dict, ...] = ()
    b_is_switch: bool = False


def below_rate(row: dict | None) -> bool:
    """Whether a port row runs below its nominal rate (a link trained down, a rate cap)."""
    return row is not None and row.get("rate_mbps") is not None and row["rate_mbps"] < row["nominal_mbps"] * 0.999


class Injector:
    """Base class of a fault injector (a pure strategy).

    Class attributes:
        NAME: the scenario's ``kind``.
        TITLE: a few words for tables and plots.
        TARGET: ``link``, ``switch`` or ``host``: the key that names the place.
        LAYER: what a correct diagnosis calls it (``physical``: the link's own counters or rate
            show it; ``switch``: frames vanish inside a switch; ``host``: only the host's own
            links are slow).
        PARAMS: ``{key: common.params.F}``, its own keys.
    """
    NAME: ClassVar[str] = "fault"
    TITLE: ClassVar[str] = ""
    TARGET: ClassVar[str] = "link"
    LAYER: ClassVar[str] = "physical"
    PARAMS: ClassVar[dict[str, F]] = {}
    #: How the emulation makes it (recorded in environment.json for every kind a run injects).
    MECHANISM: ClassVar[str] = ""
    #: What the troubleshooter's probes see through it: ``loss`` (frames lost), ``slow`` (a sender
    #: below its rate, nothing lost).
    SYMPTOMS: ClassVar[tuple[str, ...]] = ("loss",)
    #: Where the troubleshooter asks it first when several kinds could explain one suspect (lower
    #: first: the kinds whose counters are the more specific evidence).
    DIAGNOSIS_ORDER: ClassVar[int] = 50

    @classmethod
    def recognise(cls, ev: "Evidence") -> tuple[str, tuple[str, ...]] | None:
        """Whether the counters of the suspect ``ev`` show this fault: ``(culprit, why)``, the place
        as this kind names it and one sentence per finding; None when they do not. Default: never
        (a kind the troubleshooter cannot tell apart)."""
        return None

    @classmethod
    def actions(cls, fabric_map: dict, spec: FaultSpec) -> tuple[Action, ...]:
        """The data-plane actions of ``spec`` on ``fabric_map`` (the controller's fabric map).

        Raises:
            ScenarioError: the place is not in the fabric (naming the key).
        """
        raise NotImplementedError

    @classmethod
    def describe(cls, spec: FaultSpec) -> str:
        """A few words: what and where (``corrupt 1% of frames on p0a1->c1``)."""
        return f"{spec.kind} {spec.place}"


def link_directions(fabric_map: dict, place: str, key: str = "link") -> tuple[Direction, ...]:
    """The directions a link place names on ``fabric_map``: one for ``a->b``, two for ``a<->b``.

    Raises:
        ScenarioError: malformed, an unknown node, no link between the two, or parallel links
            without the sender's port (naming ``key``).
    """
    m = LINK_RE.match(place) if isinstance(place, str) else None
    if m is None:
        raise ScenarioError(key, f"expected a link as 'a->b' (one direction) or 'a<->b' (both), got {place!r}")
    a, b, port = m["a"], m["b"], m["port"]
    names = {s["name"] for s in fabric_map["switches"]} | {h["name"] for h in fabric_map["hosts"]}
    for n in (a, b):
        if n not in names:
            raise ScenarioError(key, f"no node {n!r} in this fabric")
    found = []
    for link in fabric_map["links"]:
        for tx, txp, txi, rx, rxi in ((link["a"], link["a_port"], link["a_intf"], link["b"], link["b_intf"]),
                                      (link["b"], link["b_port"], link["b_intf"], link["a"], link["a_intf"])):
            if tx == a and rx == b and (port is None or int(port) == txp):
                found.append((Direction(tx, txi, rx, rxi, float(link["rate_mbps"])),
                              Direction(rx, rxi, tx, txi, float(link["rate_mbps"]))))
    if not found:
        raise ScenarioError(key, f"no link {a}{':' + port if port else ''}-{b} in this fabric")
    if len(found) > 1:
        raise ScenarioError(key, f"{len(found)} parallel links join {a} and {b}: name the port, e.g. '{a}:N->{b}'")
    fwd, back = found[0]
    return (fwd, back) if m["arrow"] == "<->" else (fwd,)


def switch_ports(fabric_map: dict, switch: str, ports: tuple[int, ...] | None, key: str = "switch") -> list[dict]:
    """The fabric map's port records of ``switch`` (``{"port", "intf", "peer", ...}``), those in
    ``ports`` or every port.

    Raises:
        ScenarioError: no such switch, or a port it does not have (naming ``key`` or its ``ports``).
    """
    sw = next((s for s in fabric_map["switches"] if s["name"] == switch), None)
    if sw is None:
        raise ScenarioError(key, f"no switch {switch!r} in this fabric")
    if ports is None:
        return list(sw["ports"])
    have = {p["port"]: p for p in sw["ports"]}
    missing = [p for p in ports if p not in have]
    if missing:
        raise ScenarioError(key.rsplit(".", 1)[0] + ".ports" if "." in key else "ports",
                            f"{switch} has no port {missing[0]} (ports {', '.join(map(str, sorted(have)))})")
    return [have[p] for p in ports]


def host_record(fabric_map: dict, host: str, key: str = "host") -> dict:
    """The fabric map's record of ``host``. Raises ScenarioError (naming ``key``) when absent."""
    rec = next((h for h in fabric_map["hosts"] if h["name"] == host), None)
    if rec is None:
        raise ScenarioError(key, f"no host {host!r} in this fabric")
    return rec
