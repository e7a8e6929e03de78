"""ECN marking profiles as scenarios give them: their data type and their
validation (pure; no kernel access).

- ``off``: drop-tail, never marks.
- ``step``: mark every ECT packet that finds at least K bytes queued (DCTCP:
  Alizadeh et al., SIGCOMM 2010, section 3.1, "mark if queue >= K").
- ``red``: mark with probability rising linearly from 0 at Kmin to Pmax at
  Kmax, and every packet above Kmax (DCQCN's switch profile: Zhu et al.,
  SIGCOMM 2015, section 3.1 and figure 5; RED's linear region from Floyd and
  Jacobson, IEEE/ACM ToN 1993). On the instantaneous queue unless an EWMA
  weight is given (avg <- (1 - w) avg + w q, RED section 4).

The marking itself is in :mod:`controller.ecn.policy` (policy),
:mod:`controller.ecn.marker` and :mod:`controller.dataplane` (kernel).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from common.errors import ScenarioError
from common.units import FRAME_BYTES


@dataclass(frozen=True)
class EcnProfile:
    """One port queue's marking profile.

    Attributes:
        kind: ``off``, ``step`` or ``red``.
        k_bytes: step threshold (``step``).
        kmin_bytes, kmax_bytes, pmax: RED region (``red``); 0 < pmax <= 1.
        weight: EWMA weight of the averaged queue (``red``), None = instantaneous.
    """
    kind: str
    k_bytes: int | None = None
    kmin_bytes: int | None = None
    kmax_bytes: int | None = None
    pmax: float | None = None
    weight: float | None = None

    def mark_probability(self, queue_bytes: float) -> float:
        """Probability that an ECT packet finding ``queue_bytes`` queued is marked CE (0..1)."""
        if self.kind == "step":
            return 1.0 if queue_bytes >= self.k_bytes else 0.0
        if self.kind == "red":
            if queue_bytes <= self.kmin_bytes:
                return 0.0
            if queue_bytes > self.kmax_bytes:
                return 1.0
            return self.pmax * (queue_bytes - self.kmin_bytes) / (self.kmax_bytes - self.kmin_bytes)
        return 0.0


def _size(spec: dict, name: str, key: str, frame_bytes: int) -> int:
    """``name``_bytes or ``name``_packets from ``spec`` (exactly one) in bytes."""
    b, p = spec.get(f"{name}_bytes"), spec.get(f"{name}_packets")
    if (b is None) == (p is None):
        raise ScenarioError(f"{key}.{name}_bytes", f"give exactly one of {name}_bytes or {name}_packets")
    v = b if b is not None else p
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ScenarioError(f"{key}.{name}_{'bytes' if b is not None else 'packets'}",
                            f"must be a positive integer, got {v!r}")
    return v if b is not None else v * frame_bytes


def parse_profile(spec, buffer_bytes: int, key: str, frame_bytes: int = FRAME_BYTES) -> EcnProfile:
    """Check one profile mapping and return it in bytes.

    Args:
        spec: ``"off"`` (or False: YAML reads a bare ``off`` as false), ``{"step": {"k_bytes"|"k_packets": N}}`` or
            ``{"red": {"kmin_…", "kmax_…", "pmax": P, ["weight": W]}}``.
        buffer_bytes: the queue's buffer (thresholds must fit under it).
        key: dotted scenario key of ``spec``, for error messages.
        frame_bytes: bytes per packet when thresholds are given in packets.

    Raises:
        ScenarioError: naming the bad key: unknown kind or field, missing or
            non-positive threshold, Kmin >= Kmax, a threshold at or above the
            buffer (it could never take effect: case L2), Pmax outside (0, 1],
            weight outside (0, 1].
    """
    if spec is False or spec == "off" or spec == {"off": None}:   # YAML 1.1 reads a bare off as false
        return EcnProfile("off")
    if not isinstance(spec, dict) or len(spec) != 1:
        raise ScenarioError(key, f"expected 'off', {{step: ...}} or {{red: ...}}, got {spec!r}")
    (kind, body), = spec.items()
    body = body or {}
    allowed = {"step": {"k_bytes", "k_packets"},
               "red": {"kmin_bytes", "kmin_packets", "kmax_bytes", "kmax_packets", "pmax", "weight"}}
    if kind not in allowed:
        raise ScenarioError(f"{key}.{kind}", "unknown ECN profile (off, step, red)")
    if not isinstance(body, dict):
        raise ScenarioError(f"{key}.{kind}", "expected a mapping")
    for name in body:
        if name not in allowed[kind]:
            raise ScenarioError(f"{key}.{kind}.{name}", f"unknown key (known keys here: {', '.join(sorted(allowed[kind]))})")
    where = f"{key}.{kind}"

    def given(name):
        return f"{where}.{name}_{'bytes' if f'{name}_bytes' in body else 'packets'}"
    if kind == "step":
        k = _size(body, "k", where, frame_bytes)
        if k >= buffer_bytes:
            raise ScenarioError(given("k"), f"K = {k} B is not below the buffer ({buffer_bytes} B): "
                                                    "it would never mark")
        return EcnProfile("step", k_bytes=k)
    kmin, kmax = _size(body, "kmin", where, frame_bytes), _size(body, "kmax", where, frame_bytes)
    if kmin >= kmax:
        raise ScenarioError(given("kmin"), f"Kmin ({kmin} B) must be below Kmax ({kmax} B)")
    if kmax >= buffer_bytes:
        raise ScenarioError(given("kmax"), f"Kmax = {kmax} B is not below the buffer ({buffer_bytes} B)")
    pmax = body.get("pmax")
    if isinstance(pmax, bool) or not isinstance(pmax, (int, float)) or not 0 < pmax <= 1:
        raise ScenarioError(f"{where}.pmax", f"must be a probability in (0, 1], got {pmax!r}")
    weight = body.get("weight")
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))
                               or not 0 < weight <= 1):
        raise ScenarioError(f"{where}.weight", f"must be in (0, 1], got {weight!r}")
    return EcnProfile("red", kmin_bytes=kmin, kmax_bytes=kmax, pmax=float(pmax),
                      weight=float(weight) if weight is not None else None)


def profile_spec(p: EcnProfile) -> dict | str:
    """``p`` in scenario syntax, thresholds in bytes (what :func:`parse_profile` reads back)."""
    if p.kind == "off":
        return "off"
    if p.kind == "step":
        return {"step": {"k_bytes": p.k_bytes}}
    body = {"kmin_bytes": p.kmin_bytes, "kmax_bytes": p.kmax_bytes, "pmax": p.pmax}
    if p.weight is not None:
        body["weight"] = p.weight
    return {"red": body}


def describe(p: EcnProfile) -> str:
    """A short label: ``drop-tail``, ``step K=30280 B``, ``red 15140-60560 B Pmax 0.2``."""
    if p.kind == "off":
        return "drop-tail"
    if p.kind == "step":
        return f"step K={p.k_bytes} B ({p.k_bytes / FRAME_BYTES:g} pkt)"
    w = f", w={p.weight:g}" if p.weight else ""
    return f"red {p.kmin_bytes}-{p.kmax_bytes} B Pmax {p.pmax:g}{w}"


#: How a port's marking is done: ``auto`` picks ``red`` where the kernel has sch_red, else ``bpf``.
MARKERS = ("auto", "red", "bpf")
ECN_KEYS = ("marker", "profile", "layers", "ports")
PORT_NAME = r"[A-Za-z0-9_.-]{1,15}-eth[0-9]{1,4}"


@dataclass(frozen=True)
class EcnSettings:
    """A scenario's (or one round's) ECN marking, parsed once: thresholds in bytes.

    Attributes:
        marker: ``auto``, ``red`` or ``bpf`` (a round has its scenario's).
        profile: every switch egress port's profile unless a layer or port says otherwise.
        layers: ``{switch layer: profile}`` (e.g. ``leaf``).
        ports: ``{switch port: profile}`` (e.g. ``l1-eth1``; checked against the fabric by
            :func:`port_profiles`).
    """
    marker: str = "auto"
    profile: EcnProfile = EcnProfile("off")
    layers: dict = field(default_factory=dict)
    ports: dict = field(default_factory=dict)


def settings_spec(s: EcnSettings, marker: bool = True) -> dict:
    """``s`` in scenario syntax, thresholds in bytes (what :func:`resolve_ecn` reads back)."""
    out = {"marker": s.marker} if marker else {}
    out["profile"] = profile_spec(s.profile)
    out["layers"] = {k: profile_spec(p) for k, p in s.layers.items()}
    out["ports"] = {k: profile_spec(p) for k, p in s.ports.items()}
    return out


def resolve_ecn(section, kind: str, switch_layers: tuple[str, ...], buffer_bytes: int, key: str = "ecn",
                base: EcnSettings | None = None) -> EcnSettings:
    """Parse a scenario's ``ecn`` section (or a round's) once, into :class:`EcnSettings`.

    ``kind`` names the fabric (for messages) and ``switch_layers`` are its switch layers (the
    ``layers`` keys allowed: ``("spine", "leaf")``; experiments.scenario.switch_layers). A round's
    section is given with ``base``, the scenario's settings: it has no marker key, and the keys
    it leaves out are the scenario's (already parsed: only the round's own profiles are parsed).

    Shape::

        ecn:
          marker: auto | red | bpf     # default auto
          profile: <profile>           # every switch egress port; default off
          layers: {<layer>: <profile>} # e.g. spine/leaf, core/aggregation/edge, router
          ports: {<switch port>: <profile>}   # e.g. l1-eth1 (checked against the fabric by port_profiles)

    Raises:
        ScenarioError: naming the bad key (unknown key, layer or marker, or
            any profile error of :func:`parse_profile`).
    """
    section = {} if section is None else section
    if not isinstance(section, dict):
        raise ScenarioError(key, f"expected a mapping, got {type(section).__name__}")
    allow_marker = base is None
    for k in section:
        if k not in ECN_KEYS or (k == "marker" and not allow_marker):
            raise ScenarioError(f"{key}.{k}", f"unknown key (known keys here: "
                                              f"{', '.join(k2 for k2 in ECN_KEYS if allow_marker or k2 != 'marker')})")
    base = base if base is not None else EcnSettings(marker=section.get("marker", "auto"))
    if base.marker not in MARKERS:
        raise ScenarioError(f"{key}.marker", f"must be one of {', '.join(MARKERS)}; got {base.marker!r}")
    profile = parse_profile(section["profile"], buffer_bytes, f"{key}.profile") if "profile" in section \
        else base.profile
    for name in ("layers", "ports"):
        if not isinstance(section.get(name) or {}, dict):
            raise ScenarioError(f"{key}.{name}", "expected a mapping")
    layers = base.layers
    if "layers" in section:
        layers = {}
        for layer, spec in (section["layers"] or {}).items():
            if layer not in switch_layers:
                raise ScenarioError(f"{key}.layers.{layer}", f"no such switch layer in a {kind} fabric "
                                                             f"(its layers: {', '.join(switch_layers)})")
            layers[layer] = parse_profile(spec, buffer_bytes, f"{key}.layers.{layer}")
    ports = base.ports
    if "ports" in section:
        ports = {}
        for port, spec in (section["ports"] or {}).items():
            if not isinstance(port, str) or not re.fullmatch(PORT_NAME, port):
                raise ScenarioError(f"{key}.ports.{port}", "expected a switch port name like l1-eth1")
            ports[port] = parse_profile(spec, buffer_bytes, f"{key}.ports.{port}")
    return EcnSettings(marker=base.marker, profile=profile, layers=dict(layers), ports=dict(ports))


def port_profiles(ecn: EcnSettings, fabric_map: dict, key: str = "ecn") -> dict[str, EcnProfile]:
    """Every switch egress port's profile: ``ports`` over ``layers`` over ``profile``.

    Args:
        ecn: the parsed settings (:func:`resolve_ecn`).
        fabric_map: the fabric map (``switches[*].layer``, ``switches[*].ports[*].intf``).

    Raises:
        ScenarioError: ``<key>.ports.<name>`` names no switch port of this fabric.
    """
    out = {}
    for sw in fabric_map["switches"]:
        spec = ecn.layers.get(sw["layer"], ecn.profile)
        for p in sw["ports"]:
            out[p["intf"]] = ecn.ports.get(p["intf"], spec)
    for port in ecn.ports:
        if port not in out:
            raise ScenarioError(f"{key}.ports.{port}", "no such switch port in this fabric")
    return out
