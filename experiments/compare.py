"""Topology comparison: the same traffic on several fabrics, side by side.

``python -m experiments compare [COMPARISON.yaml] [--results DIR]`` (default:
experiments/scenarios/compare-topologies.yaml, a k=4 Fat-Tree against a 3:1
Spine-Leaf). A comparison file names fabrics and traffic mixes; every
(fabric, traffic) pair is run as an ordinary scenario (its own results folder
inside the comparison's), then comparison.json / comparison.csv and the plots
put them side by side, against the fluid model (experiments.fluid) and
against what the oversubscription ratio alone predicts.

File shape (every key checked; an unknown or bad key is an error naming it)::

    name: topology-comparison
    description: ...
    base: {<any scenario section but topology/traffic>}
    fabrics: {<label>: <scenario topology section>, ...}      # at least 1
    traffic: {<label>: <scenario traffic section>, ...}       # at least 1
"""
from __future__ import annotations

import copy
import csv
import json
import re
from pathlib import Path

from common.errors import ScenarioError
from experiments import folders, plot, report, runner
from experiments.scenario import NAME, read_yaml_file, validate

TOP_KEYS = ("name", "description", "base", "fabrics", "traffic")
DEFAULT = Path(__file__).resolve().parent / "scenarios" / "compare-topologies.yaml"


def _rekey(e: ScenarioError, fabric: str, traffic: str) -> ScenarioError:
    """Point a scenario error at the comparison file's key that caused it."""
    head, _, rest = e.key.partition(".")
    key = {"topology": f"fabrics.{fabric}", "traffic": f"traffic.{traffic}"}.get(head, f"base.{head}")
    return ScenarioError(f"{key}.{rest}" if rest else key, e.detail)


def validate_comparison(data) -> dict:
    """Check a comparison mapping; return ``{"name", "description", "runs": [(fabric, traffic, scenario)]}``.

    Raises:
        ScenarioError: naming the offending key, e.g. ``fabrics.fattree-k4.k``.
    """
    if not isinstance(data, dict):
        raise ScenarioError("<top>", "expected a mapping")
    for k in data:
        if k not in TOP_KEYS:
            raise ScenarioError(str(k), f"unknown key (known keys here: {', '.join(TOP_KEYS)})")
    for k in ("name", "fabrics", "traffic"):
        if k not in data:
            raise ScenarioError(k, "is required")
    if not isinstance(data["name"], str) or not re.fullmatch(NAME, data["name"]):
        raise ScenarioError("name", f"must match {NAME}")
    base = data.get("base") or {}
    if not isinstance(base, dict):
        raise ScenarioError("base", "expected a mapping")
    for k in ("topology", "traffic", "name"):
        if k in base:
            raise ScenarioError(f"base.{k}", "set per run by the comparison (fabrics / traffic / name)")
    if "rounds" in base:
        raise ScenarioError("base.rounds", "a comparison runs one round per (fabric, traffic) pair; "
                                           "run a scenario with rounds on its own")
    for sect in ("fabrics", "traffic"):
        if not isinstance(data[sect], dict) or not data[sect]:
            raise ScenarioError(sect, "expected a mapping of at least one label")
        for label in data[sect]:
            if not isinstance(label, str) or not re.fullmatch(NAME, label):
                raise ScenarioError(f"{sect}.{label}", f"label must match {NAME}")
    runs = []
    for fname, topo in data["fabrics"].items():
        for tname, traffic in data["traffic"].items():
            sc = copy.deepcopy(base)
            sc.update(name=f"{fname}-{tname}", topology=copy.deepcopy(topo), traffic=copy.deepcopy(traffic))
            try:
                runs.append((fname, tname, validate(sc)))
            except ScenarioError as e:
                raise _rekey(e, fname, tname) from None
    return {"name": data["name"], "description": data.get("description", ""), "runs": runs}


def load_comparison(path: str | Path) -> dict:
    """Read and check a comparison YAML file (see :func:`validate_comparison`).

    Raises:
        ScenarioError: unreadable file, bad YAML, or a bad key.
    """
    return validate_comparison(read_yaml_file(path))


def row_of(fabric: str, traffic: str, summary: dict, run_dir: Path) -> dict:
    """One comparison.csv row from a run's summary.json."""
    tp = summary["throughput"]
    f = summary["flows"]
    per_flow = tp.get("per_flow_mbps") or {}
    return {
        "fabric": fabric, "traffic": traffic, "pattern": summary["pattern"], "run": run_dir.name,
        "flows_kind": summary["flows_kind"],
        "hosts": tp["sending_hosts"], "oversubscription": summary["topology"].get("oversubscription"),
        "host_rate_mbps": tp["host_rate_mbps"], "flows": f["count"], "all_complete": f["all_complete"],
        "window": tp["window"], "window_start_s": tp["window_s"][0], "window_end_s": tp["window_s"][1],
        "aggregate_mbps": tp["aggregate_mbps"], "per_host_mbps": tp["per_sending_host_mbps"],
        "fraction_of_line_rate": tp["fraction_of_hosts_x_host_rate"],
        "wire_fraction_of_line_rate": tp["wire_fraction_of_hosts_x_host_rate"],
        "model_per_host_mbps": tp["model_per_sending_host_mbps"], "measured_over_model": tp["measured_over_model"],
        "hash_ecmp_model_per_host_mbps": (tp["hash_ecmp_model_aggregate_mbps"]["median"] / tp["sending_hosts"]
                                          if tp.get("hash_ecmp_model_aggregate_mbps") else None),
        "per_flow_p10_mbps": per_flow.get("p10"), "per_flow_median_mbps": per_flow.get("median"),
        "jain_index_per_flow": tp["jain_index_per_flow"],
        "fct_median_s": f["fct_median_s"], "fct_p99_s": f["fct_p99_s"], "retransmits": sum(
            p["total_retrans"] or 0 for p in f["per_flow"]), "total_drops": summary["total_drops"],
        "datapath": summary["datapath"],
    }


def _share_by_oversubscription(row: dict) -> float:
    """Fraction of its link rate a host gets across an oversubscribed layer: min(1, 1/ratio)."""
    return min(1.0, 1.0 / row["oversubscription"]) if row["oversubscription"] else 1.0


def ratios(rows: list[dict]) -> list[dict]:
    """Per traffic mix: every other fabric's per-host throughput over the first fabric's,
    measured, by the fluid model, and, for permutations (every pair crosses the
    upper layers), by the oversubscription ratios alone (``min(1, 1/oversubscription)``
    per fabric); for other patterns that prediction is None (local traffic does
    not cross the oversubscribed layer: use the fluid model)."""
    out = []
    by_traffic: dict[str, list[dict]] = {}
    for r in rows:
        by_traffic.setdefault(r["traffic"], []).append(r)
    for traffic, rs in by_traffic.items():
        if rs[0].get("flows_kind") == "sized" and any(r.get("flows_kind") == "time-limited" for r in rows):
            continue    # throughput ratios come from the time-limited runs; sized runs are for completion times
        ref = rs[0]
        for r in rs[1:]:
            measured = r["per_host_mbps"] / ref["per_host_mbps"] if ref["per_host_mbps"] else None
            by_over = (_share_by_oversubscription(r) / _share_by_oversubscription(ref)
                       if r.get("pattern", "permutation") == "permutation" else None)
            out.append({"traffic": traffic, "fabric": r["fabric"], "versus": ref["fabric"],
                        "per_host_ratio_measured": measured,
                        "per_host_ratio_model": r["model_per_host_mbps"] / ref["model_per_host_mbps"],
                        "per_host_ratio_hash_ecmp_model": (r["hash_ecmp_model_per_host_mbps"]
                                                           / ref["hash_ecmp_model_per_host_mbps"])
                        if r.get("hash_ecmp_model_per_host_mbps") and ref.get("hash_ecmp_model_per_host_mbps") else None,
                        "per_host_ratio_oversubscription": by_over,
                        "measured_over_oversubscription_prediction":
                            measured / by_over if measured is not None and by_over else None})
    return out


def run_comparison(cmp: dict, results_root: Path, quiet: bool = False, accept_unfaithful: bool = False) -> Path:
    """Run every (fabric, traffic) pair of a checked comparison; return the comparison folder.

    Raises: whatever :func:`experiments.runner.run` raises for a run (the runs
    before it keep their folders).
    """
    out = folders.make_folder(folders.next_folder(folders.check_results_root(results_root), cmp["name"]))
    rows = []
    for i, (fabric, traffic, sc) in enumerate(cmp["runs"], 1):
        if not quiet:
            print(f"fabriclab: comparison run {i}/{len(cmp['runs'])}: {fabric} x {traffic}", flush=True)
        run_dir = runner.run(sc, out, quiet=True, accept_unfaithful=accept_unfaithful)
        summary = json.loads((run_dir / "summary.json").read_text())
        rows.append(row_of(fabric, traffic, summary, run_dir))
        if not quiet:
            print("  " + format_row(rows[-1]), flush=True)
        result = write_tables(out, cmp, rows)   # after every run: an interrupted comparison keeps what it has
    plot.plot_comparison(out)
    report.write_report(out)
    if not quiet:
        print(format_comparison(result, out))
    return out


def write_tables(out: Path, cmp: dict, rows: list[dict]) -> dict:
    """Write comparison.json and comparison.csv for the runs done so far; return the JSON content
    (``complete`` is false until every planned run is in)."""
    result = {"name": cmp["name"], "description": cmp["description"], "complete": len(rows) == len(cmp["runs"]),
              "runs": rows, "ratios": ratios(rows)}
    (out / "comparison.json").write_text(json.dumps(result, indent=2))
    with open(out / "comparison.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return result


def format_row(r: dict) -> str:
    """One line per run for the terminal: throughput (time-limited flows) or completion times (sized flows)."""
    head = f"{r['fabric']:>16} {r['traffic']:<24}"
    if r["flows_kind"] == "sized":
        return (f"{head} FCT median {r['fct_median_s']:.2f} s, p99 {r['fct_p99_s']:.2f} s "
                f"({r['flows']} flows, all complete: {r['all_complete']})")
    wire = r["wire_fraction_of_line_rate"]
    wire = f", {100 * wire:.0f}% on the wire" if wire is not None else ""
    hashed = r["hash_ecmp_model_per_host_mbps"]
    model = (f"{r['model_per_host_mbps']:.2f} ideal / {hashed:.2f} hash ECMP" if hashed is not None
             else f"{r['model_per_host_mbps']:.2f} single path")
    return (f"{head} per host {r['per_host_mbps']:6.2f} Mbit/s "
            f"({100 * r['fraction_of_line_rate']:5.1f}% of line rate as payload{wire}; model {model})")


def format_comparison(result: dict, out: Path) -> str:
    """The comparison's terminal report."""
    lines = ["", f"== fabriclab comparison: {result['name']} =="]
    lines += [format_row(r) for r in result["runs"]]
    for q in result["ratios"]:
        by_over = q["per_host_ratio_oversubscription"]
        by_over = f"{by_over:.3f} by oversubscription, " if by_over is not None else ""
        hashed = q.get("per_host_ratio_hash_ecmp_model")
        hashed = f", {hashed:.3f} by the hash-ECMP model" if hashed is not None else ""
        lines.append(f"{q['traffic']}: {q['fabric']} / {q['versus']} per host = {q['per_host_ratio_measured']:.3f} "
                     f"measured, {by_over}{q['per_host_ratio_model']:.3f} by the ideal fluid model{hashed}")
    lines.append(f"results: {out}")
    return "\n".join(lines)
