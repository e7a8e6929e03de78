"""Checking a marker against an independent reckoning of the queue (pure).

The UDP probes of :mod:`traffic.udp_probe` give, per received packet, its
send and kernel receive times on the hosts' shared clock. Through one
bottleneck FIFO drained at C bit/s, a packet that found B bytes queued waits
B x 8 / C longer than one that found the queue empty, so

    queue_seen_bytes = (owd - owd_idle) x C / 8

with owd_idle the smallest one-way delay of the flow in the run (the first
packets find an empty queue). How far this reckoning itself scatters is
measured the same way on a run that never builds a queue
(:func:`reckoning_noise_bytes`): sub-millisecond on a real CPU, several
packet times under the VM lane's emulated one. This uses only the real packets' timing, never the
marker's own estimate.
"""
from __future__ import annotations

import bisect
import math

from common.ecn import EcnProfile


def _idle_delay_ns(packets: list) -> dict:
    """Per flow (rows as :func:`queue_seen_bytes`) its smallest one-way delay in the run, in ns."""
    base: dict = {}
    for p in packets:
        base[p[0]] = min(base.get(p[0], p[3] - p[2]), p[3] - p[2])
    return base


def queue_seen_bytes(packets: list, rate_bps: float) -> list[float]:
    """Per packet (rows ``[flow, seq, t_send_ns, t_recv_ns, ecn, length]``) the backlog it found, in bytes.

    The idle delay is taken per flow (senders on other leaves cross more hops)."""
    base = _idle_delay_ns(packets)
    return [(p[3] - p[2] - base[p[0]]) * 1e-9 * rate_bps / 8 for p in packets]


def drain_share(packets: list, rate_bps: float) -> float:
    """The rate at which an overloaded port delivered ``packets`` (rows as above, one overload of
    one port), over its configured ``rate_bps``: the frames after the first, over the time from the
    first arrival to the last. The delay reckoning, and the BPF marker's virtual queue, assume the
    port drains at its rate; below it, the real queue outgrows both.

    Raises:
        ValueError: fewer than two packets."""
    if len(packets) < 2:
        raise ValueError("need at least two packets")
    t = sorted(p[3] for p in packets)
    frames = sum(p[5] for p in packets) - min(p[5] for p in packets)
    return frames * 8 / ((t[-1] - t[0]) * 1e-9) / rate_bps


def queue_ahead_bytes(packets: list, rate_bps: float) -> list[float]:
    """Per packet (rows as :func:`queue_seen_bytes`) the bytes queued ahead of it, counted rather
    than timed: in one FIFO that every recorded flow crosses, what a packet found queued is the
    packets that left before it but after it arrived. Its arrival at the port is its send time
    plus its flow's idle delay less its own service time at ``rate_bps`` (the idle delay is the
    way there, its service and the way on), and "left" is its receive time, the way on being the
    same for every packet; so with r(q) and s(q) the receive and send times::

        ahead(p) = sum of lengths of q received before p with r(q) > s(p) + idle(p) - service(p)

    A port whose dequeue stalls (a timer that fires late: the VM lane's emulated CPU drains a
    10 Mbit/s port at 0.95-0.97 of its rate) lengthens every wait behind the stall, which
    :func:`queue_seen_bytes` then reads as a longer queue; this count does not move. What still
    scatters it is the timestamps' own jitter around the arrival (measured by
    :func:`reckoning_noise_bytes`). Packets received at the same instant count in receive order."""
    base = _idle_delay_ns(packets)
    order = sorted(range(len(packets)), key=lambda i: (packets[i][3], i))
    recv = [packets[i][3] for i in order]
    cum = [0]
    for i in order:
        cum.append(cum[-1] + packets[i][5])
    out = [0.0] * len(packets)
    for pos, i in enumerate(order):
        p = packets[i]
        arrived = p[2] + base[p[0]] - p[5] * 8 / rate_bps * 1e9
        first = bisect.bisect_right(recv, arrived, 0, pos)
        out[i] = float(cum[pos] - cum[first])
    return out


def reckoning_noise_bytes(packets: list, rate_bps: float, q: float = 99) -> float:
    """The delay reckoning's own noise: the ``q``-th percentile of the backlog it computes for
    packets that crossed an idle port (a run below the port's rate), in bytes."""
    seen = sorted(queue_seen_bytes(packets, rate_bps))
    return seen[min(len(seen) - 1, int(len(seen) * q / 100))] if seen else 0.0


def step_check(packets: list, rate_bps: float, k_bytes: int, guard_bytes: float, reckon=None) -> dict:
    """Marks of a step profile against the queue each packet found, as ``reckon(packets,
    rate_bps)`` gives it (default :func:`queue_seen_bytes`; :func:`queue_ahead_bytes` counts it).

    Packets that found more than K + guard are "above", less than K - guard
    "below"; the band around K is the reckoning's own uncertainty (one
    frame's service time and scheduling jitter) and is reported as such.

    Returns counts and fractions: above, above_ce, frac_above_ce, below,
    below_ce, band, band_ce, not_ect (packets that arrived Not-ECT), and
    below_ce_queue_bytes: the reckoned backlog of each CE packet below K.
    """
    q = (reckon or queue_seen_bytes)(packets, rate_bps)
    out = {"above": 0, "above_ce": 0, "below": 0, "below_ce": 0, "band": 0, "band_ce": 0, "not_ect": 0,
           "below_ce_queue_bytes": [], "max_queue_bytes": max(q) if q else 0.0}
    for p, qb in zip(packets, q):
        ce = p[4] == 3
        out["not_ect"] += p[4] == 0
        where = "above" if qb > k_bytes + guard_bytes else "below" if qb < k_bytes - guard_bytes else "band"
        out[where] += 1
        out[f"{where}_ce"] += ce
        if where == "below" and ce:
            out["below_ce_queue_bytes"].append(round(qb))
    out["frac_above_ce"] = out["above_ce"] / out["above"] if out["above"] else float("nan")
    return out


def red_buckets(packets: list, rate_bps: float, kmin_bytes: int, kmax_bytes: int, pmax: float,
                buckets: int = 5) -> list[dict]:
    """Measured marking probability per queue-length bucket between Kmin and Kmax vs the line.

    Returns per bucket ``{lo_bytes, hi_bytes, packets, marked, measured, expected, ci95}`` where
    expected is the mean of Pmax (q - Kmin)/(Kmax - Kmin) over the bucket's packets and ci95 the
    binomial 95% half-width of the measured fraction.
    """
    line = EcnProfile("red", kmin_bytes=kmin_bytes, kmax_bytes=kmax_bytes, pmax=pmax).mark_probability
    q = queue_seen_bytes(packets, rate_bps)
    width = (kmax_bytes - kmin_bytes) / buckets
    out = []
    for b in range(buckets):
        lo, hi = kmin_bytes + b * width, kmin_bytes + (b + 1) * width
        sel = [(p, qb) for p, qb in zip(packets, q) if lo <= qb < hi]
        n = len(sel)
        marked = sum(1 for p, _ in sel if p[4] == 3)
        expected = sum(line(qb) for _, qb in sel) / n if n else float("nan")
        meas = marked / n if n else float("nan")
        ci = 1.96 * math.sqrt(max(meas * (1 - meas), 1e-9) / n) if n else float("nan")
        out.append({"lo_bytes": lo, "hi_bytes": hi, "packets": n, "marked": marked, "measured": meas,
                    "expected": expected, "ci95": ci})
    return out
