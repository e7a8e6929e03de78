"""CPU headroom: how much of the machine's CPU was idle in every second of a round, and who used
the rest (Mininet-HiFi's second fidelity indicator, Handigol et al., CoNEXT 2012).

The emulation is only as good as the CPU it gets: a port whose dequeue timer fires late, or a
sender that cannot keep its pace, shows as a failed serialisation or rate check; no idle CPU in
a second is the cause those checks then point to. So this section is reported with every round
and warns when a second had no idle CPU; it does not fail the round by itself (the direct checks
of experiments.features.fidelity decide).
"""
from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass

from controller.datapaths.base import FORWARDING_THREAD
from experiments.context import RoundRecord
from experiments.features.base import Feature

#: Sampling period in seconds.
INTERVAL_S = 1.0
#: A second with less idle CPU than this (in cores) has no headroom.
NO_HEADROOM_CORES = 0.05
#: A second in which the hypervisor ran other guests on this machine's vCPUs for more than this
#: (in cores: /proc/stat's steal time) is reported: for that time nothing here ran, neither the
#: shapers' timers nor the senders, and the emulation's clock went on.
STOLEN_CORES = 0.05
#: A watched thread's run-queue wait (runnable but without a CPU) is kept under its name plus this.
WAIT_SUFFIX = "_runqueue_wait"
#: The kernel's clock ticks per second (the unit of /proc/stat and /proc/PID/stat times).
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative CPU times at one moment, in seconds.

    Attributes:
        t_s: monotonic time of the reading.
        total_s: all CPUs' time (every /proc/stat column but guest time).
        idle_s: idle and I/O-wait time.
        softirq_s: software-interrupt time (the kernel datapath's forwarding, qdiscs, timers).
        procs_s: per watched process (name -> user + system time), None for one that is gone.
        steal_s: time the hypervisor gave this machine's vCPUs to others (steal).
    """
    t_s: float
    total_s: float
    idle_s: float
    softirq_s: float
    procs_s: dict
    steal_s: float = 0.0


def parse_proc_stat(text: str) -> tuple[float, float, float, float]:
    """``(total_s, idle_s, softirq_s, steal_s)`` from /proc/stat's text (its aggregate ``cpu`` line).

    Raises:
        ValueError: no ``cpu`` line.
    """
    for line in text.splitlines():
        f = line.split()
        if f and f[0] == "cpu":
            v = [int(x) for x in f[1:9]] + [0] * max(0, 8 - len(f[1:9]))
            user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
            total = user + nice + system + idle + iowait + irq + softirq + steal
            return total / TICKS_PER_S, (idle + iowait) / TICKS_PER_S, softirq / TICKS_PER_S, steal / TICKS_PER_S
    raise ValueError("/proc/stat has no cpu line")


def parse_pid_stat(text: str) -> float:
    """A process's user + system time in seconds from its /proc/PID/stat text (fields 14 and 15,
    counted after the parenthesised command, which may hold spaces)."""
    rest = text.rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / TICKS_PER_S


def stat_path(pid: int | tuple[int, int] | None) -> str:
    """The /proc stat file of a process (``pid``) or of one of its threads (``(pid, tid)``)."""
    if isinstance(pid, tuple):
        return f"/proc/{pid[0]}/task/{pid[1]}/stat"
    return f"/proc/{pid}/stat"


def parse_schedstat(text: str) -> float:
    """Seconds a task waited on a run queue (runnable, no CPU for it) from its /proc/.../schedstat
    text (``on-CPU ns, run-queue wait ns, timeslices``).

    Raises:
        ValueError, IndexError: not such a text.
    """
    return int(text.split()[1]) / 1e9


def read_times(pids: dict) -> CpuTimes:
    """The machine's and ``pids``' (name -> pid, ``(pid, tid)`` for one thread, or None) CPU
    times now; for a thread also the time it waited for a CPU, as ``<name>`` +
    :data:`WAIT_SUFFIX` (None where the kernel keeps no schedstat)."""
    with open("/proc/stat") as f:
        total, idle, softirq, steal = parse_proc_stat(f.read())
    procs = {}
    for name, pid in pids.items():
        try:
            with open(stat_path(pid)) as f:
                procs[name] = parse_pid_stat(f.read())
        except (OSError, TypeError, IndexError, ValueError):
            procs[name] = None
        if isinstance(pid, tuple):
            try:
                with open(stat_path(pid).removesuffix("stat") + "schedstat") as f:
                    procs[name + WAIT_SUFFIX] = parse_schedstat(f.read())
            except (OSError, IndexError, ValueError):
                procs[name + WAIT_SUFFIX] = None
    return CpuTimes(time.monotonic(), total, idle, softirq, procs, steal)


def per_second(a: CpuTimes, b: CpuTimes) -> dict:
    """Cores used between two readings: ``idle``, ``softirq``, ``stolen`` (by the hypervisor),
    ``busy`` (neither idle nor stolen) and each process's (None where a process was not readable
    at both), over ``b.t_s - a.t_s`` seconds of wall time.

    Raises:
        ValueError: ``b`` was read before ``a``.
    """
    wall = b.t_s - a.t_s
    if wall <= 0:
        raise ValueError("readings out of order")
    stolen = b.steal_s - a.steal_s
    out = {"wall_s": wall, "idle": (b.idle_s - a.idle_s) / wall, "softirq": (b.softirq_s - a.softirq_s) / wall,
           "stolen": stolen / wall, "busy": ((b.total_s - a.total_s) - (b.idle_s - a.idle_s) - stolen) / wall}
    for name in b.procs_s:
        x, y = a.procs_s.get(name), b.procs_s.get(name)
        out[name] = (y - x) / wall if x is not None and y is not None else None
    return out


def headroom_section(seconds: list[dict], whole: dict, cores: int, others_known: dict) -> dict:
    """The round's ``fidelity.cpu`` section.

    Args:
        seconds: :func:`per_second` of each sampling interval.
        whole: :func:`per_second` over the whole round.
        cores: the machine's CPU count.
        others_known: further known users in cores over the round (e.g. the queue sampler's).

    Returns:
        ``{"cores", "idle_cores": {min, median, max}, "seconds", "seconds_without_headroom",
        "stolen_cores_per_second", "seconds_with_steal", "cores_used": {ovs-vswitchd, controller,
        runner, softirq, ..., "agents_and_others"}, "warnings"}``, and, when the readings hold
        :data:`FORWARDING_THREAD` (the userspace datapath's forwarding thread, part of
        ovs-vswitchd's share, so not in ``cores_used``), ``forwarding_thread_cores`` over the
        round, ``forwarding_thread_cores_per_second`` and, where the kernel keeps schedstat,
        ``forwarding_thread_wait_cores_per_second`` (the share of each second it was runnable but
        waited for a CPU).
    """
    idle = [s["idle"] for s in seconds] or [whole["idle"]]
    used = {k: whole.get(k) for k in ("ovs-vswitchd", "controller", "runner")}
    used["softirq"] = whole["softirq"]
    used.update(others_known)
    known = sum(v for v in used.values() if v is not None)
    used["agents_and_others"] = max(0.0, whole["busy"] - known)
    short = [i for i, s in enumerate(seconds) if s["idle"] < NO_HEADROOM_CORES]
    stolen = [s.get("stolen", 0.0) for s in seconds]
    robbed = [i for i, x in enumerate(stolen) if x > STOLEN_CORES]
    warnings = []
    if short:
        warnings.append(f"cpu: no idle CPU (below {NO_HEADROOM_CORES} cores) in {len(short)} of {len(seconds)} "
                        f"seconds of the round (first at t = {short[0] * INTERVAL_S:.0f} s): timing figures "
                        f"may be stretched; see the fidelity checks")
    if robbed:
        warnings.append(f"cpu: the hypervisor ran others on this machine's CPUs (steal above {STOLEN_CORES} "
                        f"cores, at most {max(stolen):.2f}) in {len(robbed)} of {len(seconds)} seconds of the "
                        f"round (first at t = {robbed[0] * INTERVAL_S:.0f} s): timing figures may be stretched; "
                        "see the fidelity checks")
    thread = {}
    if whole.get(FORWARDING_THREAD) is not None:
        thread = {"forwarding_thread_cores": round(whole[FORWARDING_THREAD], 4),
                  "forwarding_thread_cores_per_second": [round(s[FORWARDING_THREAD], 3)
                                                         if s.get(FORWARDING_THREAD) is not None else None
                                                         for s in seconds]}
        wait = FORWARDING_THREAD + WAIT_SUFFIX
        if whole.get(wait) is not None:
            thread["forwarding_thread_wait_cores_per_second"] = [
                round(s[wait], 3) if s.get(wait) is not None else None for s in seconds]
    return {"cores": cores, "interval_s": INTERVAL_S, "seconds": len(seconds), **thread,
            "idle_cores": {"min": min(idle), "median": statistics.median(idle), "max": max(idle)},
            "idle_cores_per_second": [round(x, 3) for x in idle],
            "seconds_without_headroom": len(short),
            "stolen_cores_per_second": [round(x, 3) for x in stolen], "seconds_with_steal": len(robbed),
            "cores_used": {k: (round(v, 4) if v is not None else None) for k, v in used.items()},
            "warnings": warnings}


class CpuMeter:
    """A thread that reads :func:`read_times` every :data:`INTERVAL_S` from :meth:`start` to
    :meth:`stop`."""

    def __init__(self, pids: dict, reader=read_times):
        self.pids, self.reader = dict(pids), reader
        self.readings: list[CpuTimes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-headroom", daemon=True)

    def _run(self):
        while not self._stop.wait(INTERVAL_S):
            self.readings.append(self.reader(self.pids))

    def start(self) -> "CpuMeter":
        """First reading, then sample in the background."""
        self.readings.append(self.reader(self.pids))
        self._thread.start()
        return self

    def stop(self) -> tuple[list[dict], dict]:
        """Stop, take a last reading; ``(per-second dicts, the whole round's)``."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(INTERVAL_S + 1)
        self.readings.append(self.reader(self.pids))
        r = self.readings
        seconds = [per_second(a, b) for a, b in zip(r, r[1:]) if b.t_s - a.t_s >= 0.5 * INTERVAL_S]
        return seconds, per_second(r[0], r[-1])


class CpuHeadroom(Feature):
    """Idle CPU per second of every round, and the data plane's, controller's and agents' shares."""
    name = "cpu"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.meter: CpuMeter | None = None

    def before_round(self, lf, rnd: RoundRecord) -> dict:
        """Start sampling the machine, the datapath's forwarding processes (Open vSwitch:
        ovs-vswitchd, and on its userspace datapath the one thread that forwards), the controller
        and this process."""
        try:
            forwarders = lf.datapath.forwarders()
        except Exception:         # no pid file: its share is reported as unknown
            forwarders = {"ovs-vswitchd": None}
        pids = {**forwarders, "controller": lf.controller.pid, "runner": os.getpid()}
        self.meter = CpuMeter(pids).start()
        return {}

    def after_round(self, lf, rnd: RoundRecord) -> dict | None:
        """The round's per-second and whole readings (cores)."""
        if self.meter is None:
            return None
        seconds, whole = self.meter.stop()
        self.meter = None
        return {"seconds": seconds, "whole": whole}

    def summarize(self, rnd: RoundRecord, summary: dict) -> None:
        """``fidelity.cpu``: see :func:`headroom_section` (the queue sampler's own CPU, which it
        reports, is counted apart from the agents)."""
        rec = rnd.features.get(self.name)
        if not rec:
            return
        sampler = (summary.get("sampler") or {}).get("cpu_fraction_of_one_core")
        summary.setdefault("fidelity", {})["cpu"] = headroom_section(
            rec["seconds"], rec["whole"], os.cpu_count() or 1, {"queue_sampler": sampler} if sampler is not None else {})

    def warnings(self, summary: dict) -> list[str]:
        """A second without idle CPU, if any."""
        return list((((summary.get("fidelity") or {}).get("cpu")) or {}).get("warnings", []))

    def report(self, summary: dict) -> str | None:
        """``cpu: idle 0.41-1.12 cores per second (median 0.83) of 2; ovs-vswitchd 0.91, softirq 0.05, ...``."""
        c = (summary.get("fidelity") or {}).get("cpu")
        if not c:
            return None
        i = c["idle_cores"]
        used = ", ".join(f"{k} {v:.2f}" for k, v in c["cores_used"].items() if v is not None)
        stolen = max(c.get("stolen_cores_per_second") or [0.0])
        robbed = f"; stolen by the hypervisor up to {stolen:.2f} cores in a second" if c.get("seconds_with_steal") else ""
        return (f"cpu: idle {i['min']:.2f}-{i['max']:.2f} cores per second (median {i['median']:.2f}) of "
                f"{c['cores']}; cores used: {used}{robbed}")
