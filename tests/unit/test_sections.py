"""Result sections (experiments.section, experiments.sections): each mechanism's lines, columns and
plots come from its own package; the analysis names no mechanism."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from experiments import analysis, plot
from experiments.features.ecn.report import SECTION as ECN
from experiments.plot import plt
from experiments.section import ResultSection
from experiments.sections import SECTIONS
from experiments.tables import FLOW_COLUMNS

REPO = Path(__file__).resolve().parents[2]
#: the mechanisms whose results live wholly in their own package (what the analysis must not name)
MOVED = ("pfc", "roce", "dcqcn", "cnp", "ecn", "collective", "allreduce")


def test_the_analysis_names_no_mechanism_whose_section_is_its_own():
    src = (REPO / "experiments" / "analysis.py").read_text()
    words = "(?<![a-z])(" + "|".join(MOVED) + ")(?![a-z])"      # pfc_enabled and tcp_ecn count, EcnProfile does not
    named = sorted({m.group(0).lower() for m in re.finditer(words, src, re.IGNORECASE)})
    assert not named, f"experiments/analysis.py names {named}: that belongs in the mechanism's package"


def test_every_section_gives_exactly_its_columns_and_nothing_for_a_round_without_it():
    assert all(isinstance(s, ResultSection) for s in SECTIONS)
    cols = analysis.round_columns(SECTIONS)
    assert len(cols) == len(set(cols)), "two sections (or a section and the common table) share a column"
    for s in SECTIONS:
        assert set(s.row({})) == set(s.all_columns()) and set(s.row({}).values()) == {None}
        assert s.seed({}) is None and s.plots(Path("/nonexistent"), {}) == []
        assert s.line({}) is None or s.key == "ecn"      # a round without marking still says so


def test_the_rounds_table_keeps_its_column_order():
    """rounds.csv's columns, as results folders written before the sections have them."""
    assert analysis.round_columns(SECTIONS)[:21] == (
        "round", "variant", "seed", "round_index", "bottleneck_profile", "congestion_control", "tcp_ecn",
        "flows_complete", "fct_median_s", "fct_p99_s", "bottleneck_drops", "total_drops", "ce_marked_bottleneck",
        "ce_received_packets", "queue_median_packets", "queue_p99_packets", "peak_backlog_packets",
        "bottleneck_mean_tx_mbps", "bottleneck_intf", "jain_index", "fairness_how")
    assert analysis.round_columns(SECTIONS)[-13:] == (
        "pfc_enabled", "pauses", "paused_time_s", "pfc_cap_drops", "reaction_p99_s", "roce_mode",
        "message_fct_median_s", "message_fct_median_ci95_low_s", "message_fct_median_ci95_high_s",
        "message_fct_p99_s", "cnps", "retransmitted_packets", "stopped")


def test_a_new_section_adds_its_line_columns_and_cross_round_keys(tmp_path):
    class Queues(ResultSection):
        key = "extra"
        columns = ("extra_count",)

        def row(self, summary):
            return {"extra_count": (summary.get("extra") or {}).get("count")}

        def line(self, summary):
            return f"extra: {summary['extra']['count']}" if summary.get("extra") else None

        def across_rounds(self, rows):
            return {"extra_total": sum(r["extra_count"] or 0 for r in rows)}

        def round_cells(self, rows):
            return [(None, " extra", lambda r: f" {r['extra_count']:>5}")]

    s = {"flows": {"congestion_control_on_live_flows": [], "all_complete": True, "fct_median_s": None,
                   "fct_p99_s": None}, "hosts_tcp": [], "total_drops": 0, "extra": {"count": 7}}
    secs = SECTIONS + (Queues(),)
    row = analysis.round_row(0, "r", s, sections=secs)
    assert row["extra_count"] == 7 and list(row)[-1] == "stopped"
    (tmp_path / "rounds" / "01-r").mkdir(parents=True)
    analysis.write_rounds(tmp_path, [s], sections=secs)
    assert (tmp_path / "rounds.csv").read_text().splitlines()[0].split(",")[-3:] == ["extra_count", "stopped", "folder"]
    assert '"extra_total": 7' in (tmp_path / "rounds.json").read_text()
    assert analysis.format_rounds(tmp_path, sections=secs).splitlines()[-1].endswith("    7")


def _write(d: Path, name: str, rec: dict) -> None:
    (d / f"{name}.json").write_text(json.dumps(rec))


def _one_flow(d: Path, receiver_extra: dict, sender_extra: dict) -> list[dict]:
    t0 = 1000.0
    _write(d, "h1.rx", {"flows": [{"src_ip": "10.2.0.1", "src_port": 40001, "bytes": 500,
                                   "first_byte_unix_s": t0 + 0.01, "last_byte_unix_s": t0 + 0.5, "eof": True,
                                   "samples": [], **receiver_extra}]})
    _write(d, "h7.tx", {"flows": [{"flow_id": 0, "src_port": 40001, "bytes_planned": 500, "bytes_sent": 500,
                                   "start_at_unix_s": t0, "closed_unix_s": t0 + 0.6, **sender_extra}]})
    return [{"flow_id": 0, "src": "h7", "dst": "h1", "src_ip": "10.2.0.1"}]


def test_a_section_adds_its_fields_to_a_flows_row_from_the_agents_records(tmp_path):
    class Hops(ResultSection):
        key = "hops"

        def flow_fields(self, sender, receiver):
            return {"path": f"{sender['hops']} hops, {receiver['ttl'] if receiver else '-'} ttl"}

    plan = _one_flow(tmp_path, {"ttl": 61}, {"hops": 3})
    row, = analysis.collect_flows(tmp_path, plan, {}, sections=SECTIONS + (Hops(),))
    assert row["path"] == "3 hops, 61 ttl" and row["complete"] is True
    assert list(row)[:len(FLOW_COLUMNS)] == list(FLOW_COLUMNS)        # flows.csv keeps its columns' order
    (tmp_path / "h1.rx.json").unlink()                                  # no receiver record: the section sees None
    row, = analysis.collect_flows(tmp_path, plan, {}, sections=(Hops(),))
    assert row["path"] == "3 hops, - ttl"


def test_the_ecn_section_fills_a_flows_negotiation_and_the_receivers_ecn_counts(tmp_path):
    plan = _one_flow(tmp_path, {"ecn_received": {"ce": 4, "ect": 90, "not_ect": 2}}, {"ecn_negotiated": True})
    row, = analysis.collect_flows(tmp_path, plan, {}, sections=SECTIONS)
    assert (row["ecn_negotiated"], row["ce_received"], row["ect_received"], row["not_ect_received"]) == (True, 4, 90, 2)
    plan = _one_flow(tmp_path, {}, {})                  # a receiver that did not count: the counts stay empty
    row, = analysis.collect_flows(tmp_path, plan, {}, sections=SECTIONS)
    assert (row["ecn_negotiated"], row["ce_received"], row["ect_received"]) == (None, None, None)
    row, = analysis.collect_flows(tmp_path, plan, {}, sections=())
    assert row["bytes_received"] == 500 and row["ecn_negotiated"] is None


def test_the_hosts_tcp_settings_keep_their_pairs_and_the_rounds_column():
    env = {"host_config": {"h1": {"tcp_congestion_control": "dctcp", "tcp_ecn": 1, "routes": []},
                           "h2": {"tcp_congestion_control": "cubic", "tcp_ecn": 0, "routes": []},
                           "h3": {"tcp_congestion_control": "dctcp", "tcp_ecn": 1, "routes": []}}}
    pairs = analysis.hosts_tcp(env, sections=SECTIONS)
    assert pairs == [("cubic", 0), ("dctcp", 1)]
    assert analysis.hosts_tcp(env, sections=()) == [("cubic",), ("dctcp",)]
    s = {"flows": {"congestion_control_on_live_flows": ["cubic", "dctcp"], "all_complete": True,
                   "fct_median_s": None, "fct_p99_s": None}, "hosts_tcp": json.loads(json.dumps(pairs)),
         "total_drops": 0}
    row = analysis.round_row(0, "r", s, sections=SECTIONS)
    assert row["tcp_ecn"] == "0,1" and list(row)[list(row).index("congestion_control") + 1] == "tcp_ecn"


@pytest.fixture
def figures(monkeypatch):
    """The figures the plots drew, kept open to inspect (the plots close them)."""
    kept, close = [], plt.close
    monkeypatch.setattr(plt, "close", kept.append)
    yield kept
    for f in kept:
        close(f)


def test_the_ecn_marks_are_k_as_a_line_and_kmin_kmax_as_a_band():
    fig, ax = plt.subplots()
    try:
        ECN.queue_marks(ax, {"ecn": {"bottleneck_k_bytes": 20 * 1514}}, True)
        k, = ax.get_lines()
        assert k.get_label() == "ECN K = 20 packets" and list(k.get_ydata()) == [20, 20] and k.get_linestyle() == "-."
        ECN.queue_marks(ax, {"ecn": {"bottleneck_kmin_kmax_bytes": [15140, 60560]}}, False, color="C4",
                        suffix=" (r2)", vertical=True)
        band, = ax.patches
        assert band.get_label() == "ECN Kmin-Kmax 15140-60560 bytes (r2)"
        ECN.queue_marks(ax, {"ecn": {"bottleneck_profile": "drop-tail"}}, True)      # no threshold: no mark
        ECN.queue_marks(ax, {}, True)
        assert len(ax.get_lines()) == 1 and len(ax.patches) == 1
        assert ResultSection().queue_marks(ax, {"ecn": {"bottleneck_k_bytes": 1514}}, True) is None
        assert len(ax.get_lines()) == 1
    finally:
        plt.close(fig)


def _round_folder(out: Path, n: int, name: str, k_packets: int | None, pfc: bool | None) -> dict:
    d = out / "rounds" / f"{n:02d}-{name}"
    d.mkdir(parents=True)
    with open(d / "queues.csv", "w") as f:
        f.write("t_s,intf,backlog_bytes,backlog_packets,drops_total,tx_bytes_total,tx_packets_total\n")
        for i in range(20):
            f.write(f"{0.1 * i},s1-eth1,{(i % 5) * 1514},{i % 5},0,{i * 1000},{i}\n")
    summary = {"bottleneck": {"intf": "s1-eth1", "buffer_packets": 50, "buffer_bytes": None},
               "ecn": {"bottleneck_k_bytes": k_packets * 1514 if k_packets else None}}
    (d / "summary.json").write_text(json.dumps(summary))
    return {"round": name, "folder": f"rounds/{d.name}", "bottleneck_profile": f"step K={k_packets}" if k_packets
            else None, "pfc_enabled": pfc, "bottleneck_drops": 1, "ce_marked_bottleneck": 7, "fct_median_s": 1.0,
            "fct_p99_s": 2.0, "bottleneck_mean_tx_mbps": 9.5, "paused_time_s": 0.25 if pfc else None,
            "queue_median_packets": 3, "queue_p99_packets": 4}


def test_the_rounds_plots_take_each_sections_words_panels_marks_and_plots(tmp_path, figures):
    rows = [_round_folder(tmp_path, 1, "k10", 10, True), _round_folder(tmp_path, 2, "k20", 20, None),
            _round_folder(tmp_path, 3, "tail", None, None)]
    (tmp_path / "rounds.json").write_text(json.dumps({"rounds": rows}))
    paths = plot.plot_rounds(tmp_path, sections=SECTIONS)
    assert [p.name for p in paths] == ["rounds_queue.png", "rounds_bars.png", "k_sweep.png"]
    queue, bars, sweep = (f.axes for f in figures)
    labels = [x.get_label() for x in queue[0].get_lines()]
    assert labels[:5] == ["k10: step K=10, PFC on", "ECN K = 10 packets (k10)", "k20: step K=20",
                          "ECN K = 20 packets (k20)", "tail"]
    assert [ax.get_title() for ax in bars] == ["drops at the bottleneck", "CE marks at the bottleneck",
                                               "completion time (s): median, p99", "bottleneck throughput (Mbit/s)",
                                               "PFC: paused time, all links (s)"]
    assert sweep[0].get_xlabel() == "K (packets)"
    figures.clear()
    assert [p.name for p in plot.plot_rounds(tmp_path, sections=())] == ["rounds_queue.png", "rounds_bars.png"]
    queue, bars = (f.axes for f in figures)
    assert [x.get_label() for x in queue[0].get_lines()][:3] == ["k10", "k20", "tail"]
    assert len(bars) == 3
