"""What the RoCE rate controllers' parameter sets share (common.dcqcn, common.timely,
common.patched_timely, common.swift): the emulation's default time scale, the scales a host link's rate implies,
overrides with a check, the range checks and the record.

Each parameter set is a frozen dataclass with a ``validate()`` that raises ValueError naming the
field; :class:`CcParams` gives it ``as_dict`` and :meth:`CcParams.finish` (overrides, then the
check); :func:`scales` turns a host link's rate into (rate_scale, time_scale), :func:`time_scale_for`
into the time scale alone."""
from __future__ import annotations

import math
from dataclasses import asdict, replace

#: The DCQCN paper's testbed links: the time scale of every controller counts from them.
TIME_SCALE_REFERENCE_RATE_BPS = 40e9
#: default time_scale = (40 Gbit/s / line rate) / TIME_SCALE_DIVISOR (common.dcqcn's docstring)
TIME_SCALE_DIVISOR = 40.0


def default_time_scale(line_rate_bps: float) -> float:
    """The emulation's default time scale for a host link of ``line_rate_bps``: (40 Gbit/s / line
    rate) / 40 (common.dcqcn's docstring; 100 at 10 Mbit/s, 10 at 100 Mbit/s). Every rate controller
    (common.dcqcn, common.timely, common.swift) stretches its times by this factor, so that every
    algorithm sees the same emulated fabric. Raises ValueError on a rate that is not positive."""
    if not line_rate_bps > 0:
        raise ValueError(f"line_rate_bps must be > 0, not {line_rate_bps}")
    return TIME_SCALE_REFERENCE_RATE_BPS / line_rate_bps / TIME_SCALE_DIVISOR


def time_scale_for(line_rate_bps: float, time_scale: float | None) -> float:
    """The time scale of a host link of ``line_rate_bps``: ``time_scale`` as given, or
    :func:`default_time_scale` when None.

    Raises:
        ValueError: ``line_rate_bps`` or ``time_scale`` not a positive finite number (named).
    """
    if not (isinstance(line_rate_bps, (int, float)) and line_rate_bps > 0 and math.isfinite(line_rate_bps)):
        raise ValueError(f"line_rate_bps must be > 0, not {line_rate_bps}")
    ts = default_time_scale(line_rate_bps) if time_scale is None else time_scale
    if not (isinstance(ts, (int, float)) and ts > 0 and math.isfinite(ts)):
        raise ValueError(f"time_scale must be > 0, not {ts}")
    return ts


def scales(line_rate_bps: float, time_scale: float | None, reference_rate_bps: float) -> tuple[float, float]:
    """``(rate_scale, time_scale)`` for a host link of ``line_rate_bps`` against an algorithm's
    reference links of ``reference_rate_bps``: rate_scale = reference / line rate (dimensionless);
    time_scale from :func:`time_scale_for`.

    Raises:
        ValueError: ``line_rate_bps`` or ``time_scale`` not a positive finite number (named).
    """
    ts = time_scale_for(line_rate_bps, time_scale)
    return reference_rate_bps / line_rate_bps, ts


def require_positive(params, names) -> None:
    """Raise ValueError naming the first of the fields ``names`` of ``params`` that is not a
    positive finite number."""
    for name in names:
        v = getattr(params, name)
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and math.isfinite(v)):
            raise ValueError(f"{name} must be a positive number, not {v!r}")


class CcParams:
    """Mixin of a rate controller's frozen parameter dataclass, which defines ``validate()``
    (raising ValueError naming the first field out of range)."""

    def finish(self, overrides: dict):
        """These parameters with ``overrides`` (field -> value) replacing any of them, checked.

        Raises:
            ValueError: a value out of range (named); TypeError: an unknown field.
        """
        p = replace(self, **overrides) if overrides else self
        p.validate()
        return p

    def as_dict(self) -> dict:
        """The parameters as recorded in results (field -> value)."""
        return asdict(self)
