"""ECN's section of the results: its line in a round's terminal block, its columns in rounds.csv
(the bottleneck's profile after the round's index, its marks and queue after the drops) and in the
terminal's rounds table (registered in experiments.sections)."""
from __future__ import annotations

from experiments.section import ResultSection, cell


def format_line(e: dict | None) -> str:
    """The ECN figures of a summary in one line (mechanism, bottleneck profile, marks, CE received)."""
    if not e or e.get("marker") in (None, "none"):
        return "ECN: no marking (drop-tail everywhere)"
    c = e.get("bottleneck_counters") or {}
    q = e.get("queue_after_first_rtt") or {}
    return (f"ECN: {e['marker']} marker; bottleneck {e.get('bottleneck_profile')}, {c.get('marked', 0)} CE marked, "
            f"{(e.get('ce_received') or {}).get('packets', 0)} CE received, queue after the first burst "
            + (f"median {q['median_packets']:.0f} / p99 {q['p99_packets']:.0f} packets" if q else "not sampled"))


class EcnSection(ResultSection):
    """``summary["ecn"]``: the bottleneck's profile, its CE marks, the CE the receivers counted, and
    the bottleneck queue after the first burst."""
    key = "ecn"
    placed = {"round_index": ("bottleneck_profile",),
              "total_drops": ("ce_marked_bottleneck", "ce_received_packets", "queue_median_packets",
                              "queue_p99_packets")}

    def row(self, summary: dict) -> dict:
        """The profile's description, the marks, CE received and the queue's median / p99 in packets."""
        e = summary.get("ecn") or {}
        c, q = e.get("bottleneck_counters") or {}, e.get("queue_after_first_rtt") or {}
        return {"bottleneck_profile": e.get("bottleneck_profile"), "ce_marked_bottleneck": c.get("marked"),
                "ce_received_packets": (e.get("ce_received") or {}).get("packets"),
                "queue_median_packets": q.get("median_packets"), "queue_p99_packets": q.get("p99_packets")}

    def line(self, summary: dict) -> str | None:
        """:func:`format_line` (``no marking`` when the round marks nowhere)."""
        return format_line(summary.get("ecn"))

    def round_cells(self, rows: list[dict]):
        """The profile after the round's name; CE marks and the queue after the drops."""
        return [("round", f" {'profile at bottleneck':<28}", lambda r: f" {str(r['bottleneck_profile'])[:28]:<28}"),
                ("drops", f" {'CE marks':>8} {'queue med/p99 pkt':>18}",
                 lambda r: f" {cell(r['ce_marked_bottleneck'], 'd'):>8} "
                           f"{cell(r['queue_median_packets'], '.0f') + '/' + cell(r['queue_p99_packets'], '.0f'):>18}")]


SECTION = EcnSection()
