"""Run the selected tests N times on this machine and print pass counts and their measured figures.

    python scripts/test_repeat.py -n 10 -k 'pfc and watchdog' [--no-load] [--vm] [--out DIR]
    sudo make test-repeat N=10 K='pfc and watchdog' [LOAD=0] [VM=1]

What a calibration of a measured bound needs (tests/README.md): the same tests,
run after run, with a second CPU-heavy process beside them (CI's machine is
loaded; ``--no-load`` leaves it out), each run's figures (what the tests record
with the ``figure`` fixture, read back from each run's JUnit XML), and at the
end, per test, how many runs passed, and per figure its minimum, median and
maximum over the runs, with the prediction bounds a single further run of a
correct build falls outside about once in 1000 per side (:func:`prediction_bounds`). ``--vm`` runs each repetition in the stock-kernel VM
(``vm/run.py test``; the load process then runs on the host, beside qemu).

Everything goes to DIR (default ``results/test-repeat-<time>``): each run's
log and JUnit XML, and ``summary.json``. Exits 0 when every run passed, 1 when
some failed, 2 on bad arguments. The load process is ours by pid and is ended
in every exit path.
"""
from __future__ import annotations

import argparse
import json
import math
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from test_times import read_report  # noqa: E402  (a sibling script: one JUnit reader for both)
from xml.etree.ElementTree import ParseError  # noqa: E402
#: One busy loop: a second CPU-heavy process, as on CI's loaded machine.
LOAD_CODE = "while True:\n    pass\n"


def read_run(path: Path) -> dict:
    """One run's JUnit XML -> ``{test id: {"outcome", "s", "figures": {name: value}}}``
    (:func:`test_times.read_report`'s tests).

    Raises:
        OSError, xml.etree.ElementTree.ParseError: the report cannot be read.
    """
    return read_report(path)["tests"]


#: The chance, per side, that one more run of a correct build lands beyond a suggested bound.
BOUND_TAIL = 0.001


def prediction_bounds(values: list[float], tail: float = BOUND_TAIL) -> tuple[float, float] | None:
    """The two-sided prediction interval for one more run: ``mean -+ t(1 - tail, n - 1) * s * sqrt(1 + 1/n)``.

    Under a normal model of the figure, a new run falls below the first value (or above the second)
    with probability ``tail`` each: with ``tail`` 0.001 a bound set there fails a correct build about
    once in 1000 runs. n = 10 gives t = 4.30, so the interval is about +-4.5 sample standard deviations.

    Args:
        values: the figure over n >= 3 runs (any unit; the bounds are in the same unit).
        tail: the probability per side, in (0, 0.5).
    Returns:
        ``(low, high)``, or None with fewer than 3 values.
    Source: the prediction interval for a single future observation of a normal sample (e.g.
    Hahn & Meeker, Statistical Intervals, 1991, section 4.6).
    """
    if len(values) < 3:
        return None
    from scipy import stats
    n = len(values)
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    half = float(stats.t.ppf(1 - tail, n - 1)) * sd * math.sqrt(1 + 1 / n)
    return mean - half, mean + half


def summarize(runs: list[dict]) -> dict:
    """Runs (each :func:`read_run`'s dict) -> per test: outcomes counted and, per figure,
    n/min/median/max/values and, from 3 runs on, the :func:`prediction_bounds` (``bound_low``,
    ``bound_high``)."""
    tests = {}
    for run in runs:
        for tid, r in run.items():
            t = tests.setdefault(tid, {"passed": 0, "failed": 0, "error": 0, "skipped": 0, "s": [], "figures": {}})
            t[r["outcome"]] += 1
            t["s"].append(r["s"])
            for name, v in r["figures"].items():
                t["figures"].setdefault(name, []).append(v)
    for t in tests.values():
        t["s"] = {"min": min(t["s"]), "median": statistics.median(t["s"]), "max": max(t["s"])}
        t["figures"] = {k: {"n": len(v), "min": min(v), "median": statistics.median(v), "max": max(v), "values": v}
                        for k, v in t["figures"].items()}
        for f in t["figures"].values():
            pb = prediction_bounds(f["values"])
            f["bound_low"], f["bound_high"] = pb if pb else (None, None)
    return tests


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def start_load() -> subprocess.Popen:
    """The load process (its own session, so a terminal's Ctrl-C reaches us first)."""
    return subprocess.Popen([sys.executable, "-c", LOAD_CODE], start_new_session=True)


def stop_load(p: subprocess.Popen | None) -> None:
    """End the load process we started (by its pid)."""
    if p is not None and p.poll() is None:
        p.kill()
        p.wait()


def one_run(i: int, args, out: Path) -> tuple[int, Path | None]:
    """Run the selection once; returns (exit status, JUnit XML path or None)."""
    log = out / f"run-{i:02d}.log"
    xml = out / f"run-{i:02d}.xml"
    if args.vm:
        cmd = [sys.executable, str(ROOT / "vm" / "run.py"), "test", "--quiet", "--results", str(out / f"vm-{i:02d}"),
               "--junitxml", str(xml), "--", "-k", args.k] + args.pytest_args
    else:
        cmd = [sys.executable, "-m", "pytest", *args.paths, "-k", args.k, "-p", "no:cacheprovider", "-v", "-s",
               f"--junitxml={xml}"] + args.pytest_args
    with open(log, "w") as fh:
        code = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT).returncode
    return code, (xml if xml.exists() else None)


def main(argv=None) -> int:
    """CLI entry point; see the module docstring."""
    ap = argparse.ArgumentParser(description="run selected tests N times; pass counts and figures")
    ap.add_argument("-n", type=int, default=10, help="runs (default 10)")
    ap.add_argument("-k", required=True, help="pytest -k expression selecting the tests")
    ap.add_argument("--paths", nargs="*", default=["tests"], help="test paths (default: tests)")
    ap.add_argument("--no-load", action="store_true", help="no CPU-heavy process beside the runs")
    ap.add_argument("--vm", action="store_true", help="run each repetition in the stock-kernel VM")
    ap.add_argument("--out", type=Path, default=None, help="folder for logs, reports and summary.json")
    ap.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments")
    args = ap.parse_args(argv)
    if args.n < 1:
        print(f"test-repeat: -n (make's N) must be at least 1, not {args.n}", file=sys.stderr)
        return 2
    if not args.k.strip():
        print("test-repeat: -k (make's K) must select tests, e.g. K='pfc and watchdog'", file=sys.stderr)
        return 2
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or ROOT / "results" / f"test-repeat-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    load = None
    runs, codes = [], []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        if not args.no_load:
            load = start_load()
        for i in range(1, args.n + 1):
            t0 = time.monotonic()
            code, xml = one_run(i, args, out)
            codes.append(code)
            run = {}
            if xml is not None:
                try:
                    run = read_run(xml)
                except (OSError, ParseError) as e:
                    print(f"test-repeat: run {i}: unreadable report {xml}: {e}", file=sys.stderr)
            runs.append(run)
            n = {o: sum(r["outcome"] == o for r in run.values()) for o in ("passed", "failed", "error", "skipped")}
            figs = "; ".join(f"{tid.split('::')[-1]} " + ", ".join(f"{k}={_fmt(v)}" for k, v in r["figures"].items())
                             for tid, r in run.items() if r["figures"])
            print(f"run {i}/{args.n}: exit {code}, {n['passed']} passed, {n['failed'] + n['error']} failed, "
                  f"{n['skipped']} skipped in {time.monotonic() - t0:.0f} s{'; ' + figs if figs else ''}", flush=True)
    finally:
        stop_load(load)
    tests = summarize(runs)
    print(f"\n{args.n} runs of -k {args.k!r}{' in the VM' if args.vm else ''}, "
          f"{'with' if not args.no_load else 'without'} a CPU-heavy process beside them:")
    for tid, t in sorted(tests.items()):
        print(f"{tid}: passed {t['passed']} of {args.n}, failed {t['failed'] + t['error']}, skipped {t['skipped']}; "
              f"{_fmt(t['s']['min'])}/{_fmt(t['s']['median'])}/{_fmt(t['s']['max'])} s")
        for name, f in sorted(t["figures"].items()):
            bounds = ""
            if f["bound_low"] is not None:
                bounds = (f"; 1-in-{round(1 / BOUND_TAIL)} prediction bounds {_fmt(f['bound_low'])} .. "
                          f"{_fmt(f['bound_high'])}")
            print(f"    {name}: n {f['n']}, min {_fmt(f['min'])}, median {_fmt(f['median'])}, max {_fmt(f['max'])}"
                  f"{bounds}")
    (out / "summary.json").write_text(json.dumps({"k": args.k, "runs": args.n, "vm": args.vm, "load": not args.no_load,
                                                  "exit_codes": codes, "tests": tests}, indent=1))
    print(f"test-repeat: logs, reports and summary.json in {out}")
    return 0 if codes and all(c == 0 for c in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
