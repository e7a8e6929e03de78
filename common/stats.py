"""Small statistics every layer's results share: Jain's fairness index and sample percentiles.

Pure functions of numbers (no files, no scenario, no time); experiments.analysis and
the RoCE results (experiments.workloads.roce.summary) both import them.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

#: The queue percentiles the results report (``p5``, ``p50``, ``p95``, ``p99``).
QUEUE_PERCENTILES = (5, 50, 95, 99)


def jain_index(rates: Sequence[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2) of non-negative rates, in [1/n, 1]
    (R. Jain, D. Chiu, W. Hawe, DEC-TR-301, 1984).

    Args:
        rates: n >= 1 rates in any one unit (the index has none); equal rates give 1.0, one
            non-zero rate among n gives 1/n.

    Raises:
        ValueError: an empty list, all zeros, a negative rate, or a NaN or infinite one.
    """
    xs = [float(r) for r in rates]
    if any(not np.isfinite(x) or x < 0 for x in xs):
        raise ValueError(f"Jain's index needs finite non-negative rates, got {xs}")
    s, q = sum(xs), sum(x * x for x in xs)
    if not xs or q == 0:
        raise ValueError("Jain's index needs at least one non-zero rate")
    return s * s / (len(xs) * q)


def sample_percentiles(values: Iterable[float], qs: Sequence[float] = QUEUE_PERCENTILES) -> dict[str, float] | None:
    """Percentiles of equally weighted samples: ``{"p5": .., "p50": .., ...}`` (keys ``p<q>``, ``q``
    printed with ``%g``), numpy's linear interpolation between order statistics, in the unit of
    ``values``; None when there are no samples.

    Every sample weighs the same. For a sampler at a fixed rate that is the time-weighted
    distribution up to one sample interval at each end; for an irregular sampler it over-weights
    the stretches sampled more densely.

    Raises:
        ValueError: a ``q`` outside 0-100 or a NaN sample.
    """
    a = np.asarray(list(values), dtype=float)
    if any(not 0 <= q <= 100 for q in qs):
        raise ValueError(f"percentiles are 0-100, got {list(qs)}")
    if np.isnan(a).any():
        raise ValueError("a NaN sample has no place in a percentile")
    if not a.size:
        return None
    return {f"p{q:g}": float(v) for q, v in zip(qs, np.percentile(a, list(qs)))}
