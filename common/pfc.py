"""Priority Flow Control (IEEE 802.1Qbb) as pure logic: frame layout, pause quanta,
headroom, the per-(link, priority) pause state machine with its watchdog, and the
check of a PFC configuration. No kernel access; time is always passed in.

Vocabulary (IEEE 802.1Qbb-2011, clauses 36 and 37; the names switch vendors use):

- XOFF: buffered bytes of one (ingress link, priority) at which the switch
  asks the upstream transmitter to stop that priority.
- XON: buffered bytes at or below which it lets the upstream resume (XON < XOFF:
  hysteresis, so one packet in or out does not toggle the pause).
- headroom: buffer kept above XOFF for the bytes that still arrive after XOFF
  was crossed: those sent while the pause is decided and travels upstream,
  those already on the wire, and the frame the upstream had started.
- pause quanta: a PFC frame carries, per priority, a pause time in quanta of
  512 bit times at the link's rate (clause 36.1.3.2); 0 means resume now.
- PFC watchdog: a queue that stays paused longer than a set time is a pause
  storm (a stuck receiver, a pause loop); production switches report it and
  may drop that queue's packets instead of waiting (SONiC's PFC watchdog).

This module decides nothing about the kernel; the data plane applies what it decides.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from common.errors import ScenarioError

PFC_DST_MAC = "01:80:c2:00:00:01"     # IEEE 802.1Qbb: MAC Control frames go to this reserved address
MAC_CONTROL_ETHERTYPE = 0x8808
PFC_OPCODE = 0x0101                   # 0x0001 is 802.3x PAUSE (whole link); 0x0101 per priority
QUANTUM_BITS = 512
MAX_QUANTA = 0xFFFF
PRIORITIES = range(8)
PFC_FRAME_BYTES = 60                  # 14 header + 2 opcode + 2 vector + 16 times + 26 pad (no FCS)


def quanta_to_s(quanta: int, rate_bps: float) -> float:
    """Seconds a pause of ``quanta`` lasts on a link of ``rate_bps`` (quanta x 512 / rate_bps; case R2).

    Raises:
        ValueError: quanta outside 0..65535 or a non-positive rate.
    """
    if not 0 <= quanta <= MAX_QUANTA or int(quanta) != quanta:
        raise ValueError(f"pause quanta must be an integer in 0..{MAX_QUANTA}, got {quanta!r}")
    if rate_bps <= 0:
        raise ValueError(f"link rate must be positive, got {rate_bps!r} bit/s")
    return quanta * QUANTUM_BITS / rate_bps


def s_to_quanta(seconds: float, rate_bps: float) -> int:
    """The smallest pause time in quanta that covers ``seconds`` at ``rate_bps``, capped at 65535.

    Raises:
        ValueError: negative time or a non-positive rate.
    """
    if seconds < 0:
        raise ValueError(f"pause time must not be negative, got {seconds!r} s")
    if rate_bps <= 0:
        raise ValueError(f"link rate must be positive, got {rate_bps!r} bit/s")
    return min(MAX_QUANTA, math.ceil(seconds * rate_bps / QUANTUM_BITS - 1e-9))


def pfc_frame(src_mac: str, pause_quanta: dict[int, int]) -> bytes:
    """A PFC frame (IEEE 802.1Qbb clause 36.1.3; case R2) as wire bytes without FCS (60 bytes).

    Args:
        src_mac: the pausing port's MAC, ``"aa:bb:cc:dd:ee:ff"``.
        pause_quanta: ``{priority: quanta}`` for the priorities whose class-enable bit is set;
            quanta 0 resumes that priority at once.

    Raises:
        ValueError: a priority outside 0..7 or quanta outside 0..65535.
    """
    # scapy loads in ~0.8 s: only where a frame is built by it (the controller and agents never are)
    from scapy.contrib.mac_control import MACControlClassBasedFlowControl
    from scapy.layers.l2 import Ether
    fields = {}
    for prio, quanta in pause_quanta.items():
        if prio not in PRIORITIES:
            raise ValueError(f"priority must be 0..7, got {prio!r}")
        quanta_to_s(quanta, 1.0)   # range check
        fields[f"c{prio}_enabled"] = 1
        fields[f"c{prio}_pause_time"] = quanta
    frame = Ether(dst=PFC_DST_MAC, src=src_mac, type=MAC_CONTROL_ETHERTYPE) / MACControlClassBasedFlowControl(**fields)
    return bytes(frame)


def parse_pfc_frame(data: bytes) -> dict[int, int]:
    """``{priority: quanta}`` of the enabled classes of a PFC frame (inverse of :func:`pfc_frame`).

    Raises:
        ValueError: not a PFC frame (destination, EtherType, opcode or length wrong).
    """
    if len(data) < 34:
        raise ValueError(f"a PFC frame has at least 34 bytes before padding, got {len(data)}")
    if data[0:6] != bytes.fromhex(PFC_DST_MAC.replace(":", "")):
        raise ValueError(f"destination {data[0:6].hex(':')} is not {PFC_DST_MAC}")
    ethertype, opcode, vector = int.from_bytes(data[12:14], "big"), int.from_bytes(data[14:16], "big"), \
        int.from_bytes(data[16:18], "big")
    if ethertype != MAC_CONTROL_ETHERTYPE:
        raise ValueError(f"EtherType {ethertype:#06x} is not MAC Control {MAC_CONTROL_ETHERTYPE:#06x}")
    if opcode != PFC_OPCODE:
        raise ValueError(f"opcode {opcode:#06x} is not PFC {PFC_OPCODE:#06x}")
    return {p: int.from_bytes(data[18 + 2 * p:20 + 2 * p], "big") for p in PRIORITIES if vector >> p & 1}


def headroom_bytes(rate_bps: float, reaction_s: float, link_delay_s: float, mtu_bytes: int = 1514) -> int:
    """Headroom one (link, priority) needs above XOFF: rate x (reaction + link delay) + one MTU.

    The bytes that still arrive after XOFF is crossed: the upstream keeps sending at
    ``rate_bps`` until the pause has been decided and has reached it (``reaction_s``,
    measured per run) and the bytes already on the link arrive (``link_delay_s``: the
    link's round trip, the pause going up and the last bytes coming down); the frame the
    upstream had started cannot be cut (one MTU). The same reckoning as the headroom
    calculators of switch vendors, without cable and PHY terms an emulated link lacks.

    Raises:
        ValueError: a negative or non-finite input.
    """
    for name, v in (("rate_bps", rate_bps), ("reaction_s", reaction_s), ("link_delay_s", link_delay_s),
                    ("mtu_bytes", mtu_bytes)):
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    return math.ceil(rate_bps * (reaction_s + link_delay_s) / 8) + int(mtu_bytes)


def buffer_warning(buffer_bytes: int, xoff_bytes: int, headroom_needed_bytes: int, where: str) -> str | None:
    """A warning naming the numbers when ``buffer_bytes`` cannot hold XOFF plus ``headroom_needed_bytes``
    (then the lossless class can drop: case R3), else None."""
    need = xoff_bytes + headroom_needed_bytes
    if buffer_bytes >= need:
        return None
    return (f"{where}: buffer {buffer_bytes} B < XOFF {xoff_bytes} B + headroom {headroom_needed_bytes} B = {need} B; "
            f"the lossless class can drop {need - buffer_bytes} B per pause")


# -- the pause state machine ---------------------------------------------------

XOFF, XON, STORM, STORM_END = "xoff", "xon", "storm", "storm_end"
WATCHDOG_ACTIONS = ("keep", "drop")


@dataclass
class PauseEvent:
    """One transition of a :class:`PauseState`: ``kind`` in xoff, xon, storm, storm_end;
    ``t_s`` the injected time it happened at; ``bytes`` the occupancy that caused it."""
    kind: str
    t_s: float
    bytes: int


@dataclass
class PauseState:
    """Pause of one (link, priority): XOFF/XON hysteresis on the downstream buffer the link
    fills, and a watchdog on how long the upstream queue stays paused.

    Feed it the buffered bytes attributed to this (link, priority) with :meth:`update`, each
    time with the current time; it returns what changed. Time is injected (seconds on any
    monotonic clock), so tests drive it.

    - Not paused and occupancy >= ``xoff_bytes``: pause (``xoff``).
    - Paused and occupancy <= ``xon_bytes``: resume (``xon``).
    - Paused for ``watchdog_s`` or longer: a pause storm (``storm``), once per pause. With
      action ``drop`` the paused queue is to drop its packets while the storm lasts (the
      caller does it: :attr:`dropping`); with ``keep`` it is only reported. The storm ends
      with the pause (``storm_end`` then ``xon``).

    Attributes:
        paused: whether the upstream is paused now.
        paused_since_s: when the current pause began (None when not paused).
        intervals: closed pauses as ``(start_s, end_s, stormed)``.

    Raises:
        ValueError (at construction): XON not below XOFF, negative thresholds, a
            non-positive watchdog time, an unknown action.
    """
    xoff_bytes: int
    xon_bytes: int
    watchdog_s: float | None = None
    action: str = "keep"
    paused: bool = False
    paused_since_s: float | None = None
    storm: bool = False
    intervals: list = field(default_factory=list)

    def __post_init__(self):
        if self.xon_bytes < 0 or self.xoff_bytes <= 0:
            raise ValueError(f"XON and XOFF must be >= 0 and > 0 bytes, got {self.xon_bytes}, {self.xoff_bytes}")
        if self.xon_bytes >= self.xoff_bytes:
            raise ValueError(f"XON ({self.xon_bytes} B) must be below XOFF ({self.xoff_bytes} B)")
        if self.watchdog_s is not None and not self.watchdog_s > 0:
            raise ValueError(f"watchdog time must be > 0 s, got {self.watchdog_s!r}")
        if self.action not in WATCHDOG_ACTIONS:
            raise ValueError(f"watchdog action must be one of {WATCHDOG_ACTIONS}, got {self.action!r}")

    @property
    def dropping(self) -> bool:
        """True while a storm lasts and the watchdog's action is ``drop``."""
        return self.storm and self.action == "drop"

    def update(self, occupancy_bytes: int, now_s: float) -> list[PauseEvent]:
        """Advance to ``now_s`` with ``occupancy_bytes`` buffered; returns the events, in order."""
        events = []
        if not self.paused and occupancy_bytes >= self.xoff_bytes:
            self.paused, self.paused_since_s = True, now_s
            events.append(PauseEvent(XOFF, now_s, occupancy_bytes))
        elif self.paused and occupancy_bytes <= self.xon_bytes:
            if self.storm:
                events.append(PauseEvent(STORM_END, now_s, occupancy_bytes))
            self.intervals.append((self.paused_since_s, now_s, self.storm))
            self.paused, self.paused_since_s, self.storm = False, None, False
            events.append(PauseEvent(XON, now_s, occupancy_bytes))
        if self.paused and not self.storm and self.watchdog_s is not None \
                and now_s - self.paused_since_s >= self.watchdog_s - 1e-9:   # float time: 1.2 - 1.0 < 0.2
            self.storm = True
            events.append(PauseEvent(STORM, now_s, occupancy_bytes))
        return events

    def paused_time_s(self, now_s: float) -> float:
        """Total time paused up to ``now_s``, the open pause included."""
        total = sum(end - start for start, end, _ in self.intervals)
        return total + (now_s - self.paused_since_s if self.paused else 0.0)


# -- configuration ---------------------------------------------------------------

DEFAULT_DSCP_MAP = {26: 3, 0: 0}      # RoCEv2's customary DSCP 26 -> priority 3 (lossless); TCP's 0 -> 0 (lossy)
DEFAULT_LOSSLESS = (3,)


@dataclass(frozen=True)
class PfcConfig:
    """Priority classes and PFC of a scenario, in bytes.

    Attributes:
        dscp_map: ``{dscp: priority}``; DSCPs not listed go to ``default_priority``.
        default_priority: priority of unlisted DSCPs.
        scheduling: ``strict`` (the higher priority number first) or ``weighted``.
        weights: ``{priority: weight}`` under ``weighted`` (shares of the port's rate).
        enabled: whether lossless priorities are paused (PFC on).
        lossless: the priorities PFC protects; the others are lossy (drop at the buffer).
        xoff_bytes, xon_bytes: pause and resume thresholds per (ingress link, priority).
        watchdog_s: pause-storm detection time, None = no watchdog.
        watchdog_action: ``keep`` (report only) or ``drop`` (the stormed queue drops its packets).
    """
    dscp_map: dict = field(default_factory=lambda: dict(DEFAULT_DSCP_MAP))
    default_priority: int = 0
    scheduling: str = "strict"
    weights: dict = field(default_factory=dict)
    enabled: bool = False
    lossless: tuple = DEFAULT_LOSSLESS
    xoff_bytes: int | None = None
    xon_bytes: int | None = None
    watchdog_s: float | None = None
    watchdog_action: str = "keep"

    def priority_of(self, dscp: int) -> int:
        """The priority (0-7) traffic with ``dscp`` (0-63) travels in."""
        return self.dscp_map.get(dscp, self.default_priority)

    def priorities(self) -> list[int]:
        """Every priority that gets its own queue, ascending."""
        return sorted(set(self.dscp_map.values()) | {self.default_priority} | set(self.lossless))


def _int_in(v, lo: int, hi: int, key: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ScenarioError(key, f"expected an integer {lo}..{hi}, got {v!r}")
    return v


def _bytes(d: dict, name: str, key: str, frame_bytes: int) -> int | None:
    b, p = d.get(f"{name}_bytes"), d.get(f"{name}_packets")
    if b is not None and p is not None:
        raise ScenarioError(f"{key}.{name}_bytes", f"give {name}_bytes or {name}_packets, not both")
    v, unit = (b, "bytes") if b is not None else (p, "packets")
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ScenarioError(f"{key}.{name}_{unit}", f"expected an integer >= 0, got {v!r}")
    return v if unit == "bytes" else v * frame_bytes


def parse_pfc(priorities: dict | None, pfc: dict | None, buffer_bytes: int, frame_bytes: int = 1514) -> PfcConfig:
    """Check a scenario's ``priorities`` and ``pfc`` sections and return them in bytes.

    Args:
        priorities: ``{dscp: {DSCP: PRIO, ...}, default_priority: P, scheduling: strict |
            {weighted: {PRIO: WEIGHT, ...}}}``, every key optional (defaults: DSCP 26 -> 3,
            0 -> 0, strict).
        pfc: ``{enabled, lossless: [P, ...], xoff_bytes|xoff_packets, xon_bytes|xon_packets,
            watchdog: {timeout_s, action: keep|drop}}``, or None (PFC off). The headroom is
            the buffer above XOFF (the controller computes what the measured reaction needs).
        buffer_bytes: each switch egress port's buffer: XOFF must fit under it.
        frame_bytes: bytes per packet for thresholds given in packets.

    Raises:
        ScenarioError: naming the bad key: unknown keys, DSCP outside 0..63, priority outside
            0..7, weights missing or non-positive, XON >= XOFF, XOFF at or above the buffer,
            an unknown watchdog action.
    """
    pr = dict(priorities or {})
    known = {"dscp", "default_priority", "scheduling"}
    for k in pr:
        if k not in known:
            raise ScenarioError(f"priorities.{k}", f"unknown key (known keys here: {', '.join(sorted(known))})")
    dscp_map = dict(DEFAULT_DSCP_MAP)
    if "dscp" in pr:
        if not isinstance(pr["dscp"], dict) or not pr["dscp"]:
            raise ScenarioError("priorities.dscp", "expected a mapping {DSCP: priority}")
        dscp_map = {_int_in(d, 0, 63, f"priorities.dscp.{d}"): _int_in(p, 0, 7, f"priorities.dscp.{d}")
                    for d, p in pr["dscp"].items()}
    default = _int_in(pr.get("default_priority", 0), 0, 7, "priorities.default_priority")
    sched, weights = pr.get("scheduling", "strict"), {}
    if isinstance(sched, dict) and set(sched) == {"weighted"} and isinstance(sched["weighted"], dict):
        weights = {_int_in(p, 0, 7, f"priorities.scheduling.weighted.{p}"): w for p, w in sched["weighted"].items()}
        for p, w in weights.items():
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 < w < math.inf:
                raise ScenarioError(f"priorities.scheduling.weighted.{p}", f"expected a finite weight > 0, got {w!r}")
        sched = "weighted"
    elif sched != "strict":
        raise ScenarioError("priorities.scheduling", f"expected 'strict' or {{weighted: {{PRIO: WEIGHT}}}}, got {sched!r}")

    pf = dict(pfc or {})
    known = {"enabled", "lossless", "xoff_bytes", "xoff_packets", "xon_bytes", "xon_packets",
             "watchdog"}
    for k in pf:
        if k not in known:
            raise ScenarioError(f"pfc.{k}", f"unknown key (known keys here: {', '.join(sorted(known))})")
    enabled = pf.get("enabled", pfc is not None)
    if not isinstance(enabled, bool):
        raise ScenarioError("pfc.enabled", f"expected true or false, got {enabled!r}")
    lossless = pf.get("lossless", list(DEFAULT_LOSSLESS))
    if not isinstance(lossless, list) or not lossless:
        raise ScenarioError("pfc.lossless", f"expected a list of priorities, got {lossless!r}")
    lossless = tuple(sorted({_int_in(p, 0, 7, "pfc.lossless") for p in lossless}))
    cfg_prios = set(dscp_map.values()) | {default} | set(lossless)
    if sched == "weighted":
        missing = sorted(cfg_prios - set(weights))
        if missing:
            raise ScenarioError("priorities.scheduling.weighted", f"no weight for priorities {missing}")
    xoff = _bytes(pf, "xoff", "pfc", frame_bytes)
    xon = _bytes(pf, "xon", "pfc", frame_bytes)
    # thresholds are resolved even with PFC off: a round may turn it on (rounds[i].pfc.enabled)
    if xoff is None:
        xoff = buffer_bytes // 2
    if xon is None:
        xon = max(0, xoff - 2 * frame_bytes)
    xoff_key = "pfc.xoff_packets" if pf.get("xoff_packets") is not None else "pfc.xoff_bytes"
    xon_key = "pfc.xon_packets" if pf.get("xon_packets") is not None else "pfc.xon_bytes"
    def said(v: int, key: str) -> str:     # in the unit the user wrote
        return f"{v // frame_bytes} packets ({v} B)" if key.endswith("_packets") else f"{v} B"
    if xoff <= 0 or xoff >= buffer_bytes:
        raise ScenarioError(xoff_key, f"XOFF {said(xoff, xoff_key)} must be above 0 and below the buffer "
                                      f"({buffer_bytes // frame_bytes} packets, {buffer_bytes} B), or it can never "
                                      "take effect")
    if xon >= xoff:
        raise ScenarioError(xon_key, f"XON {said(xon, xon_key)} must be below XOFF {said(xoff, xoff_key)}")
    wd = pf.get("watchdog")
    wd_s, action = None, "keep"
    if wd is not None:
        if not isinstance(wd, dict):
            raise ScenarioError("pfc.watchdog", "expected {timeout_s: S, action: keep|drop}")
        for k in wd:
            if k not in ("timeout_s", "action"):
                raise ScenarioError(f"pfc.watchdog.{k}", "unknown key (known keys here: action, timeout_s)")
        wd_s = wd.get("timeout_s")
        if isinstance(wd_s, bool) or not isinstance(wd_s, (int, float)) or not 0 < wd_s < math.inf:
            raise ScenarioError("pfc.watchdog.timeout_s", f"expected a time > 0 s, got {wd_s!r}")
        action = wd.get("action", "keep")
        if action not in WATCHDOG_ACTIONS:
            raise ScenarioError("pfc.watchdog.action", f"expected one of {', '.join(WATCHDOG_ACTIONS)}, got {action!r}")
    return PfcConfig(dscp_map=dscp_map, default_priority=default, scheduling=sched, weights=weights,
                     enabled=enabled, lossless=lossless, xoff_bytes=xoff, xon_bytes=xon,
                     watchdog_s=float(wd_s) if wd_s is not None else None, watchdog_action=action)


def config_sections(cfg: PfcConfig) -> tuple[dict, dict]:
    """The ``(priorities, pfc)`` scenario sections that :func:`parse_pfc` turns back into ``cfg``
    (every default written out, thresholds in bytes): what a resolved scenario records."""
    sched = "strict" if cfg.scheduling == "strict" else {"weighted": dict(cfg.weights)}
    pfc = {"enabled": cfg.enabled, "lossless": list(cfg.lossless), "xoff_bytes": cfg.xoff_bytes,
           "xon_bytes": cfg.xon_bytes}
    if cfg.watchdog_s is not None:
        pfc["watchdog"] = {"timeout_s": cfg.watchdog_s, "action": cfg.watchdog_action}
    return {"dscp": dict(cfg.dscp_map), "default_priority": cfg.default_priority, "scheduling": sched}, pfc
