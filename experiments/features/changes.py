"""The controller API's changes (every round): what the REST API (controller.rest) accepted since
the last round, read at the round's end (``GET /fabriclab/changes``, with the run's token), and
how many requests it refused. Each accepted change (a fault, an ECN or PFC profile, a start, the
hosts: any request but a read, so a route added later too) becomes a row of the round's ``changes.csv`` and
an item of its summary's ``api_changes`` section, with its time, the request and its answer and
the client that sent it (``fabriclab-runner`` for the runner's own); a hidden fault's change is
there too (its body and the ids it got), in the round's results once the round is over, and the
terminal says only that a hidden one was made. A change the runner did not make is a warning: the
round's figures are of a fabric the scenario did not ask for. What the API accepted after the last
round is in the run's environment.json (``api_changes_after_rounds``).
"""
from __future__ import annotations

import json
import sys
import time

from common.errors import SetupError
from controller.rest import RUNNER_AGENT
from experiments.context import RoundRecord
from experiments.features.base import Feature
from experiments.tables import write_csv

#: changes.csv's columns (``at_s``: seconds from just before the round's traffic started;
#: negative: during the round's set-up or before it).
COLUMNS = ("round", "seq", "at_s", "at_unix_s", "method", "path", "client", "by_runner", "hidden", "body", "answer")


def change_rows(round_name: str, changes: list[dict], origin_unix_s: float) -> list[dict]:
    """One changes.csv row per accepted change (``controller.rest.ControlApi.changes`` items);
    ``body`` and ``answer`` as JSON text."""
    return [{"round": round_name, "seq": c["seq"], "at_s": round(c["at_unix_s"] - origin_unix_s, 4),
             "at_unix_s": round(c["at_unix_s"], 4), "method": c["method"], "path": c["path"],
             "client": c.get("client"), "by_runner": c.get("client") == RUNNER_AGENT,
             "hidden": bool(c.get("hidden")), "body": json.dumps(c.get("body"), sort_keys=True),
             "answer": json.dumps(c.get("answer"), sort_keys=True)} for c in changes]


def _what(row: dict) -> str:
    """``POST /fabriclab/faults at 3.21 s by curl/8.5.0`` (a hidden change says so, nothing more)."""
    return (f"{row['method']} {row['path']}{' (hidden)' if row['hidden'] else ''} at {row['at_s']:.2f} s "
            f"by {row['client'] or 'a client without a name'}")


class ApiChanges(Feature):
    """Every change the controller's API accepted, and every request it refused, per round
    (module docstring)."""
    name = "api_changes"

    def __init__(self, ctx):
        super().__init__(ctx)
        self._seen_seq = 0           # the last change already given to a round
        self._seen_refused = 0       # refused_total already given to a round
        self._t0 = time.time()

    def restore(self) -> None:
        """Nothing to restore: the changes are in each round's round.json."""

    def before_round(self, lf, rnd: RoundRecord) -> dict:
        """Note the round's origin (its changes' ``at_s`` count from here)."""
        self._t0 = time.time()
        return {}

    def _read(self, lf) -> dict:
        """The changes accepted and the requests refused since the last read (``changes``,
        ``refused``, ``refused_total``); SetupError when the controller does not answer."""
        got = lf.api.call("GET", "/changes", timeout_s=10, what="API changes")
        new = [c for c in got["changes"] if c["seq"] > self._seen_seq]
        self._seen_seq = max([self._seen_seq] + [c["seq"] for c in new])
        refused_total = got.get("refused_total", 0) - self._seen_refused
        refused = got.get("refused", [])[self._seen_refused:]
        self._seen_refused = got.get("refused_total", 0)
        return {"changes": new, "refused": refused, "refused_total": refused_total}

    def after_round(self, lf, rnd: RoundRecord) -> dict:
        """The changes accepted and the requests refused since the last round's end (the round's
        own, its set-up's and any made between rounds); ``error`` when the controller does not answer."""
        rec = {"origin_unix_s": self._t0, "changes": [], "refused": [], "refused_total": 0}
        try:
            return {**rec, **self._read(lf)}
        except SetupError as e:     # a dead controller: the control-plane check names it
            return {**rec, "error": str(e)}

    def after_rounds(self, lf) -> dict:
        """What the API accepted or refused after the last round's end, while that round was
        analysed (no round's figures saw it, but it is on record): the run's environment.json
        ``api_changes_after_rounds`` (``accepted``: the change records, ``refused``: how many), and
        a warning for each change the runner did not make; nothing when there was none."""
        try:
            got = self._read(lf)
        except SetupError as e:
            return {"api_changes_after_rounds": {"error": str(e)}}
        if not got["changes"] and not got["refused_total"]:
            return {}
        others = [c for c in got["changes"] if c.get("client") != RUNNER_AGENT]
        if others:
            print(f"fabriclab: WARNING: the controller's API accepted {len(others)} change(s) after the last round "
                  "(in environment.json api_changes_after_rounds): "
                  + "; ".join(f"{c['method']} {c['path']}{' (hidden)' if c.get('hidden') else ''} by "
                              f"{c.get('client') or 'a client without a name'}" for c in others[:5]),
                  file=sys.stderr)
        return {"api_changes_after_rounds": {"accepted": got["changes"], "refused": got["refused_total"]}}

    def summarize(self, rnd: RoundRecord, summary: dict) -> None:
        """``changes.csv`` and the summary's ``api_changes``: ``accepted`` (changes.csv's rows),
        ``not_by_runner`` (how many of them), ``refused`` (how many requests) and ``refused_requests``
        (method, path, code, client, ``at_s``)."""
        rec = rnd.features.get(self.name)
        if not rec:
            return
        t0 = rec["origin_unix_s"]
        rows = change_rows(rnd.round.name, rec["changes"], t0)
        write_csv(rnd.dir / "changes.csv", COLUMNS, rows)
        summary["api_changes"] = {
            "accepted": [{k: r[k] for k in COLUMNS if k != "round"} for r in rows],
            "not_by_runner": sum(not r["by_runner"] for r in rows),
            "refused": rec["refused_total"],
            "refused_requests": [{"at_s": round(r["at_unix_s"] - t0, 4), **{k: r.get(k) for k in
                                                                           ("method", "path", "code", "client")}}
                                 for r in rec["refused"]]}
        if rec.get("error"):
            summary["api_changes"]["error"] = f"the API's changes could not be read: {rec['error']}"

    def warnings(self, summary: dict) -> list[str]:
        """A change the runner did not make (the figures are of a fabric the scenario did not ask
        for); the requests refused; changes that could not be read."""
        a = summary.get("api_changes")
        if not a:
            return []
        out = [a["error"]] if a.get("error") else []
        others = [r for r in a["accepted"] if not r["by_runner"]]
        if others:
            out.append(f"the controller's API accepted {len(others)} change(s) the runner did not make during this round "
                       f"(its figures are of a fabric the scenario did not ask for; see changes.csv): "
                       + "; ".join(_what(r) for r in others[:5]) + (" ..." if len(others) > 5 else ""))
        if a["refused"]:
            out.append(f"the controller's API refused {a['refused']} request(s) without the run's token "
                       "(nothing changed; see summary.json api_changes.refused_requests)")
        return out

    def report(self, summary: dict) -> str | None:
        """``API: 1 change not by the runner (PUT /fabriclab/ecn at 2.10 s by curl/8.5.0); 3 refused``,
        only when there is one of either."""
        a = summary.get("api_changes")
        if not a or not (a["not_by_runner"] or a["refused"]):
            return None
        parts = []
        if a["not_by_runner"]:
            others = [r for r in a["accepted"] if not r["by_runner"]]
            parts.append(f"{len(others)} change(s) not by the runner (" + "; ".join(_what(r) for r in others[:3])
                         + (" ..." if len(others) > 3 else "") + ")")
        if a["refused"]:
            parts.append(f"{a['refused']} request(s) refused")
        return "API: " + "; ".join(parts)
