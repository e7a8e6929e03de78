"""The typed messages between the runner and the controller's REST API (controller.rest): each
parsed once from its JSON body, with the key named when it is wrong. Pure: no I/O.

- :class:`EcnChange` ``{"ports": {intf: profile spec}}``: new ECN profiles (common.ecn specs).
- :class:`PfcStart` ``{"host_pids": {host: pid}, "plan": {...}}``: install the :class:`PfcPlan` and
  start the pauser.
- :class:`PfcChange` ``{"enabled": bool}`` or ``{"xoff_bytes", "xon_bytes", "cap_bytes"}``:
  PFC on or off, or new thresholds and buffer.
- :class:`HostsRegister` ``{"host_pids": {host: pid}}``: the hosts' namespaces (faults on hosts'
  interfaces reach them there).
- :class:`FaultsAdd` ``{"faults": [fault, ...]}``: faults to schedule (controller.faults).
- :class:`EcnPlan` (``POST /fabriclab/ecn/start``): the marker and every switch port's rate,
  buffer, shaper burst, FIFO and first profile.
- :class:`PfcPlan` (inside :class:`PfcStart`): priority queues, thresholds and every port's peer.

The runner builds the plans as these types (experiments.features.ecn.plan,
experiments.features.pfc.plan) and sends them in the start requests; the controller has no
other way in (a plan file written beside the results is a record, not read back).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.errors import ScenarioError
from controller.faults import FaultSpec, parse_fault


class MessageError(ValueError):
    """A request body that is not the message it should be; the text names the key."""


def _mapping(body, what: str, keys: set[str]) -> dict:
    if not isinstance(body, dict):
        raise MessageError(f"{what}: expected a JSON object, got {type(body).__name__}")
    extra = sorted(set(body) - keys)
    if extra:
        raise MessageError(f"{what}: unknown key {extra[0]!r} (known: {', '.join(sorted(keys))})")
    return body


def _int(body: dict, key: str, what: str, minimum: int = 0) -> int:
    v = body.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise MessageError(f"{what}.{key}: expected an integer >= {minimum}, got {v!r}")
    return v


@dataclass(frozen=True)
class EcnChange:
    """New ECN profiles for some switch ports: ``ports`` maps interface name -> profile spec
    (``"off"``, ``{"step": {"k_bytes": ...}}``, ``{"red": {...}}``: common.ecn.profile_spec)."""
    ports: dict

    @classmethod
    def from_json(cls, body) -> "EcnChange":
        """Parse ``{"ports": {intf: spec}}``. Raises MessageError naming the key."""
        body = _mapping(body, "ecn", {"ports"})
        ports = body.get("ports")
        if not isinstance(ports, dict) or not ports:
            raise MessageError(f"ecn.ports: expected a non-empty object of interface -> profile, got {ports!r}")
        for intf, spec in ports.items():
            if not (spec == "off" or (isinstance(spec, dict) and len(spec) == 1 and set(spec) <= {"step", "red", "off"})):
                raise MessageError(f"ecn.ports.{intf}: expected 'off', {{step: ...}} or {{red: ...}}, got {spec!r}")
        return cls(ports=dict(ports))


def _host_pids(body, what: str) -> dict:
    body = _mapping(body, what, {"host_pids"})
    pids = body.get("host_pids")
    if not isinstance(pids, dict):
        raise MessageError(f"{what}.host_pids: expected an object of host -> pid, got {pids!r}")
    for name in pids:
        _int(pids, name, f"{what}.host_pids", minimum=1)
    return dict(pids)


@dataclass(frozen=True)
class HostsRegister:
    """The hosts' namespaces: ``host_pids`` maps host name -> the pid of its namespace's shell."""
    host_pids: dict

    @classmethod
    def from_json(cls, body) -> "HostsRegister":
        """Parse ``{"host_pids": {name: pid}}``. Raises MessageError naming the key."""
        return cls(host_pids=_host_pids(body, "hosts"))


@dataclass(frozen=True)
class FaultsAdd:
    """Faults to schedule, each checked against the fabric (controller.faults.parse_fault);
    ``hidden`` ones are left out of ``GET /fabriclab/faults`` (a lab's hidden fault) until removed."""
    faults: tuple[FaultSpec, ...]
    hidden: bool = False

    @classmethod
    def from_json(cls, body, fabric_map: dict) -> "FaultsAdd":
        """Parse ``{"faults": [{"kind": ..., ...}, ...], "hidden": false}`` or one fault object.
        Raises MessageError naming the key (``faults[1].link``)."""
        if isinstance(body, dict) and "kind" in body:
            body = {"faults": [body]}
        body = _mapping(body, "faults", {"faults", "hidden"})
        hidden = body.get("hidden", False)
        if not isinstance(hidden, bool):
            raise MessageError(f"faults.hidden: expected true or false, got {hidden!r}")
        items = body.get("faults")
        if not isinstance(items, list) or not items:
            raise MessageError(f"faults: expected a non-empty list of faults, got {items!r}")
        try:
            return cls(faults=tuple(parse_fault(fabric_map, d, f"faults[{i}]") for i, d in enumerate(items)),
                       hidden=hidden)
        except ScenarioError as e:
            raise MessageError(f"{e.key}: {e.detail}") from None


class _Plan(BaseModel):
    """A plan message: frozen, unknown keys refused, parsed once from JSON (:meth:`from_json`)."""
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: The key a wrong field is named under (``ecn.ports.s1-eth1.rate_bps``).
    WHAT: ClassVar[str] = "plan"

    @classmethod
    def from_json(cls, body, what: str | None = None):
        """Parse a JSON body. Raises MessageError naming the first wrong key under ``what``
        (default :attr:`WHAT`), e.g. ``ecn.ports.s1-eth1.rate_bps``."""
        what = what or cls.WHAT
        try:
            return cls.model_validate(body)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(x) for x in (what, *err["loc"]))
            raise MessageError(f"{loc}: {err['msg']}") from None

    def to_json(self) -> dict:
        """The JSON body (what :meth:`from_json` takes back)."""
        return self.model_dump(mode="json")


class Fifo(_Plan):
    """A FIFO leaf: ``bfifo`` with ``limit`` in bytes or ``pfifo`` with ``limit`` in packets."""
    kind: Literal["bfifo", "pfifo"]
    limit: int = Field(gt=0)


class EcnPort(_Plan):
    """One switch egress port's queue as ECN needs it: line rate (bit/s), buffer (bytes), HTB burst
    (bytes), its FIFO, and its first profile (``"off"``, ``{"step": {...}}`` or ``{"red": {...}}``:
    common.ecn.profile_spec, checked against the buffer when applied)."""
    rate_bps: float = Field(gt=0)
    buffer_bytes: int = Field(gt=0)
    burst_bytes: int = Field(gt=0)
    fifo: Fifo
    profile: str | dict


class EcnPlan(_Plan):
    """The ECN plan (``POST /fabriclab/ecn/start``): ``marker`` ``bpf`` (fabriclab's marker on
    every port's clsact egress hook) or ``red`` (the kernel's RED qdisc), and every switch port by
    interface name."""
    WHAT: ClassVar[str] = "ecn"
    marker: Literal["bpf", "red"]
    ports: dict[str, EcnPort] = Field(min_length=1)


class PfcSwitchPort(_Plan):
    """A switch port in the PFC plan: interface, OpenFlow port ``index``, rate (bit/s), the node at
    the link's other end and its interface (whose transmitter this port's pauses gate)."""
    intf: str
    index: int = Field(ge=1)
    rate_bps: float = Field(gt=0)
    peer: str
    peer_intf: str
    peer_is_host: bool


class PfcSwitch(_Plan):
    """A switch in the PFC plan: name, its 1-based id in the accounting maps (``sw``), its ports."""
    name: str
    sw: int = Field(ge=1)
    ports: tuple[PfcSwitchPort, ...]


class PfcHost(_Plan):
    """A host NIC in the PFC plan: host name, interface, rate (bit/s)."""
    name: str
    intf: str
    rate_bps: float = Field(gt=0)


class PfcPlan(_Plan):
    """The PFC plan (:func:`experiments.features.pfc.plan.pfc_plan` builds it; controller.pfc.ports
    applies it). Thresholds and buffers in bytes; priorities 0-7; ``weights``: a weighted
    scheduler's weight per priority, None for strict priority; ``burst_bytes`` None: per port from
    its rate and ``shaper_slack_s`` (seconds); ``switch_fifo_bytes``/``host_fifo_bytes``: each
    priority queue's limit."""
    WHAT: ClassVar[str] = "pfc"
    enabled: bool
    dscp_map: dict[int, int]
    default_priority: int = Field(ge=0, le=7)
    lossless: tuple[int, ...]
    xoff_bytes: int = Field(ge=0)
    xon_bytes: int = Field(ge=0)
    cap_bytes: int = Field(gt=0)
    watchdog_s: float | None
    watchdog_action: str
    weights: dict[int, int] | None
    burst_bytes: int | None
    shaper_slack_s: float = Field(gt=0)
    lossy_fifo_bytes: int = Field(gt=0)
    switch_fifo_bytes: dict[int, int]
    host_fifo_bytes: dict[int, int]
    switches: tuple[PfcSwitch, ...]
    hosts: tuple[PfcHost, ...]


@dataclass(frozen=True)
class PfcStart:
    """Install PFC on every port and start the pauser (``POST /fabriclab/pfc/start``): ``plan``
    the :class:`PfcPlan`, ``host_pids`` maps host name -> the pid of its network namespace's shell."""
    host_pids: dict
    plan: PfcPlan

    @classmethod
    def from_json(cls, body) -> "PfcStart":
        """Parse ``{"host_pids": {name: pid}, "plan": {...}}``. Raises MessageError naming the key."""
        body = _mapping(body, "pfc.start", {"host_pids", "plan"})
        if "plan" not in body:
            raise MessageError("pfc.start.plan: missing (the PFC plan to install)")
        pids = _host_pids({"host_pids": body.get("host_pids")}, "pfc.start")
        return cls(host_pids=pids, plan=PfcPlan.from_json(body["plan"], "pfc.start.plan"))


@dataclass(frozen=True)
class PfcChange:
    """PFC on or off (``enabled``), or new XOFF/XON thresholds and per-counter buffer (bytes)."""
    enabled: bool | None = None
    xoff_bytes: int | None = None
    xon_bytes: int | None = None
    cap_bytes: int | None = None

    @classmethod
    def from_json(cls, body) -> "PfcChange":
        """Parse ``{"enabled": bool}`` or ``{"xoff_bytes", "xon_bytes", "cap_bytes"}`` (all three).
        Raises MessageError naming the key."""
        keys = {"enabled", "xoff_bytes", "xon_bytes", "cap_bytes"}
        body = _mapping(body, "pfc", keys)
        if "enabled" in body:
            if set(body) != {"enabled"} or not isinstance(body["enabled"], bool):
                raise MessageError(f"pfc.enabled: expected true or false alone, got {body!r}")
            return cls(enabled=body["enabled"])
        if set(body) != keys - {"enabled"}:
            raise MessageError("pfc: give either enabled, or xoff_bytes, xon_bytes and cap_bytes together")
        xoff, xon, cap = (_int(body, k, "pfc") for k in ("xoff_bytes", "xon_bytes", "cap_bytes"))
        if not xon < xoff < cap:
            raise MessageError(f"pfc: need xon_bytes < xoff_bytes < cap_bytes, got {xon}, {xoff}, {cap}")
        return cls(xoff_bytes=xoff, xon_bytes=xon, cap_bytes=cap)
