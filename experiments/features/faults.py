"""Faults (a scenario's or a round's ``faults``): each round's faults go to the controller as the
round starts (``POST /fabriclab/faults``: times from then), which applies and takes them back on
their schedule (controller.faultports); at the round's end every fault still on is ended
(``DELETE /fabriclab/faults``) and its record becomes a row of the round's ``faults.csv`` and an
item of its summary's ``faults`` section: what, where, when (asked and applied), how much, and what
it did (frames seen and dropped, the rate applied and whether the port's class was put back
exactly, the flaps' down and up times). Every round ends every fault, so a fault the run's owner
added over the REST API (hidden ones too) is ended with the round it ran in and is in its records.

The fidelity checks do not hold a port a fault slowed or took down to its nominal rate
(``summary["fault_ports"]``), and the UDP accounting counts the frames the faults dropped
(``summary["fault_dropped_frames"]``).
"""
from __future__ import annotations

import json
import time

from common.errors import CapabilityError, ScenarioError, SetupError
from controller.faults import FAULTS, FrameDrop, LinkFlap, RateLimit, parse_fault
from experiments.context import RoundRecord
from experiments.features.base import Feature
from experiments.tables import write_csv

#: faults.csv's columns.
COLUMNS = ("round", "id", "kind", "place", "layer", "description", "hidden", "start_s", "stop_s", "applied_at_s",
           "removed_at_s", "state", "frame_fraction_set", "frames_seen", "frames_dropped",
           "drop_fraction_measured", "bytes_dropped", "nominal_mbps", "rate_applied_mbps", "rate_restored",
           "flaps", "down_s_total", "params", "error")


def fault_rows(round_name: str, records: list[dict]) -> list[dict]:
    """One faults.csv row per fault record (controller.faultports: ``GET /fabriclab/faults``)."""
    rows = []
    for r in records:
        spec = r["spec"]
        rates = list(r.get("rates", {}).values())
        flaps = r.get("flaps") or []
        down = [f["up_at_s"] - f["down_at_s"] for f in flaps if f.get("up_at_s") is not None]
        rows.append({"round": round_name, "id": r["id"], "kind": r["kind"], "place": r["place"], "layer": r["layer"],
                     "description": r["description"], "hidden": bool(r.get("hidden")), "start_s": spec.get("start_s"), "stop_s": spec.get("stop_s"),
                     "applied_at_s": _round(r["applied_at_s"]), "removed_at_s": _round(r["removed_at_s"]),
                     "state": r["state"], "frame_fraction_set": spec.get("frame_fraction"),
                     "frames_seen": r["frames_seen"], "frames_dropped": r["frames_dropped"],
                     "drop_fraction_measured": _round(r["drop_fraction_measured"], 6),
                     "bytes_dropped": r["bytes_dropped"],
                     "nominal_mbps": rates[0]["nominal_mbps"] if rates else None,
                     "rate_applied_mbps": rates[0]["applied_mbps"] if rates else None,
                     "rate_restored": all(x.get("restored") for x in rates) if rates else None,
                     "flaps": len(flaps) if r["kind"] == "flap" else None,
                     "down_s_total": _round(sum(down)) if r["kind"] == "flap" else None,
                     "params": json.dumps({k: v for k, v in spec.items() if k not in ("kind", "start_s", "stop_s")}),
                     "error": r["error"]})
    return rows


def _round(v, digits: int = 4):
    return None if v is None else round(v, digits)


class Faults(Feature):
    """Each round's faults, applied by the controller on their schedule (module docstring)."""
    name = "faults"

    def plan(self, queues_per_port: int) -> int:
        """Record the faults of each round and how each kind acts; refuse a rate fault on a port
        whose ECN marker models its queue at the nominal rate."""
        ctx = self.ctx
        kinds = sorted({f.kind for r in ctx.rounds for f in r.faults})
        ctx.env["faults"] = {"rounds": [{"name": r.name, "faults": [f.to_data() for f in r.faults]} for r in ctx.rounds],
                             "mechanisms": {k: FAULTS[k].MECHANISM for k in kinds}}
        if (ctx.env.get("ecn") or {}).get("marker") != "bpf":
            return 0
        for i, r in enumerate(ctx.rounds):
            marked = {intf for intf, p in ctx.profiles[i].items() if p.kind != "off"}
            for f in r.faults:
                hit = [a.intf for a in FAULTS[f.kind].actions(ctx.fabric_map, f)
                       if isinstance(a, RateLimit) and a.intf in marked]
                if hit:
                    raise CapabilityError(f"faults: {f.kind} on {hit[0]}, a port the BPF ECN marker marks in round "
                                          f"{r.name}: its virtual queue drains at the nominal rate, so its marks would "
                                          "be wrong; use ecn.marker red on a stock kernel, or no marking on that port")
        return 0

    def restore(self) -> None:
        """Nothing to restore: the records are in each round's round.json."""

    def after_fabric(self, lf) -> None:
        """Tell the controller where the hosts' namespaces are (host faults, and any a user adds
        over the REST API during the run)."""
        lf.api.call("POST", "/hosts", {"host_pids": {h.name: h.pid for h in lf.net.hosts}}, what="faults")

    def describe_round(self, rnd: RoundRecord) -> str | None:
        """``faults: degrade p0a1<->c1 to 0.3 of its rate`` (the round's faults)."""
        fs = rnd.round.faults
        return "faults: " + "; ".join(FAULTS[f.kind].describe(f) for f in fs) if fs else None

    def before_round(self, lf, rnd: RoundRecord) -> dict:
        """Send the round's faults; their times run from now."""
        fs = rnd.round.faults
        if not fs:
            return {}
        self._t0 = time.time()
        ids = lf.api.call("POST", "/faults", {"faults": [f.to_data() for f in fs]}, what="faults")["ids"]
        return {"faults": {"ids": ids, "origin_unix_s": self._t0}}

    def after_round(self, lf, rnd: RoundRecord) -> dict | None:
        """End every fault still on, the scenario's and any added over the REST API; their records
        (None: the round had none)."""
        t0 = self._t0 if rnd.round.faults else None
        try:
            if not rnd.round.faults:      # a read first: ending nothing would be a change on record
                held = lf.api.call("GET", "/faults", timeout_s=30, what="faults")
                if not held["faults"] and not held["hidden"]:
                    return None
            removed = lf.api.call("DELETE", "/faults", timeout_s=60, what="faults")["removed"]
        except SetupError as e:      # the controller died: the fabric goes down with the run
            return {"origin_unix_s": t0, "records": [], "error": str(e)} if rnd.round.faults else None
        if not rnd.round.faults and not removed:
            return None
        return {"origin_unix_s": t0, "records": removed}

    def summarize(self, rnd: RoundRecord, summary: dict) -> None:
        """``faults.csv`` and the summary's ``faults`` section; the ports the fidelity checks leave
        alone and the frames the accounting counts."""
        rec = rnd.features.get(self.name)
        if not rec:
            return
        if rec.get("error"):
            summary["faults_error"] = f"the faults' records could not be read: {rec['error']}"
        rows = fault_rows(rnd.round.name, rec["records"])
        write_csv(rnd.dir / "faults.csv", COLUMNS, rows)
        summary["faults"] = [{k: r[k] for k in COLUMNS if k not in ("round", "params")} for r in rows]
        ports = set()
        for f in list(rnd.round.faults) + self._api_specs(rec["records"], rnd.round.faults):
            for a in FAULTS[f.kind].actions(self.ctx.fabric_map, f):
                if isinstance(a, RateLimit):
                    ports.add(a.intf)
                elif isinstance(a, LinkFlap):
                    ports |= {a.intf, a.peer_intf}
                elif isinstance(a, FrameDrop):
                    pass
        summary["fault_ports"] = sorted(ports)
        summary["fault_dropped_frames"] = sum(r["frames_dropped"] or 0 for r in rows)

    def _api_specs(self, records: list[dict], asked) -> list:
        """The specs of the records that are not the scenario's (faults added over the REST API)."""
        own = [f.to_data() for f in asked]
        out = []
        for r in records:
            if r["spec"] in own:
                own.remove(r["spec"])
                continue
            try:
                out.append(parse_fault(self.ctx.fabric_map, r["spec"]))
            except ScenarioError:
                pass
        return out

    def failures(self, summary: dict) -> list[str]:
        """A fault that failed, or a port whose class was not put back exactly."""
        out = [summary["faults_error"]] if summary.get("faults_error") else []
        for f in summary.get("faults") or []:
            if f["state"] == "failed" or f["error"]:
                out.append(f"fault {f['description']}: {f['error']}")
            if f["rate_restored"] is False:
                out.append(f"fault {f['description']}: the port's shaping was not put back as it was")
        return out

    def report(self, summary: dict) -> str | None:
        """``faults: corrupt 0.01 of frames on a->b: 146 of 3019 frames dropped (0.0484); ...``; a hidden
        fault only as ``1 hidden fault(s) (in faults.csv)``."""
        fs = summary.get("faults")
        if not fs:
            return None
        parts = []
        hidden = sum(bool(f.get("hidden")) for f in fs)
        for f in fs:
            if f.get("hidden"):      # the terminal keeps it hidden; faults.csv and summary.json have it
                continue
            what = f["description"]
            if f["frames_seen"] is not None:
                what += f": {f['frames_dropped']} of {f['frames_seen']} frames dropped"
                if f["drop_fraction_measured"] is not None:
                    what += f" ({f['drop_fraction_measured']:.4f})"
            elif f["rate_applied_mbps"] is not None:
                what += f": {f['rate_applied_mbps']:g} of {f['nominal_mbps']:g} Mbit/s"
            elif f["flaps"] is not None:
                what += f": {f['flaps']} flaps, {f['down_s_total']:g} s down"
            if f["state"] == "not started":
                what += " (not started)"
            parts.append(what)
        if hidden:
            parts.append(f"{hidden} hidden fault(s) (in faults.csv)")
        return "faults: " + "; ".join(parts)
