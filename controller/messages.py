"""The typed messages between the runner and the controller's REST API (controller.rest): each
parsed once from its JSON body, with the key named when it is wrong. Pure: no I/O.

- :class:`EcnChange` ``{"ports": {intf: profile spec}}``: new ECN profiles (common.ecn specs).
- :class:`PfcStart` ``{"host_pids": {host: pid}}``: install PFC and start the pauser.
- :class:`PfcChange` ``{"enabled": bool}`` or ``{"xoff_bytes", "xon_bytes", "cap_bytes"}``:
  PFC on or off, or new thresholds and buffer.
- :class:`HostsRegister` ``{"host_pids": {host: pid}}``: the hosts' namespaces (faults on hosts'
  interfaces reach them there).
- :class:`FaultsAdd` ``{"faults": [fault, ...]}``: faults to schedule (controller.faults).
"""
from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class PfcStart:
    """Install PFC on every port and start the pauser; ``host_pids`` maps host name -> the pid of
    its network namespace's shell."""
    host_pids: dict

    @classmethod
    def from_json(cls, body) -> "PfcStart":
        """Parse ``{"host_pids": {name: pid}}``. Raises MessageError naming the key."""
        return cls(host_pids=_host_pids(body, "pfc.start"))


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
