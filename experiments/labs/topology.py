"""Lab 2, topology: a k=4 Fat-Tree (1:1) against a 3:1 Spine-Leaf under the same permutation,
8 TCP flows per host pair and 1, and the ECMP hash collisions one flow per pair suffers
(experiments/scenarios/compare-topologies.yaml, run by ``fabriclab compare``;
labs/02-topology/README.md).

The lab's run is a comparison: its folder holds comparison.json (one row per fabric and traffic
mix) and every run's own folder (fabric_map.json, ports.csv). The expected answers come from
the student's own comparison; the notes give the models beside them: the oversubscription
ratio (a host gets min(1, 1/ratio) of its link across the oversubscribed layer), the fluid
model's "ideal" (every flow split evenly over its equal-cost paths) and "hash ECMP" (every flow
pinned to one path) per-host rates, and the expected share of uplinks a hash leaves unused,
(1 - 1/m)^n for n flows over m paths.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from experiments.labs.base import Figures, Lab, Question, around

RUN = "topology-comparison"

#: a port "carries no data" below this share of its link's rate (a reverse path's ACKs stay under it)
IDLE_SHARE = 0.1


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def permutation_rows(cmp_dir: Path) -> dict[tuple[str, int], dict]:
    """The comparison's time-limited permutation runs by ``(fabric kind, flows per host pair)``
    (e.g. ``("fattree", 1)``): its comparison.json row plus ``map`` (the run's fabric_map.json)
    and ``dir`` (the run's folder). The first row of each pair wins."""
    out: dict[tuple[str, int], dict] = {}
    for row in json.loads((cmp_dir / "comparison.json").read_text())["runs"]:
        if row.get("pattern") != "permutation" or row.get("flows_kind") != "time-limited" or not row.get("hosts"):
            continue
        d = cmp_dir / row["run"]
        fmap = json.loads((d / "fabric_map.json").read_text())
        out.setdefault((fmap["kind"], row["flows"] // row["hosts"]), dict(row, map=fmap, dir=d))
    return out


def bisection_mbps(fabric_map: dict) -> float:
    """A two-tier fabric's bisection bandwidth in Mbit/s: the capacity across a cut between half
    its leaves and the other half, which is half the capacity of every leaf-to-spine link (each
    half's uplinks; every crossing flow climbs one half's and descends the other's)."""
    switches = {s["name"] for s in fabric_map["switches"]}
    return sum(l["rate_mbps"] for l in fabric_map["links"] if l["a"] in switches and l["b"] in switches) / 2


def edge_uplinks(fabric_map: dict) -> list[dict]:
    """The lowest switch layer's ports toward the layer above (a Fat-Tree's edge-to-aggregation
    uplinks): the fabric map's port dicts, each with ``switch`` added."""
    layers = fabric_map["layers"]                   # top first, "host" last
    layer_of = {s["name"]: s["layer"] for s in fabric_map["switches"]}
    return [dict(p, switch=s["name"]) for s in fabric_map["switches"] if s["layer"] == layers[-2]
            for p in s["ports"] if layer_of.get(p["peer"]) == layers[-3]]


def idle_uplinks(run_dir: Path, fabric_map: dict) -> tuple[int, int, int]:
    """``(idle, uplinks, hosts per edge switch)`` of a run: how many of the lowest layer's uplinks
    (:func:`edge_uplinks`) sent less than IDLE_SHARE of their rate (ports.csv's ``mean_tx_mbps``).

    Raises:
        KeyError: an uplink has no row in ports.csv (it was not sampled).
    """
    ports = {(r["switch"], r["peer"]): r for r in _rows(run_dir / "ports.csv")}
    ups = edge_uplinks(fabric_map)
    idle = sum(float(ports[(p["switch"], p["peer"])]["mean_tx_mbps"]) < IDLE_SHARE * float(p["rate_mbps"])
               for p in ups)
    edges = {p["switch"] for p in ups}
    hosts_per_edge = sum(h["switch"] in edges for h in fabric_map["hosts"]) // max(len(edges), 1)
    return idle, len(ups), hosts_per_edge


def _models(row: dict) -> str:
    hashed = row.get("hash_ecmp_model_per_host_mbps")
    return (f"the fluid model gives {row['model_per_host_mbps']:.2f} Mbit/s ideal (every flow split over its "
            "equal-cost paths)" + (f", {hashed:.2f} with hash ECMP (each flow on one path)" if hashed else ""))


class Topology(Lab):
    """Lab 2: Fat-Tree against Spine-Leaf, oversubscription, ECMP hash collisions."""
    NUMBER = 2
    SLUG = "topology"
    TITLE = "topology: Fat-Tree against Spine-Leaf, oversubscription and ECMP collisions"
    RUNS = {RUN: "experiments/scenarios/compare-topologies.yaml"}
    QUESTIONS = (
        Question("q1", "Spine-Leaf: a leaf's oversubscription ratio (downlink capacity / uplink capacity)", "ratio",
                 "number", RUN),
        Question("q2", "Spine-Leaf: bisection bandwidth (half the leaves against the other half)", "Mbit/s",
                 "number", RUN),
        Question("q3", "Spine-Leaf, permutation with 8 flows per pair: throughput per host", "Mbit/s", "number",
                 RUN),
        Question("q4", "Fat-Tree, permutation with 8 flows per pair: throughput per host", "Mbit/s", "number", RUN),
        Question("q5", "permutation with 8 flows per pair: Spine-Leaf's per-host throughput over Fat-Tree's",
                 "ratio", "number", RUN),
        Question("q6", "Fat-Tree, permutation with 1 flow per pair: throughput per host", "Mbit/s", "number", RUN),
        Question("q7", "Fat-Tree, permutation with 1 flow per pair: how many edge-to-aggregation uplinks carried "
                       "no data (under a tenth of their rate)?", "links", "number", RUN),
    )

    def command(self, name: str) -> str:
        """The lab's run is a comparison: ``sudo fabriclab compare FILE --results DIR``."""
        return f"sudo fabriclab compare {self.RUNS[name]} --results DIR"

    def reseed(self, name: str, data: dict, seed: int) -> dict:
        """A comparison's ``seed``-th repetition: the seed goes into its ``base`` (every run's
        scenario; it fixes the permutation's pairs and every flow's source port, so the hash's
        choices)."""
        return dict(data, base=dict(data.get("base") or {}, seed=seed))

    def measure(self, runs: dict[str, Path]) -> Figures:
        """Lab 2's figures from the comparison's permutation runs (comparison.json, and each run's
        fabric_map.json and ports.csv); a question whose run the comparison lacks is missing."""
        fig = Figures()
        rows = permutation_rows(runs[RUN])
        sl8, ft8, ft1 = rows.get(("spineleaf", 8)), rows.get(("fattree", 8)), rows.get(("fattree", 1))
        need = {"q1": sl8, "q2": sl8, "q3": sl8, "q4": ft8, "q5": sl8 and ft8, "q6": ft1, "q7": ft1}
        for qid, row in need.items():
            if not row:
                fig.missing[qid] = (f"your comparison has no time-limited permutation run it needs (a Spine-Leaf and a "
                                    f"Fat-Tree with 8 flows per pair, a Fat-Tree with 1): {self.command(RUN)}")
        if sl8:
            over = float(sl8["oversubscription"])
            fig.values["q1"] = over
            fig.bands["q1"] = around(over, 0.0, 0.05, "your Spine-Leaf's oversubscription (comparison.json)")
            leaf = next(s for s in sl8["map"]["switches"] if s["layer"] == sl8["map"]["layers"][-2])
            down = [p["rate_mbps"] for p in leaf["ports"] if p["peer"] in {h["name"] for h in sl8["map"]["hosts"]}]
            up = [p["rate_mbps"] for p in leaf["ports"] if p["peer"] not in {h["name"] for h in sl8["map"]["hosts"]}]
            fig.notes["q1"] = (f"model: {len(down)} x {down[0]:g} Mbit/s down over {len(up)} x {up[0]:g} Mbit/s up = "
                               f"{sum(down) / sum(up):.3g}")
            bis = bisection_mbps(sl8["map"])
            hosts = len(sl8["map"]["hosts"])
            fig.values["q2"] = bis
            fig.bands["q2"] = around(bis, 0.0, 0.05, "half the capacity of your Spine-Leaf's leaf-to-spine links "
                                                     "(its fabric_map.json)")
            fig.notes["q2"] = (f"full bisection would be {hosts} hosts / 2 x {down[0]:g} Mbit/s = "
                               f"{hosts / 2 * down[0]:g} Mbit/s; a {over:g}:1 fabric has 1/{over:g} of it")
            per = float(sl8["per_host_mbps"])
            fig.values["q3"] = per
            fig.bands["q3"] = around(per, 0.05, 0.02, "your Spine-Leaf permutation-with-8-flows run's per-host "
                                                      "throughput +- 5%")
            fig.notes["q3"] = (f"model: 1/{over:g} of the {sl8['host_rate_mbps']:g} Mbit/s link = "
                               f"{sl8['host_rate_mbps'] / over:.2f} Mbit/s across the spines; {_models(sl8)}")
        if ft8:
            per = float(ft8["per_host_mbps"])
            fig.values["q4"] = per
            fig.bands["q4"] = around(per, 0.05, 0.02, "your Fat-Tree permutation-with-8-flows run's per-host "
                                                      "throughput +- 5%")
            fig.notes["q4"] = (f"model: 1:1, near the {ft8['host_rate_mbps']:g} Mbit/s link (TCP payload is at most "
                               f"1448/1514 of it); {_models(ft8)}")
        if sl8 and ft8:
            ratio = float(sl8["per_host_mbps"]) / float(ft8["per_host_mbps"])
            fig.values["q5"] = ratio
            fig.bands["q5"] = around(ratio, 0.05, 0.01, f"your runs: {float(sl8['per_host_mbps']):.3f} / "
                                                        f"{float(ft8['per_host_mbps']):.3f} +- 5%")
            fig.notes["q5"] = (f"model: min(1, 1/{float(sl8['oversubscription']):g}) / min(1, 1/"
                               f"{float(ft8['oversubscription'] or 1):g}) by the oversubscription ratios alone")
        if ft1:
            per = float(ft1["per_host_mbps"])
            fig.values["q6"] = per
            fig.bands["q6"] = around(per, 0.05, 0.02, "your Fat-Tree permutation-with-1-flow run's per-host "
                                                      "throughput +- 5%")
            eight = f"; with 8 flows per pair your Fat-Tree gave {float(ft8['per_host_mbps']):.2f}" if ft8 else ""
            fig.notes["q6"] = f"model: {_models(ft1)}: hash collisions cost the difference{eight}"
            idle, ups, n = idle_uplinks(ft1["dir"], ft1["map"])
            m = ups // max(len({p["switch"] for p in edge_uplinks(ft1["map"])}), 1)
            fig.values["q7"] = idle
            fig.bands["q7"] = around(idle, 0.0, 0.5, f"your run's ports.csv: {idle} of {ups} uplinks under "
                                                     f"{IDLE_SHARE:g} of their rate")
            expect = ups * (1 - 1 / m) ** n
            more = ""
            if ft8:
                idle8, _, _ = idle_uplinks(ft8["dir"], ft8["map"])
                more = (f"; with 8 flows per pair ({8 * n} flows per edge) (1 - 1/{m})^{8 * n} x {ups} = "
                        f"{ups * (1 - 1 / m) ** (8 * n):.3f}, and your run had {idle8}")
            fig.notes["q7"] = (f"model: {n} flows over {m} uplinks per edge switch leave (1 - 1/{m})^{n} = "
                               f"{(1 - 1 / m) ** n:.2f} of them unused, {expect:.1f} of {ups}{more}")
        return fig
