"""Port counters (every round): every switch port's counters read from the controller
(``GET /fabriclab/ports``, controller.portstats) as the round starts and as it ends, written as
the round's ``port_counters.csv`` (frames and bytes received and sent, receive errors and queue drops
over the round; the rate and state at its end), and the summary's ``port_counters`` section: the ports
with receive errors, the ports below their nominal rate, the ports down. A student reads the same
counters during a run with ``python -m experiments ports`` (``ovs-ofctl dump-ports`` style)."""
from __future__ import annotations

from common.errors import SetupError
from controller.portstats import COLUMNS as PORT_COLUMNS
from experiments.context import RoundRecord
from experiments.features.base import Feature
from experiments.tables import write_csv

#: The counters that are differences over the round.
DELTAS = ("rx_packets", "rx_bytes", "rx_errors", "tx_packets", "tx_bytes", "tx_dropped", "carrier_changes")
#: port_counters.csv's columns.
COLUMNS = ("round",) + PORT_COLUMNS


def port_rows(round_name: str, before: list[dict], after: list[dict]) -> list[dict]:
    """port_counters.csv's rows: the counters of :data:`DELTAS` over the round (after - before; None when
    either side lacks it), rate and state as at the end."""
    first = {r["intf"]: r for r in before}
    rows = []
    for r in after:
        b = first.get(r["intf"], {})
        row = {"round": round_name, **r}
        for k in DELTAS:
            row[k] = r[k] - b[k] if r.get(k) is not None and b.get(k) is not None else None
        rows.append(row)
    return rows


def ports_section(rows: list[dict]) -> dict:
    """The summary's ``port_counters``: ``rx_errors`` / ``tx_dropped`` (totals over the switch ports),
    ``with_rx_errors`` ``{intf: n}``, ``below_nominal`` ``{intf: [rate, nominal]}``, ``down`` [intf]."""
    return {"ports": len(rows),
            "rx_errors": sum(r["rx_errors"] or 0 for r in rows),
            "tx_dropped": sum(r["tx_dropped"] or 0 for r in rows),
            "with_rx_errors": {r["intf"]: r["rx_errors"] for r in rows if r["rx_errors"]},
            "below_nominal": {r["intf"]: [r["rate_mbps"], r["nominal_mbps"]] for r in rows
                              if r["rate_mbps"] is not None and r["rate_mbps"] < r["nominal_mbps"] * 0.999},
            "down": [r["intf"] for r in rows if r["state"] != "up"]}


class Ports(Feature):
    """Every switch port's counters over each round (module docstring)."""
    name = "ports"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.before: list[dict] | None = None

    def restore(self) -> None:
        """Nothing to restore: the counters are in each round's round.json."""

    def before_round(self, lf, rnd: RoundRecord) -> dict:
        """The counters as the round starts."""
        self.before = self._read(lf)
        return {}

    def after_round(self, lf, rnd: RoundRecord) -> dict | None:
        """The counters as it ends (before the faults are taken back: a degraded port shows its rate);
        None when the controller cannot answer (the control-plane check names a dead controller)."""
        after = self._read(lf)
        return {"before": self.before, "after": after} if self.before is not None and after is not None else None

    @staticmethod
    def _read(lf) -> list[dict] | None:
        """Every switch port's counters from the controller, or None when it does not answer."""
        try:
            return lf.api.call("GET", "/ports", timeout_s=30, what="port counters")["ports"]
        except SetupError:
            return None

    def summarize(self, rnd: RoundRecord, summary: dict) -> None:
        """``port_counters.csv`` and the summary's ``port_counters`` section."""
        rec = rnd.features.get(self.name)
        if not rec:
            return
        rows = port_rows(rnd.round.name, rec["before"], rec["after"])
        write_csv(rnd.dir / "port_counters.csv", COLUMNS, rows)
        summary["port_counters"] = ports_section(rows)

    def report(self, summary: dict) -> str | None:
        """``ports: receive errors on c1-eth1 (146); below nominal p0a1-eth3 (3 of 10 Mbit/s); down: none``,
        only when a port shows something."""
        p = summary.get("port_counters")
        if not p or not (p["with_rx_errors"] or p["below_nominal"] or p["down"]):
            return None
        parts = []
        if p["with_rx_errors"]:
            parts.append("receive errors on " + ", ".join(f"{i} ({n})" for i, n in p["with_rx_errors"].items()))
        if p["below_nominal"]:
            parts.append("below nominal " + ", ".join(f"{i} ({r:g} of {n:g} Mbit/s)"
                                                      for i, (r, n) in p["below_nominal"].items()))
        if p["down"]:
            parts.append("down at the end: " + ", ".join(p["down"]))
        return "ports: " + "; ".join(parts)
