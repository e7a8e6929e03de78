"""Whether the data plane, not the fabric, set a round's rate (a round's ``fidelity.forwarding``),
decided from what limited the rate rather than from a threshold on what the flows carried.

A round of flows that carried less than :data:`FORWARDING_SHARE` of what the configured links
allow (the fluid model's aggregate: the hashed-ECMP model's median under ECMP, else max-min) has
two kinds of explanation:

- the traffic could not fill the links: short flows (a handshake, slow start and one RTT of idle
  for a 4 KB response), flows that spent their life in slow start, idle or paced senders, TCP
  waiting out a timeout. Nothing in the emulation was saturated; the figures are the fabric's
  and the traffic's own, and the round passes (``limited_by``: null, with the reason);
- a resource that forwards or sends the frames was saturated while the links were not: the
  userspace datapath's one forwarding thread (Open vSwitch forwards every veth port in
  ovs-vswitchd's main thread; on a quiet 2-core machine it ran a median 0.97-0.98 of a core in
  the busy seconds while a 2x2x4 Spine-Leaf at 1000 Mbit/s carried 0.16-0.17 of its model), or
  the host's CPU (no idle core: the shapers' timers, the senders and the forwarding all wait).
  The round fails naming that resource and the measured share of the seconds in which it was
  saturated.

The evidence is the CPU headroom feature's per-second readings (experiments.features.cpu): the
forwarding thread's cores and the machine's idle cores in each second of the round. A resource
counts as the limit when it was saturated in at least half of the seconds the flows' throughput
window spans (at least :data:`MIN_SECONDS`), so one noisy second neither raises nor hides the verdict; the
record says how many seconds were saturated against how many were needed, and the median
reading, so a reader sees how close it was. A round without flows against a model (a
collective's, a RoCE round's own figures) or without CPU readings is ``checked``: false with the
reason, never a silent pass.
"""
from __future__ import annotations

import math
import statistics

from experiments.context import RoundRecord
from experiments.features.base import Feature
from experiments.features.cpu import NO_HEADROOM_CORES

#: A round whose flows carried at least this share of the fluid model's aggregate was not limited
#: by anything but the fabric.
FORWARDING_SHARE = 0.9
#: The forwarding thread had work for most of a second when it ran, or was runnable and waited for
#: a CPU, for at least this share of it. Measured on a quiet 2-core machine (``sudo .venv/bin/python
#: scripts/fidelity_set.py --results DIR``, 2026-12-06; per-second readings in
#: ``fidelity.cpu.forwarding_thread_cores_per_second`` and ``..._wait_cores_per_second``): flat out,
#: running and waiting add up to 0.99-1.01 in a second (every long-flow and permutation round
#: reached it); the rounds of short responses (2 x 4 KB, 16 x 4 KB, a k=8 Fat-Tree's 2 x 20 KB)
#: read at most 0.36, and 4 x 2 MB at 10 Mbit/s at most 0.62. Seconds the thread is busy only in
#: part (the flows start or end in them) fall between.
SATURATED_CORES = 0.8
#: In the seconds the forwarding thread had work, a median wait for a CPU of at least this share
#: of a second, while the machine had less than :data:`IDLE_BLAME_CORES` idle, means other work
#: took its core (the host's CPU is the limit), not its own speed.
WAIT_BLAME_CORES = 0.2
#: A thread that waited while the machine still had this many cores idle (median over the seconds
#: it had work) waited on the scheduler's wake-ups, not for CPU others held: its own speed is the
#: limit. Measured (``scripts/fidelity_set.py``, 2026-12-06): beside a busy loop the busy seconds'
#: idle medians were 0.00-0.06 cores (waits 0.40-0.58); on a quiet machine 0.28-0.79 (waits
#: 0.01-0.26, a k=4 Fat-Tree permutation at 10 Mbit/s 0.24 with 0.40 cores idle).
IDLE_BLAME_CORES = 0.15
#: Traffic that lasted fewer round trips than this (the run's measured full-frame RTT) is not
#: judged: a TCP flow spends about 2 RTTs in its handshake and request and log2(BDP / 10 segments)
#: RTTs in slow start (at most 10 for a BDP of up to 10,000 packets), so over 100 RTTs its ramp
#: costs at most about 12% of the time and a shortfall below 0.9 of the model needs another cause.
MIN_RTTS = 100
#: At least this many seconds short of CPU make a verdict, and traffic shorter than this many
#: CPU readings is not judged: in a CI rehearsal (2026-12-06) one second of an A/A study's
#: 2-second incast rounds read the forwarding thread at 0.83 of a core (0.69 running, 0.14
#: waiting) while the flows, window-limited, carried 0.5 of the model, and one second was the verdict.
MIN_SECONDS = 2
#: A resource is the limit when saturated in at least this share of the seconds spanned by the
#: flows' throughput window.
SATURATED_SHARE = 0.5


def _model_mbps(tp: dict) -> float | None:
    """The model aggregate the round is held to (the hash model's median where the routing hashes
    flows and the round has one, else the fluid model's), Mbit/s, or None."""
    hashed = (tp.get("hash_ecmp_model_aggregate_mbps") or {}).get("median")
    return hashed or tp.get("model_aggregate_mbps")


def _not_checked(reason: str) -> dict:
    return {"checked": False, "reason": reason, "forwarding_limited": False, "limited_by": None, "failures": []}


def forwarding_verdict(summary: dict, datapath: str | None) -> dict:
    """The round's ``fidelity.forwarding`` section from its summary (the ``throughput`` section of
    experiments.analysis and ``fidelity.cpu`` of experiments.features.cpu).

    Args:
        summary: the round's summary so far.
        datapath: ``"user"`` (Open vSwitch's userspace datapath: one forwarding thread) or
            ``"kernel"`` (forwarding in the kernel's softirq, on any core), or None.

    Returns: ``{"checked", "wire_aggregate_mbps", "model_aggregate_mbps", "share",
    "forwarding_limited", "limited_by"`` (``"forwarding_thread"``, ``"host_cpu"`` or None)``,
    "evidence"`` (seconds considered and needed, saturated seconds and median readings of each
    resource, the bounds)``, "verdict"`` (one line)``, "failures"}``; ``{"checked": false,
    "reason", ...}`` when the round cannot be judged.
    """
    tp = summary.get("throughput") or {}
    if tp.get("wire_aggregate_mbps") is None:
        return _not_checked("the round has no flows' throughput against a model (its workload reports its own "
                            "figures)")
    model = _model_mbps(tp)
    if not model:
        return _not_checked("the round's throughput has no model aggregate to hold it to")
    wire = tp["wire_aggregate_mbps"]
    share = wire / model
    base = {"checked": True, "wire_aggregate_mbps": wire, "model_aggregate_mbps": model, "share": round(share, 4),
            "forwarding_share": FORWARDING_SHARE}
    if share >= FORWARDING_SHARE:
        return {**base, "forwarding_limited": False, "limited_by": None, "evidence": None, "failures": [],
                "verdict": f"the flows carried {share:.2f} of the model: the fabric set the rate"}
    cpu = (summary.get("fidelity") or {}).get("cpu")
    if not cpu or not cpu.get("idle_cores_per_second"):
        return {**base, **_not_checked(f"the flows carried {share:.2f} of the model, but the round has no "
                                       "per-second CPU readings to tell what limited them")}
    interval = cpu.get("interval_s") or 1.0
    window = tp.get("window_s") or [0.0, 0.0]
    # the seconds the traffic was there: its throughput window, or its longest flow's life when
    # longer (a window of "all flows running" can be short against an incast's whole transfer)
    span_s = max(0.0, window[1] - window[0], (summary.get("flows") or {}).get("fct_max_s") or 0.0)
    scale = summary.get("scale") or {}
    rtt_s = scale.get("measured_rtt_full_frame_s") or scale.get("measured_rtt_s")
    if rtt_s and span_s < MIN_RTTS * rtt_s:
        return {**base, **_not_checked(
            f"the flows carried {share:.2f} of the model over {span_s:.3f} s, {span_s / rtt_s:.0f} round trips of "
            f"{1000 * rtt_s:.1f} ms (fewer than {MIN_RTTS}): handshakes and slow start weigh too much in flows that "
            "short to tell a saturated data plane from flows that could not fill a link")}
    if span_s < MIN_SECONDS * interval:
        return {**base, **_not_checked(
            f"the flows carried {share:.2f} of the model in {1000 * span_s:.0f} ms, less than {MIN_SECONDS} "
            f"CPU readings of {interval:g} s: too short to tell a saturated data plane from flows that could not fill a link (a handshake, "
            "slow start, an RTT of idle)")}
    idle = cpu["idle_cores_per_second"]
    n = len(idle)
    needed = min(n, max(MIN_SECONDS, math.ceil(SATURATED_SHARE * span_s / interval)))

    def per_second(key: str) -> list[float | None]:
        return ((cpu.get(key) or []) + [None] * n)[:n]
    run, wait = per_second("forwarding_thread_cores_per_second"), per_second("forwarding_thread_wait_cores_per_second")
    has_thread = any(x is not None for x in run)
    # the forwarding thread had work for most of a second: it ran, or it was runnable and waited
    busy = [r is not None and r + (w or 0.0) >= SATURATED_CORES for r, w in zip(run, wait)]
    ran = [r is not None and r >= SATURATED_CORES for r in run]
    dry = [x < NO_HEADROOM_CORES for x in idle]
    short = sum(a or b for a, b in zip(busy, dry))           # seconds the emulation was short of CPU
    thread = [r for r in run if r is not None]
    waits = [w for w in wait if w is not None]
    evidence = {"seconds": n, "span_s": round(span_s, 3), "seconds_needed": needed,
                "saturated_cores": SATURATED_CORES, "saturated_share": SATURATED_SHARE,
                "seconds_short_of_cpu": short,
                "forwarding_thread_busy_seconds": sum(busy) if has_thread else None,
                "forwarding_thread_saturated_seconds": sum(ran) if has_thread else None,
                "forwarding_thread_cores_max": max(thread) if thread else None,
                "forwarding_thread_cores_median": statistics.median(thread) if thread else None,
                "forwarding_thread_wait_cores_median": statistics.median(waits) if waits else None,
                "no_idle_cpu_seconds": sum(dry), "no_idle_below_cores": NO_HEADROOM_CORES,
                "idle_cores_min": min(idle), "idle_cores_median": statistics.median(idle)}
    carried = (f"the flows carried {wire:.1f} Mbit/s on the wire, {share:.2f} of the {model:.1f} Mbit/s the "
               "configured links allow")
    idle_text = f"idle CPU per second: min {min(idle):.2f}, median {statistics.median(idle):.2f} cores"
    used = {k: v for k, v in (cpu.get("cores_used") or {}).items() if v is not None}
    top = ", ".join(f"{k} {v:.2f}" for k, v in sorted(used.items(), key=lambda kv: -kv[1])[:3])
    if short >= needed and has_thread and sum(busy) >= needed:
        busy_run = [r for r, b in zip(run, busy) if b]
        busy_wait = [w or 0.0 for w, b in zip(wait, busy) if b]
        med_run, med_wait = statistics.median(busy_run), statistics.median(busy_wait)
        med_idle = statistics.median([x for x, b in zip(idle, busy) if b])
        evidence["busy_seconds_idle_cores_median"] = med_idle
        if med_wait < WAIT_BLAME_CORES or med_idle >= IDLE_BLAME_CORES:
            line = (f"forwarding-limited: {carried}, while Open vSwitch's forwarding thread was saturated (at least "
                    f"{SATURATED_CORES} of a core running or waiting for one in {sum(busy)} of {n} seconds, "
                    f"{needed} needed; in those seconds median {med_run:.2f} running, {med_wait:.2f} waiting, "
                    f"{med_idle:.2f} cores idle; {idle_text}): the data "
                    "plane, not the fabric, set the rate; lower the link rates or the load (or scale the scenario: "
                    "scale.factor)")
            return {**base, "forwarding_limited": True, "limited_by": "forwarding_thread", "evidence": evidence,
                    "verdict": line, "failures": [line]}
        line = (f"CPU-limited: {carried}, while Open vSwitch's forwarding thread had frames to forward but waited for a "
                f"CPU (busy or waiting for at least {SATURATED_CORES} of a second in {sum(busy)} of {n} seconds, "
                f"{needed} needed; in those seconds median {med_run:.2f} running, {med_wait:.2f} waiting, {med_idle:.2f} cores "
                f"idle; {idle_text}; cores used over "
                f"the round: {top}): other work on this machine took its core; run less beside it or lower the load")
        return {**base, "forwarding_limited": True, "limited_by": "host_cpu", "evidence": evidence,
                "verdict": line, "failures": [line]}
    if short >= needed:
        where = "the kernel's forwarding (softirq) and " if datapath == "kernel" else ""
        line = (f"CPU-limited: {carried}, while the machine had no idle CPU (below {NO_HEADROOM_CORES} cores) in "
                f"{sum(dry)} of {n} seconds (short of CPU in {short}, {needed} needed): {where}the shapers' timers, "
                f"the senders and the forwarding waited for a core (cores used over the round: {top}); run less "
                "beside it or lower the load")
        return {**base, "forwarding_limited": True, "limited_by": "host_cpu", "evidence": evidence,
                "verdict": line, "failures": [line]}
    peak = f"at most {max(thread):.2f} of a core, " if thread else ""
    line = (f"not the data plane: {carried}, but nothing that forwards or sends was saturated (the forwarding "
            f"thread {peak}short of CPU in {short} second(s) of {needed} needed): the traffic did not fill the "
            "links (short flows, slow start, idle senders or TCP waiting out a loss)")
    return {**base, "forwarding_limited": False, "limited_by": None, "evidence": evidence, "verdict": line,
            "failures": []}


class Forwarding(Feature):
    """Every round of flows: was the data plane the limit (see the module docstring)?"""
    name = "forwarding"

    def summarize(self, rnd: RoundRecord, summary: dict) -> None:
        """``fidelity.forwarding`` (:func:`forwarding_verdict`), after the CPU headroom's section."""
        summary.setdefault("fidelity", {})["forwarding"] = forwarding_verdict(summary, self.ctx.env.get("datapath"))

    def failures(self, summary: dict) -> list[str]:
        """The verdict's failure line, when a saturated resource set the round's rate."""
        return list((((summary.get("fidelity") or {}).get("forwarding")) or {}).get("failures", []))

    def report(self, summary: dict) -> str | None:
        """``forwarding: <verdict>`` when the flows fell short of the model or it was not checked."""
        f = (summary.get("fidelity") or {}).get("forwarding")
        if not f:
            return None
        if not f.get("checked"):
            return f"forwarding: not checked ({f['reason']})"
        if f["failures"] or f["share"] >= FORWARDING_SHARE:
            return None                      # a failure prints as one; a full round needs no line
        return f"forwarding: {f['verdict']}"
