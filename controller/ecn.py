"""ECN marking policy (pure): profiles, their validation, the per-packet
marking decision, and the virtual queue a per-packet marker uses where the
kernel has no RED.

Groundwork for issue 5. Nothing here touches the kernel, and no scenario key
reaches it yet: a scenario cannot ask for ECN until a marker applies it (an
ECN request that cannot take effect must be refused, never ignored: case L2).

Profiles (bytes of the egress queue a packet finds on arrival):
- ``off``: drop-tail, never marks.
- ``step``: mark every ECT packet that finds at least K bytes queued (DCTCP:
  Alizadeh et al., SIGCOMM 2010, section 3.1, "mark if queue >= K").
- ``red``: mark with probability rising linearly from 0 at Kmin to Pmax at
  Kmax, and every packet above Kmax (DCQCN's switch profile: Zhu et al.,
  SIGCOMM 2015, section 3.1 and figure 5; RED's linear region from Floyd and
  Jacobson, IEEE/ACM ToN 1993). On the instantaneous queue unless an EWMA
  weight is given (avg <- (1 - w) avg + w q, RED section 4).
Only ECT(0)/ECT(1) packets are marked (RFC 3168 section 5); Not-ECT packets
are dropped at the buffer limit only.
"""
from __future__ import annotations

from dataclasses import dataclass

from common.errors import ScenarioError
from common.scenario import FRAME_BYTES

#: IP ECN field code points (RFC 3168 section 5).
NOT_ECT, ECT1, ECT0, CE = 0, 1, 2, 3


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
        spec: ``"off"``, ``{"step": {"k_bytes"|"k_packets": N}}`` or
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
    if spec == "off" or spec == {"off": None}:
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
    for field in body:
        if field not in allowed[kind]:
            raise ScenarioError(f"{key}.{kind}.{field}", f"unknown key (known: {', '.join(sorted(allowed[kind]))})")
    where = f"{key}.{kind}"
    if kind == "step":
        k = _size(body, "k", where, frame_bytes)
        if k >= buffer_bytes:
            raise ScenarioError(f"{where}.k_bytes", f"K = {k} B is not below the buffer ({buffer_bytes} B): "
                                                    "it would never mark")
        return EcnProfile("step", k_bytes=k)
    kmin, kmax = _size(body, "kmin", where, frame_bytes), _size(body, "kmax", where, frame_bytes)
    if kmin >= kmax:
        raise ScenarioError(f"{where}.kmin_bytes", f"Kmin ({kmin} B) must be below Kmax ({kmax} B)")
    if kmax >= buffer_bytes:
        raise ScenarioError(f"{where}.kmax_bytes", f"Kmax = {kmax} B is not below the buffer ({buffer_bytes} B)")
    pmax = body.get("pmax")
    if isinstance(pmax, bool) or not isinstance(pmax, (int, float)) or not 0 < pmax <= 1:
        raise ScenarioError(f"{where}.pmax", f"must be a probability in (0, 1], got {pmax!r}")
    weight = body.get("weight")
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))
                               or not 0 < weight <= 1):
        raise ScenarioError(f"{where}.weight", f"must be in (0, 1], got {weight!r}")
    return EcnProfile("red", kmin_bytes=kmin, kmax_bytes=kmax, pmax=float(pmax),
                      weight=float(weight) if weight is not None else None)


def mark(ecn_field: int, probability: float, draw: float) -> int:
    """The ECN field after the marking decision: CE if the packet is ECT and ``draw`` < ``probability``.

    ``draw`` is a uniform random number in [0, 1). Not-ECT and CE packets are returned unchanged.
    """
    if ecn_field in (ECT0, ECT1) and draw < probability:
        return CE
    return ecn_field


class VirtualQueue:
    """A FIFO's backlog, packet by packet, from arrivals alone: drained at ``rate_bps``.

    A marker that cannot read the real queue (an egress classifier runs before
    the shaper) can compute what each packet finds: backlog <- max(0, backlog
    - rate x elapsed) on every arrival, then + the packet if it fits under the
    buffer. That equals the real FIFO's backlog when the shaper sends at its
    rate whenever it has packets (a work-conserving server at ``rate_bps``).

    Args:
        rate_bps: drain rate in bit/s (> 0).
        buffer_bytes: capacity; a packet that does not fit is dropped.

    Raises:
        ValueError: non-positive rate or buffer.
    """

    def __init__(self, rate_bps: float, buffer_bytes: int):
        if rate_bps <= 0 or buffer_bytes <= 0:
            raise ValueError(f"rate_bps and buffer_bytes must be positive, got {rate_bps}, {buffer_bytes}")
        self.rate_bytes_per_s = rate_bps / 8.0
        self.buffer_bytes = buffer_bytes
        self.backlog_bytes = 0.0
        self.t_s: float | None = None

    def arrive(self, length_bytes: int, t_s: float) -> tuple[float, bool]:
        """A packet of ``length_bytes`` arrives at ``t_s`` (non-decreasing).

        Returns:
            ``(backlog the packet finds in bytes, accepted)``; a rejected packet
            (buffer full) leaves the backlog as it was.
        """
        if self.t_s is not None:
            self.backlog_bytes = max(0.0, self.backlog_bytes - self.rate_bytes_per_s * (t_s - self.t_s))
        self.t_s = t_s
        seen = self.backlog_bytes
        if seen + length_bytes > self.buffer_bytes:
            return seen, False
        self.backlog_bytes = seen + length_bytes
        return seen, True


def ewma(avg: float, sample: float, weight: float) -> float:
    """RED's averaged queue (Floyd and Jacobson 1993, section 4): ``(1 - w) avg + w sample``."""
    return (1.0 - weight) * avg + weight * sample
