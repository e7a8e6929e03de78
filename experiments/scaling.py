"""The scaling helper: a scenario may describe the real fabric it stands for and a scale factor s;
every rate of the real fabric is divided by s and every time multiplied by s, byte and packet
counts are kept (frames are the same 1514 bytes in both), so the dimensionless numbers that govern
congestion (the BDP in packets, K and the buffer over the BDP, RTOmin over the RTT, DCQCN's timers
over the RTT) are the real fabric's.

    scale:
      factor: 1000
      real:                                   # in the emulated sections' own keys and units
        topology: {host_rate_mbps: 10000, uplink_rate_mbps: 40000}
        links: {delay_us: 1}
        hosts: {rto_min_ms: 1}
        roce: {dcqcn: {timer_s: 55.0e-6}}

How a key scales follows from its unit: ``*_mbps`` divided by s; ``*_us``, ``*_ms``, ``*_s``
multiplied by s (rounded to the key's integer unit where the section wants an integer). A key of
another unit is refused (it does not scale: give it in its own section). The RoCE rate
controllers' ``time_scale`` (``roce.<mode>`` of each registered controller that has one) is s unless given. The derived values go into the scenario's own
sections before it is parsed, so every layer reads them as if written there; ``environment.json``
records both (``scale.real``, ``scale.emulated``).

Reference: the scaling argument of Handigol et al., "Reproducible network experiments using
container-based emulation", CoNEXT 2012, and of DCTCP's analysis (Alizadeh et al., SIGCOMM 2010).
"""
from __future__ import annotations

import copy
from typing import Any

from common.errors import ScenarioError
from traffic.ratecontrol import RATE_CONTROLLERS, has_params

#: The sections of the real fabric a scale section may describe.
SCALED_SECTIONS = ("topology", "links", "hosts", "roce")
#: Keys whose emulated value must be an integer (their sections' schema says so).
INTEGER_KEYS = {("links", "delay_us"), ("links", "jitter_us"), ("hosts", "rto_min_ms")}
#: Unit suffixes that are times (multiplied by the factor) and rates (divided by it).
TIME_SUFFIXES = ("_us", "_ms", "_s")
RATE_SUFFIXES = ("_mbps",)
#: The ``roce`` sections whose ``time_scale`` a scale factor sets: every registered rate
#: controller that declares one (each stretches its times by it).
TIME_SCALED_CONTROLLERS = tuple(m for m, c in RATE_CONTROLLERS.items() if has_params(c) and "time_scale" in c.PARAMS)
#: Largest factor accepted (a 400 Gbit/s link at 1 Mbit/s is 4e5).
MAX_FACTOR = 1e6


def scale_value(key: str, value: float, factor: float) -> float:
    """The emulated value of a real ``value`` of ``key`` at ``factor``: rates (``*_mbps``) divided
    by it, times (``*_us``, ``*_ms``, ``*_s``) multiplied by it.

    Raises:
        ValueError: ``key`` is neither a rate nor a time.
    """
    if key.endswith(RATE_SUFFIXES):
        return value / factor
    if key.endswith(TIME_SUFFIXES):
        return value * factor
    raise ValueError(f"{key}: only rates (_mbps) and times (_us, _ms, _s) scale")


def _derive(section: str, real: Any, own: Any, factor: float, path: str, out: dict, record: dict) -> None:
    """Fill ``out`` (the emulated section) from ``real`` (the real fabric's), refusing a key both give."""
    if not isinstance(real, dict):
        raise ScenarioError(path, f"expected a mapping, got {type(real).__name__}")
    own = own if isinstance(own, dict) else {}
    for key, value in real.items():
        where = f"{path}.{key}"
        if isinstance(value, dict):
            sub_out = out.setdefault(key, {})
            if not isinstance(sub_out, dict):
                raise ScenarioError(where, f"{section}.{key} is not a section")
            _derive(section, value, own.get(key), factor, where, sub_out, record.setdefault(key, {}))
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ScenarioError(where, f"expected a number >= 0, got {value!r}")
        if key in own:
            raise ScenarioError(where, f"both {where} and {where.replace('scale.real.', '')} are given: the scale "
                                       "section derives the emulated value; give one of them")
        try:
            v = scale_value(key, float(value), factor)
        except ValueError as e:
            raise ScenarioError(where, f"{e}: give it in its own section") from None
        if (section, key) in INTEGER_KEYS:
            v = int(round(v))
        out[key] = v
        record[key] = {"real": value, "emulated": v}


def apply_scale(data: dict) -> dict:
    """A scenario file's data with its ``scale`` section applied: the real fabric's rates and times
    scaled into the emulated sections (returned as a new mapping; ``data`` is not changed), and
    the ``time_scale`` of every registered rate controller's section
    (:data:`TIME_SCALED_CONTROLLERS`) set to the factor unless given. Data without ``scale`` is returned as is.

    Raises:
        ScenarioError: a bad factor, an unknown section, a key that does not scale, or a key given
            both in ``scale.real`` and in its own section (the message names the key).
    """
    scale = data.get("scale")
    if scale is None:
        return data
    if not isinstance(scale, dict):
        raise ScenarioError("scale", f"expected a mapping, got {type(scale).__name__}")
    if "emulated" in scale:
        _check_record(data, scale)
        return data
    unknown = set(scale) - {"factor", "real"}
    if unknown:
        raise ScenarioError(f"scale.{sorted(unknown)[0]}", "unknown key (known: factor, real)")
    factor = scale.get("factor")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 1 <= factor <= MAX_FACTOR:
        raise ScenarioError("scale.factor", f"expected a number from 1 to {MAX_FACTOR:g}, got {factor!r}")
    real = scale.get("real") or {}
    if not isinstance(real, dict):
        raise ScenarioError("scale.real", f"expected a mapping, got {type(real).__name__}")
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items() if k != "scale"}
    emulated: dict = {}
    for section, values in real.items():
        if section not in SCALED_SECTIONS:
            raise ScenarioError(f"scale.real.{section}", f"unknown section (known: {', '.join(SCALED_SECTIONS)})")
        target = copy.deepcopy(out.get(section) or {})
        _derive(section, values, data.get(section), float(factor), f"scale.real.{section}", target,
                emulated.setdefault(section, {}))
        out[section] = target
    roce = copy.deepcopy(out.get("roce") or {})
    for name in TIME_SCALED_CONTROLLERS:
        section = roce.setdefault(name, {})
        if not isinstance(section, dict):
            raise ScenarioError(f"roce.{name}", f"expected a mapping, got {type(section).__name__}")
        if "time_scale" not in section:
            section["time_scale"] = float(factor)
            emulated.setdefault("roce", {}).setdefault(name, {})["time_scale"] = {"real": 1,
                                                                                 "emulated": float(factor)}
    out["roce"] = roce
    out["scale"] = {"factor": factor, "real": real, "emulated": emulated}
    return out


def _check_record(data: dict, scale: dict) -> None:
    """A scale section with ``emulated`` is a results folder's record (scenario.yaml): its sections
    already hold the emulated values; check that they do."""
    def walk(rec: dict, sec: Any, path: str):
        for key, v in rec.items():
            here = sec.get(key) if isinstance(sec, dict) else None
            if isinstance(v, dict) and "emulated" not in v:
                walk(v, here, f"{path}.{key}")
            elif not isinstance(v, dict) or here != v["emulated"]:
                raise ScenarioError(f"{path}.{key}", f"the scale record says {v!r}, the section holds {here!r}")
    rec = scale.get("emulated")
    if not isinstance(rec, dict):
        raise ScenarioError("scale.emulated", f"expected a mapping, got {type(rec).__name__}")
    for section, values in rec.items():
        if not isinstance(values, dict):
            raise ScenarioError(f"scale.emulated.{section}", "expected a mapping")
        walk(values, data.get(section), section)

