"""Benchmark: the queue sampler's achieved rate and CPU per reader, against the number of ports.

    sudo make bench-sampler     (or: .venv/bin/python bench/bench_sampler.py [--runs N]
                                 [--ports 40 640] [--seconds S] [--hz 200])

For each port count it makes that many shaped veth ports (HTB at 10 Mbit/s over a 100-packet
pfifo, as a fabric's switch ports are; 640 is every switch port of a Fat-Tree k=8), then runs the
sampler process (``python -m controller.qstats``) on all of them for ``--seconds`` with each
reader: ``bpf`` (the BPF program's memory-mapped array) and ``netlink`` (one qdisc dump per
tick, the baseline, measured in the same run). Prints per reader and port count the achieved
rate and the sampler's CPU as a share of one core (min/median/max over the runs) and the CPU
ratio netlink / bpf. Targets: 200 Hz (at least 198 achieved) on 640 ports under 15% of one
core, on 40 ports under 5%. SIGTERM and SIGINT remove the ports before exiting.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def make_ports(n: int) -> list[str]:
    """``n`` veth pairs ``flsbN``/``flsbNp`` in the root namespace, the first end shaped; returns
    the names of both ends (for deletion)."""
    from controller import portsetup
    from controller.dataplane.tcqdisc import PortQueue
    names = []
    for i in range(n):
        subprocess.run(["ip", "link", "add", f"flsb{i}", "type", "veth", "peer", "name", f"flsb{i}p"], check=True)
        names += [f"flsb{i}", f"flsb{i}p"]
    subprocess.run(["ip", "link", "set", "dev", "lo", "up"], check=True)
    q = PortQueue(10, buffer_packets=100)
    portsetup.configure_ports({None: [portsetup.PortPlan(f"flsb{i}", q) for i in range(n)]})
    return names


def one_run(ports: list[str], method: str, seconds: float, hz: float) -> dict:
    """One sampler process on ``ports`` for ``seconds``; its meta (achieved_hz, cpu_fraction_of_one_core, ...)."""
    with tempfile.TemporaryDirectory(prefix="fabriclab-bench-") as tmp:
        p = subprocess.run([sys.executable, "-m", "controller.qstats", "--intfs", ",".join(ports), "--hz", str(hz),
                            "--out", f"{tmp}/q.csv", "--meta", f"{tmp}/m.json", "--duration-s", str(seconds),
                            "--method", method], cwd=ROOT, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"sampler ({method}) exited {p.returncode}: {p.stderr.strip()}")
        return json.loads(Path(f"{tmp}/m.json").read_text())


def _mmm(xs: list[float], fmt: str) -> str:
    return "/".join(format(x, fmt) for x in (min(xs), statistics.median(xs), max(xs)))


def main() -> int:
    """Run the benchmark; exit 0 (it prints, it does not judge)."""
    from controller.dataplane import hostknobs
    from experiments.live import signals_unwind
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ports", type=int, nargs="+", default=[40, 640])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--hz", type=float, default=200.0)
    args = ap.parse_args()
    with signals_unwind():
        for n in args.ports:
            names = []
            try:
                names = make_ports(n)
                ports = [f"flsb{i}" for i in range(n)]
                res = {}
                for i in range(args.runs):     # the readers alternate, so both see the same machine
                    for method in ("bpf", "netlink"):
                        m = one_run(ports, method, args.seconds, args.hz)
                        res.setdefault(method, []).append(m)
                        print(f"  {n} ports, {method}, run {i + 1}/{args.runs}: {m['achieved_hz']:.1f} Hz, "
                              f"{100 * m['cpu_fraction_of_one_core']:.1f}% of one core", flush=True)
                for method, ms in res.items():
                    print(f"{n} ports, {method}: achieved Hz min/median/max "
                          f"{_mmm([m['achieved_hz'] for m in ms], '.1f')}, CPU % of one core "
                          f"{_mmm([100 * m['cpu_fraction_of_one_core'] for m in ms], '.1f')}", flush=True)
                ratio = (statistics.median(m["cpu_fraction_of_one_core"] for m in res["netlink"])
                         / statistics.median(m["cpu_fraction_of_one_core"] for m in res["bpf"]))
                print(f"{n} ports: CPU netlink / bpf (medians) {ratio:.1f}x", flush=True)
            finally:
                hostknobs.delete_root_links(names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
