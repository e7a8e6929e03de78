"""ECN's section of the results: its fields of a flow's row (ECN negotiated, the receiver's CE,
ECT and not-ECT counts) and of the hosts' TCP settings (``net.ipv4.tcp_ecn``), its line in a
round's terminal block, its columns in rounds.csv (the bottleneck's profile after the round's
index, the hosts' tcp_ecn after the congestion control, its marks and queue after the drops) and
in the terminal's rounds table, its marks on the queue plots and the K sweep across rounds
(registered in experiments.sections)."""
from __future__ import annotations

from pathlib import Path

from experiments.features.ecn import plots
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
    the bottleneck queue after the first burst; and the hosts' ``tcp_ecn``, second in each entry
    of ``summary["hosts_tcp"]``."""
    key = "ecn"
    placed = {"round_index": ("bottleneck_profile",),
              "congestion_control": ("tcp_ecn",),
              "total_drops": ("ce_marked_bottleneck", "ce_received_packets", "queue_median_packets",
                              "queue_p99_packets")}

    def flow_fields(self, sender: dict, receiver: dict | None) -> dict:
        """``ecn_negotiated`` (the sender's TCP_INFO: the connection negotiated ECN, a boolean) and,
        when the receiver counted the flow's packets by their IP ECN field, ``ce_received``,
        ``ect_received`` and ``not_ect_received`` (packets)."""
        e = (receiver or {}).get("ecn_received")
        return {"ecn_negotiated": sender.get("ecn_negotiated"),
                **({"ce_received": e["ce"], "ect_received": e["ect"], "not_ect_received": e["not_ect"]} if e else {})}

    def host_tcp_settings(self, host: dict) -> tuple:
        """The host's ``net.ipv4.tcp_ecn`` (0 never asks for ECN, 1 asks and accepts, 2 only accepts)."""
        return (host["tcp_ecn"],)

    def row(self, summary: dict) -> dict:
        """The profile's description, the hosts' tcp_ecn values (comma-separated: the second value
        of each entry of ``hosts_tcp``, :meth:`host_tcp_settings`; ECN is the one section that
        adds a host setting), the marks, CE received and the queue's median / p99 in packets."""
        e = summary.get("ecn") or {}
        c, q = e.get("bottleneck_counters") or {}, e.get("queue_after_first_rtt") or {}
        hosts = summary.get("hosts_tcp")
        return {"bottleneck_profile": e.get("bottleneck_profile"),
                "tcp_ecn": ",".join(str(h[1]) for h in hosts) if hosts is not None else None,
                "ce_marked_bottleneck": c.get("marked"),
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

    def queue_marks(self, ax, summary: dict, in_packets: bool, color: str = "C2", suffix: str = "",
                    vertical: bool = False) -> None:
        """The bottleneck's K (a dash-dotted line) or Kmin-Kmax (a band) (:func:`.plots.threshold_lines`)."""
        plots.threshold_lines(ax, summary.get("ecn") or {}, in_packets, color, suffix, vertical)

    def round_label(self, row: dict) -> str | None:
        """The round's profile at the bottleneck (e.g. ``step K=30280 B (20 pkt)``), or None without one."""
        return row.get("bottleneck_profile")

    def round_bars(self, rows: list[dict]) -> list[tuple[str | None, str, str]]:
        """The CE marks at the bottleneck, after the drops."""
        return [("drops", "ce_marked_bottleneck", "CE marks at the bottleneck")]

    def round_plots(self, out: Path, rows: list[dict], summaries: list[dict]) -> list[Path]:
        """``k_sweep.png`` when the rounds differ in a step K (:func:`.plots.plot_k_sweep`)."""
        p = plots.plot_k_sweep(Path(out), rows, summaries)
        return [p] if p is not None else []


SECTION = EcnSection()
