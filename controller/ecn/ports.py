"""Applying ECN profiles to switch ports, for the controller.

The runner writes an ECN plan (JSON) for the controller. Once the switches
have connected and their ports have queues, the runner asks the controller
to apply it (``POST /fabriclab/ecn/start``: the marker the plan names, every
port's profile), and later to change profiles during a run (``PUT
/fabriclab/ecn`` with ``{"ports": {intf: profile spec}}``: a K sweep on one
fabric); see controller.rest. A change has taken effect when its answer
comes back.

Plan shape::

    {"marker": "bpf" | "red",
     "ports": {intf: {"rate_bps": float, "buffer_bytes": int, "burst_bytes": int,
                      "fifo": {"kind": "bfifo"|"pfifo", "limit": int},
                      "profile": <profile spec>}}}

Markers:
- ``bpf``: :mod:`controller.ecn.marker` on every port of the plan (profile
  ``off`` only counts); the map ids go to ``ecn_marker.json`` in the
  control folder (for inspection with bpftool); ``GET /fabriclab/ecn/counters``
  reads the counters.
- ``red``: the kernel's RED with ``ecn nodrop`` replaces the FIFO under the
  port's HTB class for ``step``/``red`` profiles; ``off`` puts the FIFO back.
"""
from __future__ import annotations

import json
import logging
import socket
from pathlib import Path

from common.ecn import EcnProfile, describe, parse_profile

from controller.dataplane import tcqdisc
from controller.ecn.marker import BpfEcnMarker
from controller.messages import EcnPlan

LOG = logging.getLogger("fabriclab.controller.ecn")


class EcnPorts:
    """Applies an ECN plan (see the module docstring) to the root namespace's switch ports.

    Args:
        plan: the plan mapping.
        control_dir: folder for ``ecn_marker.json`` (the marker's map ids).
        load_marker: () -> the BPF marker (default :meth:`BpfEcnMarker.load`); ``tc``: what installs
            RED and FIFO leaves (default :mod:`controller.dataplane`); ``ifindex``: interface name ->
            index. Component tests pass fakes (tests/unit/test_ecn_ports.py).

    Raises (from :meth:`apply`): SetupError naming the port and the kernel's or tc's message.
    """

    def __init__(self, plan: EcnPlan, control_dir: Path, load_marker=BpfEcnMarker.load, tc=tcqdisc,
                 ifindex=socket.if_nametoindex):
        self.plan = plan
        self.load_marker, self.tc, self.ifindex = load_marker, tc, ifindex
        self.marker_kind = plan.marker
        self.dir = Path(control_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.marker = None
        self.current: dict[str, EcnProfile] = {}

    def start(self) -> dict:
        """Apply every port's initial profile; returns what ``ecn_marker.json`` records. Every profile
        is checked against its port's buffer first (:meth:`check`): a wrong one raises before the
        marker is loaded or any port touched."""
        self.check({intf: p.profile for intf, p in self.plan.ports.items()})
        if self.marker_kind == "bpf":
            self.marker = self.load_marker()
            for intf in self.plan.ports:
                self.marker.attach(intf)
        n = self.apply({intf: p.profile for intf, p in self.plan.ports.items()}, reset=True)
        record = {"marker": self.marker_kind, "ports": n}
        if self.marker is not None:
            record.update(self.marker.ids())
        tmp = self.dir / "ecn_marker.json.tmp"
        tmp.write_text(json.dumps(record))
        tmp.replace(self.dir / "ecn_marker.json")
        return record

    def check(self, specs: dict) -> dict[str, EcnProfile]:
        """The profiles ``{intf: spec}`` parsed against each port's buffer, before anything is
        applied.

        Raises:
            LookupError: a port that is not a switch port of this fabric (named).
            ScenarioError: a malformed profile, or a threshold at or above the port's buffer
                (it could never mark), naming ``ecn.ports.<intf>...``.
        """
        out = {}
        for intf, spec in specs.items():
            port = self.plan.ports.get(intf)
            if port is None:
                raise LookupError(f"ECN: {intf} is not a switch port of this fabric")
            out[intf] = parse_profile(spec, port.buffer_bytes, f"ecn.ports.{intf}")
        return out

    def apply(self, specs: dict, reset: bool = False) -> int:
        """Set the profiles ``{intf: spec}`` (all checked first: :meth:`check`); returns how many
        ports changed. SetupError when the kernel or tc refuses."""
        changed = 0
        for intf, prof in self.check(specs).items():
            port = self.plan.ports[intf]
            if self.marker_kind == "bpf":
                self.marker.configure(self.ifindex(intf), prof, port.rate_bps, port.buffer_bytes,
                                      port.burst_bytes, reset=reset)
            elif prof.kind == "off":
                self.tc.install_fifo_leaf(intf, port.fifo.kind, port.fifo.limit)
            else:
                self.tc.install_red(intf, port.rate_bps, port.buffer_bytes, prof)
            if self.current.get(intf) != prof:
                changed += 1
            self.current[intf] = prof
        kinds = sorted({describe(p) for p in self.current.values()})
        LOG.info("ECN (%s marker): %d ports set; profiles now: %s", self.marker_kind, changed, "; ".join(kinds))
        return changed

    def counters(self) -> dict[str, dict]:
        """Per-port counters of the running marker. BPF marker: packets, ect, not_ect, ce_in,
        marked, vq_drops, max_backlog_bytes. RED: marked, early, pdrop, other (tc's RED
        statistics; ports without RED now are absent)."""
        out = {}
        for intf in self.plan.ports:
            c = self.marker.read(self.ifindex(intf)) if self.marker_kind == "bpf" else self.tc.red_counters(intf)
            if c is not None:
                out[intf] = c
        return out
