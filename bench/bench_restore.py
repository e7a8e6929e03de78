"""Benchmark: the cost of the check that puts each round's data plane back to the plan, on a
Fat-Tree k=4 (80 shaped switch ports, 16 host NICs, 20 switches).

    sudo .venv/bin/python bench/bench_restore.py [--runs R]

Brings the fabric up (its queues as a scenario's: 100-packet switch FIFOs, 1000-packet host
NICs) and times, per check, in wall-clock milliseconds (min / median / max over the runs): Open
vSwitch's QoS and policing columns of every switch port (one ovs-vsctl), every port's qdiscs
and classes (controller.dataplane.tcqdisc.port_trees: one qdisc dump per namespace, one class dump per
shaped port), every switch's flow tables against the controller's (ovs-ofctl diff-flows per
switch, in parallel), their fingerprints (controller.dataplane.ovsctl.ovs_flow_fingerprint, one after
the other), and the whole check as a round runs it
(experiments.features.restore.IntendedDataPlane.before_round), nothing to put back: the first
round's (every switch's tables compared line by line) and the later rounds' (only those whose
fingerprint changed).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def wall_ms(fn) -> float:
    """Wall-clock milliseconds of one call of ``fn``."""
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def main() -> int:
    """Bring a Fat-Tree k=4 up, time each part of the check, print min / median / max."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args()
    from concurrent.futures import ThreadPoolExecutor
    from controller.dataplane import ovsctl, tcqdisc
    from controller.flowtables import ofctl_line
    from experiments import probe
    from experiments.context import HOST_QUEUE_PACKETS, RoundRecord
    from experiments.fabric import LiveFabric
    from experiments.features.restore import FLOW_READERS, IntendedDataPlane, intended_flows
    from experiments.plan import build_fabric
    from experiments.scenario import validate
    from experiments.state import RunState
    sc = validate({"name": "bench-restore", "topology": {"kind": "fattree", "k": 4}, "queues": {"buffer_packets": 100},
                   "traffic": {"senders": 2}})
    fab = build_fabric(sc)
    res: dict[str, list[float]] = {"ovs_rows": [], "port_trees": [], "flow_tables": [], "flow_prints": [],
                                   "first_check": [], "whole_check": []}
    with tempfile.TemporaryDirectory(prefix="fabriclab-bench-") as tmp, RunState("bench-restore") as st:
        with LiveFabric(fab, Path(tmp), st, datapath=probe.probe()["datapath"],
                        switch_queue=lambda r: tcqdisc.PortQueue(r, buffer_packets=100),
                        host_queue=lambda r: tcqdisc.PortQueue(r, buffer_packets=HOST_QUEUE_PACKETS)) as lf:
            namespaces = {pid: [p.ifname for p in plans] for pid, plans in lf.port_plans.items()}
            switch_ports = namespaces[None]
            flows = {sw: [ofctl_line(e) for e in entries]           # as Open vSwitch's switch state renders them
                     for sw, entries in intended_flows(lf.fabric_map, sc.routing.mode).items()}
            feature = IntendedDataPlane(SimpleNamespace(sc=sc))

            def all_flows():
                with ThreadPoolExecutor(FLOW_READERS) as pool:
                    diffs = list(pool.map(lambda sw: ovsctl.ovs_flow_differences(sw, flows[sw]), flows))
                assert not any(diffs), diffs

            for i in range(a.runs):
                res["ovs_rows"].append(wall_ms(lambda: ovsctl.ovs_port_qos(switch_ports)))
                res["port_trees"].append(wall_ms(lambda: tcqdisc.port_trees(namespaces)))
                res["flow_tables"].append(wall_ms(all_flows))
                res["flow_prints"].append(wall_ms(lambda: [ovsctl.ovs_flow_fingerprint(sw) for sw in flows]))
                rnd = RoundRecord(index=i, round=None, dir=Path(tmp))
                res["first_check" if i == 0 else "whole_check"].append(wall_ms(lambda: feature.before_round(lf, rnd)))
                rec = feature.after_round(lf, rnd)
                assert not rec["restored"] and not rec["failures"], rec
    print(f"Fat-Tree k=4: {len(switch_ports)} switch ports, {sum(map(len, namespaces.values())) - len(switch_ports)} "
          f"host NICs, {len(flows)} switches; {a.runs} runs; wall ms per check, min / median / max")
    for name, v in res.items():
        if not v:
            continue
        print(f"  {name:12s} {min(v):8.1f} / {statistics.median(v):8.1f} / {max(v):8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
