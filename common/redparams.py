"""The kernel RED qdisc's parameters from an ECN profile (pure maths, no kernel access).

Linux RED (net/sched/sch_red.c, include/net/red.h; Floyd and Jacobson, IEEE/ACM ToN 1993)
keeps its EWMA weight as a shift and spaces its marks; these functions choose the ``tc``
parameters that give a scenario's profile (:mod:`common.ecn`) on that qdisc. The qdisc itself is
installed by :mod:`controller.dataplane.tcqdisc`.
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
    def tc_wlog(burst):
        a = burst + 1 - kmin_bytes / avpkt
        if a < 1.0:
            return -1
        w = 0.5
        for wl in range(1, 32):
            if a <= (1 - (1 - w) ** burst) / w:
                return wl
            w /= 2
        return -1
    start = max(1, int(kmin_bytes // avpkt))
    for burst in range(start, start + 100000):
        got = tc_wlog(burst)
        if got == wlog:
            return burst
        if got > wlog:
            break
    raise ValueError(f"no RED burst gives Wlog {wlog} for Kmin {kmin_bytes} B")


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
