"""Results for notebooks: every table of a round's folder starts with round, variant and seed
(experiments.tables.label_csvs, which the run loop calls), and experiments.results.load reads a
run's, a comparison's or a study's folder into pandas DataFrames."""
import csv
import json
from pathlib import Path

import pytest

from experiments import results
from experiments.analysis import round_columns, round_row
from experiments.sections import SECTIONS
from experiments.tables import LABEL_COLUMNS, label_csvs, load_queue_samples, write_csv
from tests.notebook import notebook_blocks, run_notebook_blocks

pd = pytest.importorskip("pandas")


def rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_labels_go_first_replace_a_column_of_the_same_name_and_skip_raw_files(tmp_path):
    write_csv(tmp_path / "flows.csv", ["flow_id", "fct_s"], [{"flow_id": 0, "fct_s": 1.5}, {"flow_id": 1, "fct_s": 2}])
    write_csv(tmp_path / "port_counters.csv", ["round", "switch"], [{"round": "old", "switch": "leaf1"}])
    write_csv(tmp_path / "queues_raw.csv", ["t_unix_s", "intf"], [{"t_unix_s": 1.0, "intf": "x"}])
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "agents").mkdir()
    write_csv(tmp_path / "agents" / "h1.csv", ["a"], [{"a": 1}])
    done = label_csvs(tmp_path, {"round": "ecn-s2", "variant": "ecn", "seed": 2})
    assert sorted(p.name for p in done) == ["flows.csv", "port_counters.csv"]
    assert rows(tmp_path / "flows.csv") == [["round", "variant", "seed", "flow_id", "fct_s"],
                                            ["ecn-s2", "ecn", "2", "0", "1.5"], ["ecn-s2", "ecn", "2", "1", "2"]]
    assert rows(tmp_path / "port_counters.csv") == [["round", "variant", "seed", "switch"],
                                                    ["ecn-s2", "ecn", "2", "leaf1"]]
    assert rows(tmp_path / "queues_raw.csv")[0] == ["t_unix_s", "intf"]
    assert rows(tmp_path / "agents" / "h1.csv")[0] == ["a"]
    assert not list(tmp_path.glob(".*labelling"))
    label_csvs(tmp_path, {"round": "ecn-s2", "variant": "ecn", "seed": 2})          # again: the same file
    assert rows(tmp_path / "flows.csv")[0] == ["round", "variant", "seed", "flow_id", "fct_s"]


def test_labelled_queue_samples_still_read_as_numbers(tmp_path):
    write_csv(tmp_path / "queues.csv", ["t_s", "intf", "backlog_bytes"],
              [{"t_s": 0.1, "intf": "leaf1-eth1", "backlog_bytes": 3000}])
    label_csvs(tmp_path, {"round": "a", "variant": "a", "seed": 1})
    got = load_queue_samples(tmp_path / "queues.csv", 0.0)
    assert list(got["leaf1-eth1"]) == ["t_s", "backlog_bytes"] and got["leaf1-eth1"]["backlog_bytes"][0] == 3000


def test_rounds_csv_has_the_labels_a_boolean_pfc_and_the_interval_as_two_columns():
    s = {"flows": {"congestion_control_on_live_flows": [], "all_complete": True, "fct_median_s": 1.0,
                   "fct_p99_s": 2.0}, "hosts_tcp": [], "total_drops": 0,
         "pfc": {"enabled": False, "pauses": 0, "paused_time_s": 0.0, "cap_drops": 0, "reaction_s": {"p99": None}},
         "roce": {"mode": "dcqcn", "seed": 3, "message_fct_s": {"median": 0.2, "median_ci95": [0.1, 0.3], "p99": 1},
                  "cnps_received": 4, "retransmitted_packets": 0}}
    row = round_row(2, "dcqcn-seed3", s, variant="dcqcn", seed=3, sections=SECTIONS)
    cols = round_columns(SECTIONS)
    assert list(row)[:4] == ["round", "variant", "seed", "round_index"] == list(cols[:4])
    assert (row["round"], row["variant"], row["seed"], row["round_index"]) == ("dcqcn-seed3", "dcqcn", 3, 3)
    assert row["pfc_enabled"] is False
    assert (row["message_fct_median_ci95_low_s"], row["message_fct_median_ci95_high_s"]) == (0.1, 0.3)
    assert set(row) <= set(cols) and list(row) == list(cols)
    assert round_row(0, "x", {**s, "pfc": None, "roce": None}, sections=SECTIONS)["variant"] == "x"


def round_folder(d: Path, name: str, variant: str, seed: int, fcts: list, drops: int, ok: bool = True) -> Path:
    d.mkdir(parents=True)
    write_csv(d / "flows.csv", ["flow_id", "fct_s", "complete"],
              [{"flow_id": i, "fct_s": f, "complete": True} for i, f in enumerate(fcts)])
    write_csv(d / "queues.csv", ["t_s", "intf", "backlog_packets"],
              [{"t_s": t / 10, "intf": "leaf1-eth1", "backlog_packets": t} for t in range(5)])
    write_csv(d / "ports.csv", ["switch", "intf", "drops"], [{"switch": "leaf1", "intf": "leaf1-eth1", "drops": drops}])
    (d / "summary.json").write_text(json.dumps({"flows": {"fct_median_s": sorted(fcts)[len(fcts) // 2]},
                                                "bottleneck": {"intf": "leaf1-eth1", "mean_tx_mbps": 9.9},
                                                "total_drops": drops, "fidelity": {"ok": ok, "failures": []}}))
    (d / "agents").mkdir()
    (d / "agents" / "summary.json").write_text("{}")            # not a round
    label_csvs(d, {"round": name, "variant": variant, "seed": seed})
    return d


def test_load_a_study_like_folder_concatenates_every_round_with_its_labels(tmp_path):
    for run, cells in (("runs/r1", [("a-s1", "a", 1), ("b-s1", "b", 1)]), ("runs/r2", [("a-s2", "a", 2)])):
        for i, (name, variant, seed) in enumerate(cells):
            round_folder(tmp_path / run / "rounds" / f"{i + 1:02d}-{name}", name, variant, seed,
                         [1.0 + seed, 2.0], drops=seed)
    r = results.load(tmp_path)
    assert list(r.flows.columns[:4]) == [*LABEL_COLUMNS, "run"]
    assert sorted(set(r.flows["round"])) == ["a-s1", "a-s2", "b-s1"] and len(r.flows) == 6
    assert r.flows["complete"].dtype == bool and r.flows["seed"].dtype.kind == "i"
    assert set(r.flows["run"]) == {"runs/r1", "runs/r2"}
    assert r.flows.groupby("variant")["fct_s"].count().to_dict() == {"a": 4, "b": 2}
    assert len(r.queues) == 15 and len(r.ports) == 3
    assert list(r.rounds["round"]) == ["a-s1", "b-s1", "a-s2"]
    assert list(r.rounds["variant"]) == ["a", "b", "a"] and list(r.rounds["seed"]) == [1, 1, 2]
    assert r.rounds["fidelity.ok"].tolist() == [True] * 3 and "fidelity.failures" not in r.rounds
    assert r.table("nothing").empty and r.table("ports")["drops"].sum() == 4


def test_load_an_unlabelled_folder_takes_the_labels_from_its_folder(tmp_path):
    d = tmp_path / "rounds" / "01-drop-tail"
    d.mkdir(parents=True)
    write_csv(d / "flows.csv", ["flow_id", "fct_s"], [{"flow_id": 0, "fct_s": 1.0}])
    (d / "summary.json").write_text("{}")
    r = results.load(tmp_path)
    assert r.flows[["round", "variant", "run"]].values.tolist() == [["drop-tail", "drop-tail", "."]]


def test_load_refuses_a_folder_without_rounds(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a results folder"):
        results.load(tmp_path)


def test_the_docs_five_analyses_are_short_and_run_on_a_two_round_folder(tmp_path):
    """docs/notebooks.md's five analyses, each at most ten lines, run here on a synthetic folder
    (the live tier runs them on the default experiment's)."""
    for i, (name, fcts, drops) in enumerate((("drop-tail", [3.2, 3.3], 160), ("ecn-k20", [3.3, 3.4], 2))):
        round_folder(tmp_path / "res" / "rounds" / f"{i + 1:02d}-{name}", name, name, 1, fcts, drops)
    blocks = notebook_blocks()
    assert len(blocks) == 5 and all(len(b.strip().splitlines()) <= 10 for b in blocks)
    run_notebook_blocks(blocks, tmp_path / "res", cwd=tmp_path)
    assert (tmp_path / "bottleneck_queue.png").stat().st_size > 0
