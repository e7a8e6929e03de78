"""Benchmark: what the userspace datapath's transmit count costs every system call on the machine.

    sudo make bench-ovstx        (or: .venv/bin/python bench/bench_ovstx.py [--calls N] [--runs R])

controller.ovstxbpf attaches a BPF program to the return of every system call (the sys_exit raw
tracepoint) for the whole run; it counts only ovs-vswitchd's sendmmsg calls, but every process's
system calls pay for the filter. This times a system call (getppid, about the cheapest) in a
loop: without the program, with it counting another process (what every process but
ovs-vswitchd pays), and with it counting this process (what ovs-vswitchd pays per call that is
not a sendmmsg). Prints nanoseconds per call (median of the runs) and each against the bare call
measured in the same run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def ns_per_call(calls: int) -> float:
    """Wall nanoseconds per getppid() system call over ``calls`` calls."""
    f = os.getppid
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        f()
    return (time.perf_counter_ns() - t0) / calls


def main() -> int:
    """Time the three cases, interleaved run by run; print medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=300_000)
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    from controller.ovstxbpf import OvsTxCounts
    res: dict[str, list[float]] = {"bare": [], "another_process_counted": [], "this_process_counted": []}
    other = os.getppid()
    for _ in range(a.runs):
        res["bare"].append(ns_per_call(a.calls))
        with OvsTxCounts.load(other):
            res["another_process_counted"].append(ns_per_call(a.calls))
        with OvsTxCounts.load(os.getpid()):
            res["this_process_counted"].append(ns_per_call(a.calls))
    base = statistics.median(res["bare"])
    print(f"getppid() in a Python loop, {a.calls} calls x {a.runs} runs (min/median/max ns per call):")
    for name, v in res.items():
        med = statistics.median(v)
        print(f"  {name:26s} {min(v):7.1f} / {med:7.1f} / {max(v):7.1f} ns   {med / base:.3f}x bare, "
              f"+{med - base:.1f} ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
