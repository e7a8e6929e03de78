"""The figures a study compares, read from a round's summary.json: one registry entry per metric.

Each :class:`Metric` has a name with its unit in it, the unit, which direction is better (or
None: no preferred direction), a title, and a function of the round's summary (the dict
summary.json holds) that returns the value, or None when the round did not measure it (a TCP
round has no CNPs, a round without PFC no pauses). Which workload wrote the summary does not
matter: each function looks for its own section. A new metric is one entry in :data:`METRICS`.
Pure: no root, no live fabric; reads dicts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional


@dataclass(frozen=True)
class Metric:
    """One figure of a round (module docstring).

    Attributes:
        name: the registry name (a study's ``metrics`` entry; study.csv's ``metric``).
        unit: its unit (study.csv's ``unit``); ``better``: "lower", "higher" or None.
        title: a few words for plots and tables.
        extract: summary dict -> float or None.
    """
    name: str
    unit: str
    better: Optional[str]
    title: str
    extract: Callable[[dict], Optional[float]]

    def value(self, summary: dict) -> Optional[float]:
        """The metric of one round's summary: a finite float, or None when not measured."""
        try:
            v = self.extract(summary)
        except (KeyError, TypeError, ZeroDivisionError):
            return None
        if v is None or isinstance(v, bool):
            return None if v is None else float(v)
        v = float(v)
        return v if v == v and abs(v) != float("inf") else None


def _get(d: dict, *path):
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _fct(q: str) -> Callable[[dict], Optional[float]]:
    """The ``q`` (median, p99) completion time: of the RoCE messages in a RoCE round (its
    ``flows`` section then times each queue pair, all its messages together), else of the flows."""
    def f(s: dict) -> Optional[float]:
        v = _get(s, "roce", "message_fct_s", q)
        return v if v is not None else _get(s, "flows", f"fct_{q}_s")
    return f


def _queue_delay_ms(q: str) -> Callable[[dict], Optional[float]]:
    def f(s: dict) -> Optional[float]:
        b, rate = _get(s, "bottleneck", f"{q}_backlog_bytes"), _get(s, "bottleneck", "rate_mbps")
        return None if b is None or not rate else b * 8 / (rate * 1e6) * 1e3
    return f


def _retransmissions(s: dict) -> Optional[float]:
    r = _get(s, "roce", "retransmitted_packets")
    if r is not None:
        return r
    per_flow = _get(s, "flows", "per_flow")
    if not per_flow:
        return None
    vals = [p.get("total_retrans") for p in per_flow]
    return None if all(v is None for v in vals) else sum(v or 0 for v in vals)


def _busbw_mbps(s: dict) -> Optional[float]:
    sizes = [r for r in _get(s, "collective", "sizes") or [] if r.get("busbw_bps")]
    return max(sizes, key=lambda r: r["size_bytes"])["busbw_bps"] / 1e6 if sizes else None


def _throughput_mbps(s: dict) -> Optional[float]:
    v = _get(s, "throughput", "aggregate_mbps")
    return v if v is not None else _get(s, "bottleneck", "mean_tx_mbps")


def _slowdown(q: str) -> Callable[[dict], Optional[float]]:
    return lambda s: _get(s, "slowdown", q)


_ALL = (
    Metric("fct_median_s", "s", "lower", "flow completion time, median", _fct("median")),
    Metric("fct_p99_s", "s", "lower", "flow completion time, p99", _fct("p99")),
    Metric("slowdown_median", "1", "lower", "FCT slowdown (FCT / ideal FCT), median", _slowdown("median")),
    Metric("slowdown_p99", "1", "lower", "FCT slowdown (FCT / ideal FCT), p99", _slowdown("p99")),
    Metric("throughput_mbps", "Mbit/s", "higher", "throughput (payload, all flows)", _throughput_mbps),
    Metric("jain_index", "1", "higher", "Jain's fairness index over flows", lambda s: _get(s, "fairness", "jain_index")),
    Metric("queue_median_packets", "packets", "lower", "bottleneck queue, median",
           lambda s: _get(s, "bottleneck", "p50_backlog_packets")),
    Metric("queue_p99_packets", "packets", "lower", "bottleneck queue, p99",
           lambda s: _get(s, "bottleneck", "p99_backlog_packets")),
    Metric("queue_delay_median_ms", "ms", "lower", "bottleneck queueing delay, median", _queue_delay_ms("p50")),
    Metric("queue_delay_p99_ms", "ms", "lower", "bottleneck queueing delay, p99", _queue_delay_ms("p99")),
    Metric("drops", "packets", "lower", "packets dropped (all switch ports)", lambda s: s.get("total_drops")),
    Metric("ecn_marks", "packets", None, "CE marks at the bottleneck", lambda s: _get(s, "ecn", "bottleneck_counters",
                                                                                      "marked")),
    Metric("pfc_pauses", "pauses", "lower", "PFC pauses", lambda s: _get(s, "pfc", "pauses")),
    Metric("pfc_paused_s", "s", "lower", "time paused by PFC (summed over paused transmitters)",
           lambda s: _get(s, "pfc", "paused_time_s")),
    Metric("retransmissions", "packets", "lower", "retransmitted segments or packets", _retransmissions),
    Metric("cnps", "packets", None, "CNPs received by RoCE senders", lambda s: _get(s, "roce", "cnps_received")),
    Metric("busbw_mbps", "Mbit/s", "higher", "collective busbw (largest size)", _busbw_mbps),
)

#: Registered metrics by name, in the order tables show them.
METRICS: dict[str, Metric] = {m.name: m for m in _ALL}


def measure(summary: dict, names=None) -> dict[str, Optional[float]]:
    """``{metric name: value or None}`` of one round's summary, for ``names`` (default all)."""
    return {n: METRICS[n].value(summary) for n in (names or METRICS)}


def one_line(values: dict, bottleneck: str | None = None) -> str:
    """A round's or a study cell's figures (:func:`measure`'s ``values``) on one line: FCT median
    and p99, throughput, the bottleneck queue, drops; a round without flows names every metric it
    measured (busbw, say), with its unit."""
    def f(m, fmt):
        x = values.get(m)
        return "-" if x is None else format(x, fmt)
    if values.get("fct_median_s") is None and values.get("throughput_mbps") is None:     # no flows
        got = [f"{m.name} {format(values[m.name], '.4g')} {m.unit}".rstrip(" 1") for m in METRICS.values()
               if values.get(m.name) is not None]
        return ", ".join(got) or "no metric measured"
    return (f"FCT med/p99 {f('fct_median_s', '.3f')}/{f('fct_p99_s', '.3f')} s, "
            f"{f('throughput_mbps', '.2f')} Mbit/s, queue med/p99 {f('queue_median_packets', '.0f')}/"
            f"{f('queue_p99_packets', '.0f')} pkt, drops {f('drops', '.0f')}, bottleneck {bottleneck}")
