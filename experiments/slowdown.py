"""Ideal flow completion times and FCT slowdown (pure: no root; reads the fabric map and a round's
environment record).

FCT slowdown, the result data-center congestion-control evaluations report (HPCC, Li et al.,
SIGCOMM 2019; Homa, Montazeri et al., SIGCOMM 2018), is a flow's completion time over the time
the same flow takes alone on the empty fabric, by flow-size bucket, median and p99.

The ideal of a kernel-TCP flow of S payload bytes on a path of k links whose slowest runs at
r_min is what the emulated fabric gives it when nothing else runs::

    ideal_fct_s = min(1, k / k_probe) x (rtt_small + rtt_full / 2)
                + max(0, W - w_last - B) x 8 / r_min

- W = S + ceil(S / 1448) x 66: the flow's bytes on the wire (1448 bytes of TCP payload in each
  1514-byte frame, common.units.FRAME_BYTES); w_last: its last frame (the payload left over
  plus 66).
- The bytes term: the bottleneck sends every frame before the last at its rate. A port's shaper
  (HTB) sends a frame at once when its bucket is not negative and charges it afterwards, so on
  an idle path the first frame is not held for its own serialisation, frames behind it leave
  at the rate, the bucket's B bytes (the port's burst: ``queues.burst_bytes``, else
  common.units.shaper_burst_bytes of r_min and the machine's ``shaper.slack_s``) once early,
  and the last frame, spaced at the bottleneck's rate, passes every other idle port without
  waiting.
- The latency term, from the idle round trips the run measured before its rounds
  (``environment.json`` -> ``scale``, between ``rtt_probe_hosts``, a path of k_probe links): the
  handshake, a SYN and a SYN-ACK (small frames: the small ping, ``measured_rtt_s``), and the
  last frame's one-way trip (a lone full frame: half the full-frame ping,
  ``measured_rtt_full_frame_s``; on an idle path it is not serialised either, docs/scaling.md).
  A flow on a shorter path than the probe's takes them scaled by k / k_probe (the latency
  is per link: propagation, forwarding); a longer one takes them as measured, so the ideal stays
  a lower bound. Without a measured RTT the term is 0.

The flow's path is the one its 5-tuple was traced on (flows.csv ``path``); an untraced flow
takes the equal-cost path that gives the smallest ideal.

Why not "the flow's frames at the bottleneck rate plus the full-frame RTT": on this emulation an
idle port does not hold a lone frame for its serialisation (1.2 ms at 10 Mbit/s), so that form
counts about one frame time and half a round trip more than an idle fabric takes, and short flows
alone on the fabric would show slowdowns below 1.
"""
from __future__ import annotations

import math

from common.units import FRAME_BYTES, SHAPER_SLACK_S, shaper_burst_bytes
from controller.routing import compute_routes, port_peers
from experiments.tables import percentile
from traffic.flowsizes import TCP_PAYLOAD_BYTES, size_buckets

#: Bytes of headers a full-size TCP frame carries besides its 1448 payload bytes (Ethernet 14,
#: IPv4 20, TCP 20 with the 12-byte timestamp option).
HEADER_BYTES = FRAME_BYTES - TCP_PAYLOAD_BYTES
#: Most equal-cost paths of one host pair examined for an untraced flow's ideal.
MAX_PATHS = 64
#: How the ideal is computed (summary.json -> slowdown.ideal.formula).
FORMULA = ("min(1, k / k_probe) x (measured_rtt_s + measured_rtt_full_frame_s / 2) "
           "+ max(0, W - w_last - B) x 8 / r_min; W = bytes + ceil(bytes / 1448) x 66, w_last the last frame, "
           "B the bottleneck port's shaper burst, k the path's links")


def wire_bytes(size_bytes: int) -> int:
    """Bytes on the wire of a TCP flow of ``size_bytes`` payload: every 1448 payload bytes (or
    fewer, the last) in one frame with :data:`HEADER_BYTES` of headers. 0 for 0.

    Raises:
        ValueError: a negative size.
    """
    if size_bytes < 0:
        raise ValueError(f"size must be >= 0, got {size_bytes}")
    return size_bytes + math.ceil(size_bytes / TCP_PAYLOAD_BYTES) * HEADER_BYTES


def last_frame_bytes(size_bytes: int) -> int:
    """The wire bytes of a TCP flow's last frame (0 for an empty flow).

    Raises:
        ValueError: a negative size.
    """
    if size_bytes < 0:
        raise ValueError(f"size must be >= 0, got {size_bytes}")
    if size_bytes == 0:
        return 0
    return size_bytes - (math.ceil(size_bytes / TCP_PAYLOAD_BYTES) - 1) * TCP_PAYLOAD_BYTES + HEADER_BYTES


def ideal_fct_s(size_bytes: int, bottleneck_bps: float, latency_s: float = 0.0, burst_bytes: int = 0) -> float:
    """The completion time in seconds of a ``size_bytes`` TCP flow alone on the emulated fabric:
    ``latency_s`` (the handshake and the last frame's one-way trip on its path) plus every frame
    but the last at ``bottleneck_bps`` (bit/s), less the bottleneck port's ``burst_bytes``
    (module docstring).

    Raises:
        ValueError: a rate not positive, a negative latency, burst or size.
    """
    if not bottleneck_bps > 0 or latency_s < 0 or burst_bytes < 0:
        raise ValueError(f"need a positive rate, latency and burst >= 0, got {bottleneck_bps}, {latency_s}, "
                         f"{burst_bytes}")
    behind = wire_bytes(size_bytes) - last_frame_bytes(size_bytes) - burst_bytes
    return latency_s + max(0, behind) * 8 / bottleneck_bps


def _link_rate_bps(fabric_map: dict) -> dict[tuple[str, str], float]:
    """``{(node, next node): bit/s}`` of every link direction (parallel links: the fastest)."""
    out: dict[tuple[str, str], float] = {}
    for h in fabric_map["hosts"]:
        out[(h["name"], h["switch"])] = h["rate_mbps"] * 1e6
    for sw in fabric_map["switches"]:
        for p in sw["ports"]:
            key = (sw["name"], p["peer"])
            out[key] = max(out.get(key, 0.0), p["rate_mbps"] * 1e6)
    return out


def traced_rates_bps(fabric_map: dict, path: str) -> list[float] | None:
    """The link rates (bit/s) along a traced path ``"h2>leaf2>spine1>leaf1>h1"`` (flows.csv
    ``path``); None for anything else (an ``error: ...``, empty, or a link the map lacks)."""
    if not path or path.startswith("error") or ">" not in path:
        return None
    nodes = path.split(">")
    rate = _link_rate_bps(fabric_map)
    try:
        return [rate[(a, b)] for a, b in zip(nodes, nodes[1:])]
    except KeyError:
        return None


def equal_cost_rates_bps(fabric_map: dict, routes: dict, src: str, dst: str, peer: dict | None = None,
                         limit: int = MAX_PATHS) -> list[list[float]]:
    """The link rates (bit/s) of every equal-cost path from host ``src`` to host ``dst`` the
    routes allow (at most ``limit``, distinct rate sequences only), host link first.

    Raises:
        KeyError: unknown host. ValueError: the routes do not reach ``dst``.
    """
    hosts = {h["name"]: h for h in fabric_map["hosts"]}
    peer = peer or port_peers(fabric_map)
    ports = {(sw["name"], p["port"]): p["rate_mbps"] * 1e6 for sw in fabric_map["switches"] for p in sw["ports"]}
    s, d = hosts[src], hosts[dst]
    out: list[list[float]] = []
    stack = [(s["switch"], [s["rate_mbps"] * 1e6])]
    while stack and len(out) < limit:
        sw, rates = stack.pop()
        if len(rates) > len(fabric_map["switches"]) + 1:
            raise ValueError(f"routes from {src} to {dst} do not terminate")
        nxt = routes[sw].get(d["ip"])
        if not nxt:
            raise ValueError(f"no route at {sw} toward {dst}")
        for p in reversed(nxt):
            node, r = peer[(sw, p)], rates + [ports[(sw, p)]]
            if node == dst:
                if r not in out:
                    out.append(r)
            else:
                stack.append((node, r))
    return out


class IdealModel:
    """The ideal-FCT model of one round: the measured idle round trips, the probe's path length,
    the shaper's burst rule (module docstring).

    Args:
        env: the round's environment record: ``scale`` (``measured_rtt_s``,
            ``measured_rtt_full_frame_s``, ``rtt_probe_hosts``) and ``shaper.slack_s``; missing
            figures count as 0 (no latency) or the defaults (common.units.SHAPER_SLACK_S).
        fabric_map, routes, peer: the fabric and its routes (controller.routing).
        burst_bytes: the scenario's ``queues.burst_bytes`` (None: every port's own, from its rate).
    """

    def __init__(self, env: dict, fabric_map: dict, routes: dict, peer: dict, burst_bytes: int | None = None):
        scale = env.get("scale") or {}
        self.rtt_small_s = scale.get("measured_rtt_s") or 0.0
        self.rtt_full_s = scale.get("measured_rtt_full_frame_s") or 0.0
        self.probe = scale.get("rtt_probe_hosts")
        self.slack_s = (env.get("shaper") or {}).get("slack_s") or SHAPER_SLACK_S
        self.burst_bytes = burst_bytes
        self.probe_links = None
        if self.probe:
            try:
                self.probe_links = max(len(r) for r in equal_cost_rates_bps(fabric_map, routes, *self.probe, peer=peer))
            except (KeyError, ValueError):
                self.probe_links = None

    def latency_s(self, links: int) -> float:
        """The handshake and the last frame's one-way trip on a path of ``links`` links:
        ``min(1, links / k_probe) x (rtt_small + rtt_full / 2)`` (the probe's path unknown: 1)."""
        factor = min(1.0, links / self.probe_links) if self.probe_links else 1.0
        return factor * (self.rtt_small_s + self.rtt_full_s / 2)

    def burst(self, rate_bps: float) -> int:
        """The shaper burst in bytes of a port at ``rate_bps`` (as the run set it)."""
        return self.burst_bytes if self.burst_bytes is not None else shaper_burst_bytes(rate_bps, self.slack_s)

    def ideal_fct_s(self, size_bytes: int, rates_bps: list[float]) -> float:
        """:func:`ideal_fct_s` of a flow on a path with these link rates (bit/s)."""
        r = min(rates_bps)
        return ideal_fct_s(size_bytes, r, self.latency_s(len(rates_bps)), self.burst(r))

    def record(self) -> dict:
        """``{"formula", "rtt_small_s", "rtt_full_frame_s", "rtt_probe_hosts", "probe_links",
        "shaper_slack_s", "burst_bytes"}``: what the ideals come from (summary.json)."""
        return {"formula": FORMULA, "rtt_small_s": self.rtt_small_s, "rtt_full_frame_s": self.rtt_full_s,
                "rtt_probe_hosts": self.probe, "probe_links": self.probe_links, "shaper_slack_s": self.slack_s,
                "burst_bytes": self.burst_bytes}


def add_ideal_fct(flows: list[dict], plan: list[dict], fabric_map: dict, env: dict, routing: str = "ecmp",
                  burst_bytes: int | None = None) -> dict | None:
    """Set ``ideal_fct_s`` and ``slowdown`` (``fct_s / ideal_fct_s``) on every TCP flow row of a
    sized plan (every planned flow has ``bytes``): the ideal (:class:`IdealModel`) of its planned
    bytes on its traced path (flows.csv ``path``), else on the equal-cost path with the smallest
    ideal; ``slowdown`` only for complete flows. Rows of other plans (time-limited flows), UDP
    rows and flows whose path cannot be found keep None.

    Args:
        flows: flows.csv rows (``flow_id``, ``src``, ``dst``, ``transport``, ``fct_s``,
            ``complete``, ``path``), changed in place.
        plan: the round's flow plan (``flow_id``, ``bytes``).
        env: the round's environment record (``scale``: the measured RTTs and their probe's
            hosts; ``shaper.slack_s``).
        routing: the run's routing mode (a registered strategy; the ideal of a flow without a
            traced path is on the strategy's per-destination routes, its shortest paths).
        burst_bytes: the scenario's ``queues.burst_bytes`` (None: each port's own).

    Returns:
        :meth:`IdealModel.record` (what the ideals come from), or None when the plan is not sized.
    """
    size = {p["flow_id"]: p.get("bytes") for p in plan}
    if not plan or any(b is None for b in size.values()):
        return None
    routes = compute_routes(fabric_map, routing)
    peer = port_peers(fabric_map)
    model = IdealModel(env, fabric_map, routes, peer, burst_bytes)
    paths: dict[tuple[str, str], list[list[float]]] = {}
    for f in flows:
        b = size.get(f["flow_id"])
        if b is None or f.get("transport") not in (None, "tcp"):
            continue
        rates = traced_rates_bps(fabric_map, f.get("path") or "")
        if rates is not None:
            ideal = model.ideal_fct_s(b, rates)
        else:
            pair = (f["src"], f["dst"])
            if pair not in paths:
                try:
                    paths[pair] = equal_cost_rates_bps(fabric_map, routes, *pair, peer=peer)
                except (KeyError, ValueError):
                    paths[pair] = []
            if not paths[pair]:
                continue
            ideal = min(model.ideal_fct_s(b, r) for r in paths[pair])
        f["ideal_fct_s"] = ideal
        if f.get("complete") and f.get("fct_s") and ideal > 0:
            f["slowdown"] = f["fct_s"] / ideal
    return model.record()


def slowdown_summary(flows: list[dict], plan: list[dict], ideal: dict | None) -> dict | None:
    """``summary["slowdown"]``: the completed flows' slowdowns (``slowdown`` rows of
    :func:`add_ideal_fct`), median and p99 over all and per flow-size bucket
    (traffic.flowsizes.size_buckets: fixed decades of the planned bytes, from the smallest planned
    size's bucket to the largest's, empty buckets between included).

    Returns:
        ``{"median", "p99", "flows", "flows_without" (planned flows with no slowdown: incomplete
        or no ideal), "by_size": [{"bucket", "lo_bytes", "hi_bytes", "planned", "flows", "median",
        "p99"}], "ideal": ideal}`` (percentiles numpy's linear interpolation; None in an empty
        bucket), or None when ``ideal`` is None (not a sized plan) or no flow has a slowdown.
    """
    if ideal is None:
        return None
    size = {p["flow_id"]: p["bytes"] for p in plan}
    done = [(size[f["flow_id"]], f["slowdown"]) for f in flows if f.get("slowdown") is not None]
    if not done:
        return None
    buckets = size_buckets()

    def index(b: int) -> int:
        return next(i for i, (_, lo, hi) in enumerate(buckets) if b >= lo and (hi is None or b < hi))
    lo_i, hi_i = index(min(size.values())), index(max(size.values()))
    by_size = []
    for i in range(lo_i, hi_i + 1):
        label, lo, hi = buckets[i]
        x = [s for b, s in done if index(b) == i]
        by_size.append({"bucket": label, "lo_bytes": lo, "hi_bytes": hi,
                        "planned": sum(1 for b in size.values() if index(b) == i), "flows": len(x),
                        "median": percentile(x, 50), "p99": percentile(x, 99)})
    x = [s for _, s in done]
    return {"median": percentile(x, 50), "p99": percentile(x, 99), "flows": len(x),
            "flows_without": len(plan) - len(x), "by_size": by_size, "ideal": ideal}
