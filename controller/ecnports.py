"""Applying ECN profiles to switch ports, for the controller (issue 5).

The runner writes an ECN plan (JSON) for the controller. Once the switches
have connected and their ports have queues, the runner asks the controller
to apply it (``{"start": true}``: the marker the plan names, every port's
profile), and later to change profiles during a run (``{"ports": {intf:
profile spec}}``: a K sweep on one fabric). Requests arrive as files in a
control folder (``req-<n>.json``); each is answered with ``ack-<n>.json``
(``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``), so the runner
knows a change took effect before it starts the next round.

Plan shape::

    {"marker": "bpf" | "red",
     "ports": {intf: {"rate_bps": float, "buffer_bytes": int, "burst_bytes": int,
                      "fifo": {"kind": "bfifo"|"pfifo", "limit": int},
                      "profile": <profile spec>}}}

Markers:
- ``bpf``: :mod:`controller.bpfmarker` on every port of the plan (profile
  ``off`` only counts); the map ids go to ``ecn_marker.json`` in the
  control folder so the runner can read the counters.
- ``red``: the kernel's RED with ``ecn nodrop`` replaces the FIFO under the
  port's HTB class for ``step``/``red`` profiles; ``off`` puts the FIFO back.
"""
from __future__ import annotations

import json
import logging
import socket
import time
from pathlib import Path

from common.ecn import EcnProfile, describe, from_spec
from common.errors import SetupError
from controller import dataplane
from controller.bpfmarker import BpfEcnMarker

LOG = logging.getLogger("fabriclab.controller.ecn")


class EcnPorts:
    """Applies an ECN plan (see the module docstring) to the root namespace's switch ports.

    Args:
        plan: the plan mapping.
        control_dir: folder for requests, acks and ``ecn_marker.json``.
        load_marker: () -> the BPF marker (default :meth:`BpfEcnMarker.load`); ``tc``: what installs
            RED and FIFO leaves (default :mod:`controller.dataplane`); ``ifindex``: interface name ->
            index. Component tests pass fakes (tests/unit/test_ecn_ports.py).

    Raises (from :meth:`apply`): SetupError naming the port and the kernel's or tc's message.
    """

    def __init__(self, plan: dict, control_dir: Path, load_marker=BpfEcnMarker.load, tc=dataplane,
                 ifindex=socket.if_nametoindex):
        self.plan = plan
        self.load_marker, self.tc, self.ifindex = load_marker, tc, ifindex
        self.marker_kind = plan["marker"]
        self.dir = Path(control_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.marker = None
        self.current: dict[str, EcnProfile] = {}
        self.seq = 0

    def start(self) -> dict:
        """Apply every port's initial profile; returns what ``ecn_marker.json`` records."""
        if self.marker_kind == "bpf":
            self.marker = self.load_marker()
            for intf in self.plan["ports"]:
                self.marker.attach(intf)
        n = self.apply({intf: p["profile"] for intf, p in self.plan["ports"].items()}, reset=True)
        record = {"marker": self.marker_kind, "ports": n}
        if self.marker is not None:
            record.update(self.marker.ids())
        tmp = self.dir / "ecn_marker.json.tmp"
        tmp.write_text(json.dumps(record))
        tmp.replace(self.dir / "ecn_marker.json")
        return record

    def apply(self, specs: dict, reset: bool = False) -> int:
        """Set the profiles ``{intf: spec}``; returns how many ports changed. SetupError on failure."""
        changed = 0
        for intf, spec in specs.items():
            port = self.plan["ports"].get(intf)
            if port is None:
                raise SetupError(f"ECN: {intf} is not a switch port of this fabric")
            prof = from_spec(spec)
            if self.marker_kind == "bpf":
                self.marker.configure(self.ifindex(intf), prof, port["rate_bps"], port["buffer_bytes"],
                                      port["burst_bytes"], reset=reset)
            elif prof.kind == "off":
                self.tc.install_fifo_leaf(intf, port["fifo"]["kind"], port["fifo"]["limit"])
            else:
                self.tc.install_red(intf, port["rate_bps"], port["buffer_bytes"], prof)
            if self.current.get(intf) != prof:
                changed += 1
            self.current[intf] = prof
        kinds = sorted({describe(p) for p in self.current.values()})
        LOG.info("ECN (%s marker): %d ports set; profiles now: %s", self.marker_kind, changed, "; ".join(kinds))
        return changed

    def poll(self) -> None:
        """Answer every pending request in the control folder, in order."""
        self.seq = answer_requests(self.dir, self.seq, self._handle, "ECN")

    def _handle(self, body: dict) -> dict:
        if body.get("start"):
            return {"ok": True, "record": self.start()}
        return {"ok": True, "applied": self.apply(body["ports"])}


def answer_requests(control_dir: Path, seq: int, handle, what: str) -> int:
    """Answer the requests ``req-<n>.json`` after number ``seq`` in ``control_dir`` with
    ``handle(body) -> ack`` (a failure's ack carries the error); returns the last number answered.
    The other side is :func:`request`."""
    d = Path(control_dir)
    while True:
        req = d / f"req-{seq + 1}.json"
        if not req.exists():
            return seq
        seq += 1
        try:
            ack = handle(json.loads(req.read_text()))
        except (SetupError, OSError, ValueError, KeyError, TypeError) as e:
            ack = {"ok": False, "error": str(e)}
            LOG.error("%s request %d failed: %s", what, seq, e)
        tmp = d / f"ack-{seq}.json.tmp"
        tmp.write_text(json.dumps(ack))
        tmp.replace(d / f"ack-{seq}.json")


def request(control_dir: Path, body: dict, timeout_s: float = 20.0, is_alive=lambda: True, what: str = "ECN") -> dict:
    """Send the controller one request (ECN: ``{"start": true}`` or ``{"ports": {intf: spec}}``; PFC:
    see controller.pfcports) through ``control_dir``; wait for its ack. ``what`` names it in errors.

    Raises:
        SetupError: the controller answered with an error, died, or did not answer in ``timeout_s``.
    """
    d = Path(control_dir)
    d.mkdir(parents=True, exist_ok=True)
    n = 1
    while (d / f"req-{n}.json").exists():
        n += 1
    tmp = d / f"req-{n}.json.tmp"
    tmp.write_text(json.dumps(body))
    tmp.replace(d / f"req-{n}.json")
    deadline = time.monotonic() + timeout_s
    ack = d / f"ack-{n}.json"
    while not ack.exists():
        if not is_alive():
            raise SetupError(f"{what} request: the controller died")
        if time.monotonic() > deadline:
            raise SetupError(f"{what} request: no answer from the controller within {timeout_s:g} s")
        time.sleep(0.02)
    res = json.loads(ack.read_text())
    if not res.get("ok"):
        raise SetupError(f"{what}: the controller could not apply it: {res.get('error')}")
    return res


def read_counters(control_dir: Path, ports: list[str]) -> dict[str, dict]:
    """Per-port marker counters of the running marker (from another process than the controller).

    BPF marker: packets, ect, not_ect, ce_in, marked, vq_drops, max_backlog_bytes. RED:
    marked, early, pdrop, other (tc's RED statistics; ports without RED now are absent).
    Returns {} when no marker runs.
    """
    path = Path(control_dir) / "ecn_marker.json"
    if not path.exists():
        return {}
    rec = json.loads(path.read_text())
    out = {}
    if rec["marker"] == "bpf":
        m = BpfEcnMarker.open_ids(rec)
        try:
            for intf in ports:
                c = m.read(socket.if_nametoindex(intf))
                if c is not None:
                    out[intf] = c
        finally:
            m.close()
    else:
        for intf in ports:
            c = dataplane.red_counters(intf)
            if c is not None:
                out[intf] = c
    return out
