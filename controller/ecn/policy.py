"""ECN marking policy (pure): the per-packet marking decision and the virtual
queue a per-packet marker uses where the kernel has no RED. The BPF marker
(:mod:`controller.ecn.marker`, ``controller/bpf/ecn_marker.bpf.c``) implements
exactly this in the kernel; these functions are its reference in the unit
tests. Profiles (off / step / red, with their sources) and their validation
are in :mod:`common.ecn`; a profile's marking probability for the backlog a
packet finds is :meth:`common.ecn.EcnProfile.mark_probability`.
Only ECT(0)/ECT(1) packets are marked (RFC 3168 section 5); Not-ECT packets
are dropped at the buffer limit only.
"""
from __future__ import annotations

from common.ecn import EcnProfile, parse_profile  # noqa: F401  (re-exported: the policy's inputs)

#: IP ECN field code points (RFC 3168 section 5).
NOT_ECT, ECT1, ECT0, CE = 0, 1, 2, 3


def mark(ecn_field: int, probability: float, draw: float) -> int:
    """The ECN field after the marking decision: CE if the packet is ECT and ``draw`` < ``probability``.

    ``draw`` is a uniform random number in [0, 1). Not-ECT and CE packets are returned unchanged.
    """
    if ecn_field in (ECT0, ECT1) and draw < probability:
        return CE
    return ecn_field


class VirtualQueue:
    """A FIFO's backlog, packet by packet, from arrivals alone, served like an HTB token bucket.

    A marker that cannot read the real queue (an egress classifier runs before
    the shaper) computes what each packet finds. On every arrival, rate x
    elapsed bytes of service became available on top of the unused credit
    (at most ``burst_bytes``: HTB's bucket, full when the port has been idle);
    the backlog is served from it and what is left stays as credit. Then the
    packet is added if it fits under the buffer and served at once from any
    credit left. With ``burst_bytes`` = 0 this is a work-conserving server at
    ``rate_bps``; with HTB's burst it also keeps the head start a full bucket
    gives the real queue (measured: without it the estimate ran ~3 kB, the
    default 2-frame burst, above the real backlog for the whole run).
    ``controller/bpf/ecn_marker.bpf.c`` does exactly this in the kernel.

    Args:
        rate_bps: service rate in bit/s (> 0).
        buffer_bytes: capacity; a packet that does not fit is dropped.
        burst_bytes: the shaper's bucket in bytes (>= 0).

    Raises:
        ValueError: non-positive rate or buffer, negative burst.
    """

    def __init__(self, rate_bps: float, buffer_bytes: int, burst_bytes: int = 0):
        if rate_bps <= 0 or buffer_bytes <= 0 or burst_bytes < 0:
            raise ValueError(f"rate_bps and buffer_bytes must be positive and burst_bytes >= 0, "
                             f"got {rate_bps}, {buffer_bytes}, {burst_bytes}")
        self.rate_bytes_per_s = rate_bps / 8.0
        self.buffer_bytes = buffer_bytes
        self.burst_bytes = burst_bytes
        self.backlog_bytes = 0.0
        self.credit_bytes = float(burst_bytes)
        self.t_s: float | None = None

    def arrive(self, length_bytes: int, t_s: float) -> tuple[float, bool]:
        """A packet of ``length_bytes`` arrives at ``t_s`` (non-decreasing).

        Returns:
            ``(backlog the packet finds in bytes, accepted)``; a rejected packet
            (buffer full) leaves the backlog as it was.
        """
        if self.t_s is not None:
            service = self.rate_bytes_per_s * (t_s - self.t_s) + self.credit_bytes
            served = min(self.backlog_bytes, service)
            self.backlog_bytes -= served
            self.credit_bytes = min(self.burst_bytes, service - served)
        self.t_s = t_s
        seen = self.backlog_bytes
        if seen + length_bytes > self.buffer_bytes:
            return seen, False
        self.backlog_bytes = seen + length_bytes
        served = min(self.backlog_bytes, self.credit_bytes)
        self.backlog_bytes -= served
        self.credit_bytes -= served
        return seen, True


def ewma(avg: float, sample: float, weight: float) -> float:
    """RED's averaged queue (Floyd and Jacobson 1993, section 4): ``(1 - w) avg + w sample``."""
    return (1.0 - weight) * avg + weight * sample
