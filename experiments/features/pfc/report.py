"""PFC's section of the results: its line in a round's terminal block, its columns in rounds.csv
and in the terminal's rounds table, its plots, and its words and panel in the rounds' plots
(registered in experiments.sections)."""
from __future__ import annotations

from pathlib import Path

from experiments.features.pfc import plots
from experiments.section import ResultSection, cell


def format_line(p: dict | None, total_drops: int | None = None) -> str:
    """One terminal line about a round's PFC (``summary["pfc"]``, with the round's ``total_drops``
    for a round with PFC off), or '' without PFC."""
    if p is None:
        return ""
    lost = f", {p['datagrams_lost']} datagrams lost" if p["datagrams_lost"] is not None else ""
    if not p["enabled"]:
        drops = f": {total_drops} drop{'' if total_drops == 1 else 's'} in the fabric" if total_drops is not None else ""
        return f"PFC: off (the lossless class drops like a lossy one){drops}{lost}"
    r = p["reaction_s"]
    rt = f"reaction p50 {r['p50'] * 1e3:.1f} ms, p99 {r['p99'] * 1e3:.1f} ms" if r["count"] else "no pause"
    return (f"PFC: {p['pauses']} pauses ({p['paused_time_s']:.2f} s paused) by {', '.join(p['pausing_switches']) or '-'};"
            f" {rt}; cap drops {p['cap_drops']}{lost}")


def _on_off(enabled: bool | None) -> str:
    return "-" if enabled is None else "on" if enabled else "off"


class PfcSection(ResultSection):
    """``summary["pfc"]``: pauses, paused time, cap drops and the pause reaction's p99 per round."""
    key = "pfc"
    columns = ("pfc_enabled", "pauses", "paused_time_s", "pfc_cap_drops", "reaction_p99_s")

    def row(self, summary: dict) -> dict:
        """``pfc_enabled`` a boolean; all None in a round without priority queues."""
        p = summary.get("pfc")
        if p is None:
            return dict.fromkeys(self.columns)
        return {"pfc_enabled": bool(p["enabled"]), "pauses": p["pauses"], "paused_time_s": p["paused_time_s"],
                "pfc_cap_drops": p["cap_drops"], "reaction_p99_s": p["reaction_s"]["p99"]}

    def line(self, summary: dict) -> str | None:
        """:func:`format_line` of a round with priority queues."""
        return format_line(summary["pfc"], summary["total_drops"]) if summary.get("pfc") else None

    def round_cells(self, rows: list[dict]):
        """PFC on/off, pauses and paused seconds at the end, when any round has priority queues."""
        if not any(r.get("pfc_enabled") is not None for r in rows):
            return []
        return [(None, f" {'PFC':>4} {'pauses':>6} {'paused s':>8}",
                 lambda r: f" {_on_off(r['pfc_enabled']):>4} {cell(r['pauses'], 'd'):>6} "
                           f"{cell(r['paused_time_s'], '.2f'):>8}")]

    def round_label(self, row: dict) -> str | None:
        """``PFC on`` or ``PFC off`` for a round with priority queues, else None."""
        return f"PFC {_on_off(row['pfc_enabled'])}" if row.get("pfc_enabled") is not None else None

    def round_bars(self, rows: list[dict]) -> list[tuple[str | None, str, str]]:
        """The paused time of all links (s) at the end, when any round has priority queues."""
        if not any(r.get("pfc_enabled") is not None for r in rows):
            return []
        return [(None, "paused_time_s", "PFC: paused time, all links (s)")]

    def plots(self, out: Path, summary: dict) -> list[Path]:
        """The pause timeline and the buffer per ingress port (:func:`.plots.plot_pfc`)."""
        if summary.get("pfc") and (Path(out) / "pauses.csv").exists():
            return plots.plot_pfc(Path(out), summary)
        return []


SECTION = PfcSection()
