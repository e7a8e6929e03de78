"""How late this machine's kernel timers fire (recorded with every run), and the port shaper's slack.

A port shaper (HTB) that has sent a frame arms a timer for the moment its bucket allows the next
one. If the timer fires later than the bucket covers, that line time is lost and the port sends
below its rate; a bigger bucket recovers the time but then sends the next frames closer together
than the line would. Measured on this machine kind, a bucket grown to the measured p99 lateness
(160-230 us on a busy host) lowered the bottleneck's share of gaps within 10% of a frame time from
97-98% to 94-95% in the PFC experiment with its rate share unchanged (0.99-1.00), and under qemu's
software emulation a 10 Mbit/s port still sent only 0.98 of its rate with a one-frame bucket (0.96
with the 100 us one: the emulated CPU, not the timer, is short there). So the slack stays
:data:`common.units.SHAPER_SLACK_S`; the lateness is measured and recorded beside it
(``environment.json``: ``shaper``), so a run on a machine with late timers says so, and the
fidelity checks say what it cost.
"""
from __future__ import annotations

import ctypes
import functools
import os
import threading
import time
from dataclasses import asdict, dataclass

from common.units import SHAPER_SLACK_S

#: prctl(2) option that sets the calling thread's timer slack (linux/prctl.h).
PR_SET_TIMERSLACK = 29


@dataclass(frozen=True)
class TimerLateness:
    """How late a short high-resolution sleep returned, over ``samples`` sleeps of ``request_s``.

    Attributes:
        request_s: each sleep's requested length in seconds.
        samples: number of sleeps.
        p50_s, p99_s, max_s: lateness (returned minus requested) in seconds.
        policy: the measuring thread's scheduling policy: ``fifo`` (real-time, as a timer's softirq
            is not delayed by other tasks) or ``other`` (when real-time scheduling was refused; the
            figures then include waiting for a busy CPU and overstate the timers' lateness).
    """
    request_s: float
    samples: int
    p50_s: float
    p99_s: float
    max_s: float
    policy: str

    def record(self) -> dict:
        """The figures for ``environment.json`` (seconds)."""
        return asdict(self)


def timer_lateness(samples: int = 400, request_s: float = 100e-6) -> TimerLateness:
    """Measure how late ``samples`` sleeps of ``request_s`` return, in a thread of its own running
    real-time (SCHED_FIFO priority 1, timer slack 1 ns) where allowed. Takes about
    ``samples x (request_s + lateness)``: 0.05 s on a bare machine, 0.3 s under qemu TCG.

    Raises:
        ValueError: ``samples`` < 100 or ``request_s`` not positive.
    """
    if samples < 100 or not request_s > 0:
        raise ValueError(f"need samples >= 100 and request_s > 0, got {samples}, {request_s}")
    out: dict = {}

    def measure():
        policy = "other"
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
            policy = "fifo"
        except (OSError, AttributeError):
            pass
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
        except (OSError, AttributeError):
            pass
        late = []
        for _ in range(samples):
            t = time.perf_counter()
            time.sleep(request_s)
            late.append(time.perf_counter() - t - request_s)
        late.sort()
        out["r"] = TimerLateness(request_s=request_s, samples=samples, p50_s=late[samples // 2],
                                 p99_s=late[min(samples - 1, int(samples * 0.99))], max_s=late[-1],
                                 policy=policy)

    t = threading.Thread(target=measure, name="fabriclab-timer-lateness", daemon=True)
    t.start()
    t.join()
    return out["r"]


@functools.cache
def machine_timers() -> TimerLateness:
    """This process's one measurement of :func:`timer_lateness` (cached)."""
    return timer_lateness()


def shaper_slack_s() -> float:
    """How late a port shaper's timer may fire without costing the line time, in seconds: the port
    shaper's bucket holds what the line sends in this long. :data:`common.units.SHAPER_SLACK_S`
    (100 us) on every machine (see the module docstring for why not the measured lateness)."""
    return SHAPER_SLACK_S
