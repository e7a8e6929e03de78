"""Benchmark: how much the userspace datapath forwards, per Open vSwitch setting, in the same run.

    sudo make bench-forwarding   (or: .venv/bin/python bench/bench_forwarding.py [--runs N]
                                  [--rates 10 100] [--variants system tx-flush-50us])

A k=4 Fat-Tree (16 hosts, 20 switches) runs a permutation, 8 TCP flows per host pair, for 12 s
(2 s of warm-up left out), once per link rate and Open vSwitch setting. Per run it prints:

- the delivered goodput against the hash-ECMP fluid model's median for the same flows (the
  emulation is faithful where this is near 1; the acceptance bar at 10 Mbit/s links is 0.9);
- the switch-hop forwarding rate: every switch port's transmitted Mbit/s over the window, summed
  (the queue sampler's counters). At 100 Mbit/s links no link binds a permutation below the
  forwarding thread's ceiling, so this is the ceiling.

Variants (Open vSwitch's ``other_config`` applied for their runs only, the previous values put
back): ``system`` (the default: ``system`` ports polled by the main thread, the sampler reading a
BPF array), ``tx-flush-50us`` (``tx-flush-interval=50``: output batched for up to 50 us) and
``sampler-netlink`` (the default with the sampler dumping every qdisc by netlink each tick,
which costs CPU on the same two cores but runs no BPF program per packet). The runs of the
variants alternate, so they see the same machine; medians and the ratio of each variant to
``system`` are printed at the end. SIGTERM and SIGINT tear the fabric down.

``afxdp`` ports are not a variant: AF_XDP transmits past the egress qdisc, so a port's shaper,
FIFO, ECN marker and PFC gate never see the traffic (docs/scaling.md, "Forwarding ceiling").
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Per variant: Open vSwitch ``other_config`` and the queue sampler's reader (measurement.sampler).
VARIANTS = {"system": ({}, "auto"), "tx-flush-50us": ({"tx-flush-interval": "50"}, "auto"),
            "sampler-netlink": ({}, "netlink")}


def scenario(rate_mbps: float, sampler: str = "auto") -> dict:
    """The benchmark's scenario at ``rate_mbps`` on every link, the sampler reading by ``sampler``."""
    return {"name": f"bench-forwarding-{rate_mbps:g}", "seed": 1,
            "description": "k=4 Fat-Tree permutation, 8 flows per pair, forwarding benchmark",
            "topology": {"kind": "fattree", "k": 4, "host_rate_mbps": rate_mbps, "edge_agg_rate_mbps": rate_mbps,
                         "agg_core_rate_mbps": rate_mbps},
            "queues": {"buffer_packets": 100},
            "traffic": {"pattern": "permutation", "flows_per_pair": 8, "duration_s": 12},
            "measurement": {"sample_hz": 200, "warmup_s": 2, "sampler": sampler}}


def _ovs_get(key: str) -> str | None:
    p = subprocess.run(["ovs-vsctl", "--if-exists", "get", "Open_vSwitch", ".", f"other_config:{key}"],
                       capture_output=True, text=True)
    return p.stdout.strip().strip('"') or None


def _ovs_set(values: dict[str, str | None]) -> None:
    for k, v in values.items():
        if v is None:
            subprocess.run(["ovs-vsctl", "remove", "Open_vSwitch", ".", "other_config", k], check=True)
        else:
            subprocess.run(["ovs-vsctl", "set", "Open_vSwitch", ".", f"other_config:{k}={v}"], check=True)


def switch_hop_mbps(run_dir: Path, summary: dict) -> float:
    """Every switch port's transmitted Mbit/s over the throughput window, summed."""
    from experiments.tables import load_queue_samples
    import numpy as np
    t_a, t_b = summary["throughput"]["window_s"]
    total = 0.0
    for s in load_queue_samples(run_dir / "queues.csv", 0.0).values():
        a, b = np.interp([t_a, t_b], s["t_s"], s["tx_bytes_total"])
        total += (b - a) * 8 / (t_b - t_a) / 1e6
    return total


def one_run(rate_mbps: float, variant: str, tmp: Path) -> dict:
    """One run of the scenario under ``variant``; ``{"goodput_mbps", "over_hash_model", "switch_hop_mbps"}``."""
    conf, sampler = VARIANTS[variant]
    before = {k: _ovs_get(k) for k in conf}
    path = tmp / f"bench-forwarding-{rate_mbps:g}.yaml"
    path.write_text(yaml.safe_dump(scenario(rate_mbps, sampler)))
    res = tmp / f"{variant}-{rate_mbps:g}"
    try:
        _ovs_set(conf)
        p = subprocess.run([sys.executable, "-m", "experiments", "run", str(path), "--results", str(res), "--quiet",
                            "--accept-unfaithful"], cwd=ROOT, capture_output=True, text=True)
    finally:
        _ovs_set(before)
    if p.returncode not in (0, 3):
        raise RuntimeError(f"run exited {p.returncode}: {p.stderr.strip()[-400:]}")
    run_dir = sorted(res.iterdir())[-1]
    summary = json.loads((run_dir / "summary.json").read_text())
    tp = summary["throughput"]
    hashed = tp["hash_ecmp_model_aggregate_mbps"]["median"]
    return {"goodput_mbps": tp["aggregate_mbps"], "over_hash_model": tp["aggregate_mbps"] / hashed,
            "switch_hop_mbps": switch_hop_mbps(run_dir, summary)}


def main() -> int:
    """Run the benchmark and print per-run lines and per-variant medians with ratios."""
    from experiments.live import signals_unwind
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rates", type=float, nargs="+", default=[10.0, 100.0])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = ap.parse_args()
    out: dict = {}
    with signals_unwind(), tempfile.TemporaryDirectory(prefix="fabriclab-bench-") as tmp:
        for rate in args.rates:
            for i in range(args.runs):
                for v in args.variants:
                    r = one_run(rate, v, Path(tmp))
                    out.setdefault((rate, v), []).append(r)
                    print(f"  {rate:g} Mbit/s links, {v}, run {i + 1}/{args.runs}: goodput {r['goodput_mbps']:.1f} Mbit/s "
                          f"= {r['over_hash_model']:.2f} of the hash-ECMP model; switch-hop forwarding "
                          f"{r['switch_hop_mbps']:.0f} Mbit/s", flush=True)
        for rate in args.rates:
            base = statistics.median(r["switch_hop_mbps"] for r in out[(rate, args.variants[0])])
            for v in args.variants:
                rs = out[(rate, v)]
                ratio = [r["over_hash_model"] for r in rs]
                hop = [r["switch_hop_mbps"] for r in rs]
                print(f"{rate:g} Mbit/s links, {v}: goodput / hash-ECMP model min/median/max "
                      f"{min(ratio):.2f}/{statistics.median(ratio):.2f}/{max(ratio):.2f}; switch-hop forwarding "
                      f"{min(hop):.0f}/{statistics.median(hop):.0f}/{max(hop):.0f} Mbit/s "
                      f"({statistics.median(hop) / base:.2f}x {args.variants[0]})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
