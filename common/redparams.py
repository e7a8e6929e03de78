"""The kernel RED qdisc's parameters from an ECN profile (pure maths, no kernel access).

Linux RED (net/sched/sch_red.c, include/net/red.h; Floyd and Jacobson, IEEE/ACM ToN 1993)
keeps its EWMA weight as a shift and spaces its marks; these functions choose the ``tc``
parameters that give a scenario's profile (:mod:`common.ecn`) on that qdisc, and turn them into
the kernel's own (``struct tc_red_qopt``, the idle-damping table, ``max_P``) exactly as iproute2's
``tc`` does (tc/q_red.c, tc/tc_red.c, tc/tc_core.c). The qdisc itself is installed over netlink by
:mod:`controller.dataplane.tcqdisc`.
"""
from __future__ import annotations

import math


def red_wlog(weight: float | None) -> int:
    """RED's EWMA exponent: weight = 2**-Wlog. None (instantaneous) -> the smallest ``tc`` accepts, 1.

    Raises ValueError if ``weight`` is not a power of two in (0, 1/2] (the kernel's RED
    keeps the weight as a shift; the scenario must say a weight it can have).
    """
    if weight is None:
        return 1
    wlog = -math.log2(weight)
    if wlog < 1 or abs(wlog - round(wlog)) > 1e-9 or wlog > 23:
        raise ValueError(f"kernel RED takes weights 2**-n for n = 1..23, got {weight}")
    return int(round(wlog))


def red_burst_for_wlog(kmin_bytes: int, avpkt: int, wlog: int) -> int:
    """The ``burst`` (packets) for which tc's ``tc_red_eval_ewma`` (iproute2 tc/tc_red.c) chooses ``wlog``.

    tc picks the smallest Wlog >= 1 with ``burst + 1 - kmin/avpkt <= (1 - (1 - W)**burst) / W``;
    this searches ``burst`` upward from the smallest tc accepts. Raises ValueError if none gives ``wlog``.
    """
    start = max(1, int(kmin_bytes // avpkt))
    for burst in range(start, start + 100000):
        got = red_eval_ewma(kmin_bytes, burst, avpkt)
        if got == wlog:
            return burst
        if got > wlog:
            break
    raise ValueError(f"no RED burst gives Wlog {wlog} for Kmin {kmin_bytes} B")


def red_eval_ewma(qmin_bytes: int, burst: int, avpkt: int) -> int:
    """RED's Wlog for ``burst`` packets as tc chooses it (``tc_red_eval_ewma``): the smallest
    Wlog >= 1 with ``burst + 1 - qmin/avpkt <= (1 - (1 - W)**burst) / W``, W = 2**-Wlog; -1 if
    the burst is too small for ``qmin_bytes`` or no Wlog below 32 fits."""
    a = burst + 1 - qmin_bytes / avpkt
    if a < 1.0:
        return -1
    w = 0.5
    for wlog in range(1, 32):
        if a <= (1 - (1 - w) ** burst) / w:
            return wlog
        w /= 2
    return -1


def red_eval_plog(qmin_bytes: int, qmax_bytes: int, probability: float) -> int:
    """RED's Plog as tc computes it (``tc_red_eval_P``): the number of doublings that lift
    ``probability / (qmax - qmin)`` above 1; -1 if qmax <= qmin or 32 doublings do not."""
    span = qmax_bytes - qmin_bytes
    if span <= 0:
        return -1
    prob = probability / span
    for i in range(32):
        if prob > 1.0:
            return i
        prob *= 2
    return -1


def red_xmit_ticks(rate_bytes_per_s: int, size_bytes: int, tick_in_usec: float) -> int:
    """The time ``size_bytes`` take at ``rate_bytes_per_s``, in psched ticks, truncated twice as
    ``tc_calc_xmittime`` does (to whole microseconds, then to whole ticks)."""
    return int(int(1_000_000 * (size_bytes / rate_bytes_per_s)) * tick_in_usec)


def red_idle_damping(wlog: int, avpkt: int, rate_bytes_per_s: int, tick_in_usec: float) -> tuple[int, bytes]:
    """RED's Scell_log and its 256-byte idle-damping table (``TCA_RED_STAB``) as tc computes them
    (``tc_red_eval_idle_damping``): entry i is how far the average decays over ``i << Scell_log``
    idle ticks, in Wlog steps, at most 31.

    Args:
        wlog: RED's EWMA exponent; avpkt: the average packet in bytes;
        rate_bytes_per_s: the link rate in bytes/s (tc truncates ``bandwidth``'s bit/s over 8);
        tick_in_usec: psched ticks per microsecond (from ``/proc/net/psched``; 15.625 on Linux).

    Returns: (Scell_log, table); Scell_log is -1 (and the table empty) if none below 32 fits.
    """
    lw = -math.log(1.0 - 1.0 / (1 << wlog)) / red_xmit_ticks(rate_bytes_per_s, avpkt, tick_in_usec)
    maxtime = 31 / lw
    clog = next((c for c in range(32) if maxtime / (1 << c) < 512), 32)
    if clog >= 32:
        return -1, b""
    # tc stores each double in a __u8: truncation to int, then its low byte (x86), then at most 31
    table = [0] + [min(31, int((i << clog) * lw) & 0xFF) for i in range(1, 255)] + [31]
    return clog, bytes(table)


def red_max_p(probability: float) -> int:
    """RED's ``TCA_RED_MAX_P`` as tc sends it: ``probability * 2**32`` in a __u32 (truncated;
    probability 1 wraps to 0, and the kernel then derives max_P from Plog, as it does for tc)."""
    return int(probability * 2 ** 32) & 0xFFFFFFFF


def red_tc_probability(pmax: float) -> float:
    """The ``probability`` to give Linux RED so that its marking rate at Kmax is ``pmax``.

    Linux RED (net/sched/sch_red.c, include/net/red.h) does not mark each packet with the
    linear probability p: like RED's paper (Floyd and Jacobson 1993, section 7) it spaces
    marks so the gap is uniform, marking once ``count x p`` passes a uniform random number.
    The gap then averages 1/(2p) + 1/2 packets, a per-packet rate of 2p / (1 + p) - nearly
    twice p for small p (measured in the VM lane with probability 0.2: 0.101, 0.170, 0.235,
    0.298 against a line of 0.061, 0.100, 0.140, 0.180). Giving ``P' = pmax / (2 - pmax)``
    makes the rate exactly ``pmax`` at Kmax; inside the region the rate 2P'x / (1 + P'x)
    (x = (q - Kmin)/(Kmax - Kmin)) stays above the line by at most
    :func:`red_line_deviation` (0.005 for Pmax 0.2, 0.036 for 0.5, 0.17 for 1).
    """
    return pmax / (2.0 - pmax)


def red_line_deviation(pmax: float, steps: int = 1000) -> float:
    """Largest gap between Linux RED's marking rate (with :func:`red_tc_probability`) and the line."""
    p = red_tc_probability(pmax)
    return max(2 * p * x / (1 + p * x) - pmax * x for x in (i / steps for i in range(steps + 1)))
