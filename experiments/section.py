"""The result-section protocol: a mechanism's pure half in the results. A mechanism (PFC, RoCE,
...) that adds a section to a round's ``summary.json`` also says how that section reads: its
fields of a flow's row in flows.csv and of the hosts' TCP settings, its line in the round's
terminal block, its columns in rounds.csv, its columns in the terminal's rounds table, what
rounds.json compares across rounds, its marks on the common queue plots and its plots.
experiments.analysis and experiments.plot call only these methods, in the order of
:data:`experiments.sections.SECTIONS`; they name no mechanism. A section reads files and dicts
only (no fabric, no netlink)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, ClassVar


def cell(value, fmt: str) -> str:
    """One figure in a terminal table: ``value`` formatted with ``fmt`` (a format spec), ``-`` for None."""
    return "-" if value is None else format(value, fmt)


class ResultSection:
    """Base class of a mechanism's result section; every hook has a do-nothing default."""
    #: The section's key in a round's summary.json (``summary[key]``).
    key = "section"
    #: Its columns in rounds.csv, in order (after the common ones, before ``stopped``).
    columns: tuple[str, ...] = ()
    #: Columns it places among the common ones: ``{common column: its columns right after it}``
    #: (e.g. the bottleneck's queue figures beside its drops).
    placed: ClassVar[dict[str, tuple[str, ...]]] = {}

    def all_columns(self) -> tuple[str, ...]:
        """Every column it adds: the placed ones, then :attr:`columns`."""
        return tuple(c for cols in self.placed.values() for c in cols) + self.columns

    def row(self, summary: dict) -> dict:
        """Its columns' values for one round's ``summary`` (every column of :meth:`all_columns`;
        None where the round has no such section). Default: all None."""
        return dict.fromkeys(self.all_columns())

    def flow_fields(self, sender: dict, receiver: dict | None) -> dict:
        """Its fields of one TCP or UDP flow's row in flows.csv (columns of
        experiments.tables.FLOW_COLUMNS, which keeps their order), from the flow's sender record
        ``sender`` (one entry of ``<host>.tx.json``'s ``flows``, traffic.agent) and its receiver
        record ``receiver`` (one of ``<host>.rx.json``'s, joined on source address and port; None
        when the receiver has no record of the flow), as the agents counted them (packets,
        flags). A field it leaves out stays None. Default: none."""
        return {}

    def host_tcp_settings(self, host: dict) -> tuple:
        """Its values in each entry of ``summary["hosts_tcp"]``, after the host's congestion
        control: what it reads of one host's record in environment.json's ``host_config`` (the
        sysctls read back from the host, experiments.features.hosts), JSON scalars. Default: none."""
        return ()

    def seed(self, summary: dict) -> int | None:
        """The round's seed as this section recorded it (a round without a variant's seed), or None."""
        return None

    def line(self, summary: dict) -> str | None:
        """Its line in the round's terminal block (after the ECN line), or None."""
        return None

    def across_rounds(self, rows: list[dict]) -> dict:
        """Keys rounds.json adds from the rounds table's ``rows`` (e.g. a comparison across seeds).
        Default: none."""
        return {}

    def round_cells(self, rows: list[dict]) -> list[tuple[str | None, str, Callable[[dict], str]]]:
        """Its columns in the terminal's rounds table: ``[(after, header, cells)]`` where ``after`` is
        the common column it follows (``round``, ``drops``, ``FCT``, ``Mbit/s``; None: at the end),
        and ``cells(row)`` one row's text, aligned to the header's width (each starts with the
        space that separates it). Default: none."""
        return []

    def plots(self, out: Path, summary: dict) -> list[Path]:
        """Draw its plots of one results folder ``out`` (a run or a round) and return their paths;
        none when the folder has no such section."""
        return []

    def queue_marks(self, ax, summary: dict, in_packets: bool, color: str = "C2", suffix: str = "",
                    vertical: bool = False) -> None:
        """Mark its thresholds from one round's ``summary`` on a queue axis of the matplotlib axes
        ``ax`` (the common queue plots: the queue over time, its CDF, the queue under the
        congestion windows, every round's queue): the y axis, or the x axis with ``vertical``,
        in packets of a full frame (common.units.FRAME_BYTES) with ``in_packets``, else in
        bytes; drawn in ``color``, each legend label ending in ``suffix`` (e.g. `` (round 2)``).
        Default: none."""

    def round_label(self, row: dict) -> str | None:
        """A few words on one round (a row of rounds.json) in the legend of the rounds' queue
        plot, after the round's name, or None. Default: none."""
        return None

    def round_bars(self, rows: list[dict]) -> list[tuple[str | None, str, str]]:
        """Its panels in the rounds' bar chart from rounds.json's ``rows``: ``[(after, column,
        title)]``, one bar per round of that rounds.csv ``column`` (a number; None drawn as 0),
        after the common panel ``after`` (``drops``, ``FCT``, ``Mbit/s``; None: at the end).
        Default: none."""
        return []

    def round_plots(self, out: Path, rows: list[dict], summaries: list[dict]) -> list[Path]:
        """Draw its plots across a run's rounds (``out``: the run's folder; ``rows``: rounds.json's
        rows; ``summaries``: each round's summary.json, in the same order) and return their
        paths. Default: none."""
        return []
