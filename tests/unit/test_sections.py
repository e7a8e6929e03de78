"""Result sections (experiments.section, experiments.sections): each mechanism's lines, columns and
plots come from its own package; the analysis names no mechanism."""
from __future__ import annotations

import re
from pathlib import Path

from experiments import analysis
from experiments.section import ResultSection
from experiments.sections import SECTIONS

REPO = Path(__file__).resolve().parents[2]
#: the mechanisms whose results live wholly in their own package (what the analysis must not name)
MOVED = ("pfc", "roce", "dcqcn", "cnp")


def test_the_analysis_names_no_mechanism_whose_section_is_its_own():
    src = (REPO / "experiments" / "analysis.py").read_text()
    words = "(?<![a-z])(" + "|".join(MOVED) + ")(?![a-z])"      # pfc_enabled counts, EcnProfile does not
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
