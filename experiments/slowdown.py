"""Ideal flow completion times and FCT slowdown (pure: no root; reads the fabric map and a round's
environment record).

FCT slowdown, the result data-center congestion-control evaluations report (HPCC, Li et al.,
SIGCOMM 2019; Homa, Montazeri et al., SIGCOMM 2018), is a flow's completion time over the time
the same flow would take alone on the empty fabric, by flow-size bucket, median and p99.

The ideal of a kernel-TCP flow of S payload bytes on a path of links l (rates r_l, bottleneck
r_min = min r_l, k links) is what its bytes need on that path with nothing else on it::

    ideal_fct_s = 2 x sum_l (74 x 8 / r_l + d)          the handshake: SYN out, SYN-ACK back
                +     sum_l ( f x 8 / r_l + d)          the first data frame, stored and forwarded
                + (W - f) x 8 / r_min                   every other frame behind it at the bottleneck

with W = S + ceil(S / 1448) x 66 the flow's bytes on the wire (1448 bytes of TCP payload per
1514-byte frame, common.units.FRAME_BYTES), f = min(W, 1514) the first frame, 74 bytes a SYN's
or SYN-ACK's frame (with its options), and d the per-link latency beyond serialisation
(propagation, the switch's and the hosts' processing), taken from the idle full-frame RTT the
run measured before its rounds (``environment.json`` -> ``scale.measured_rtt_full_frame_s``,
between ``scale.rtt_probe_hosts``): that round trip is two full frames along the probe's path,
so ``d = max(0, (rtt / 2 - sum_probe 1514 x 8 / r_l) / k_probe)`` (0 when the probe's hosts are
not on record). On a path whose links share one rate the first and last terms are exact for a
store-and-forward pipeline (the last frame leaves the last link (k - 1) frame times after the
bottleneck sent it). The flow's path is the one its 5-tuple was traced on (flows.csv ``path``);
an untraced flow takes the equal-cost path that gives the smallest ideal.

Why not the base RTT plus S / r_min: at 10 Mbit/s a full frame takes 1.2 ms per link, so a
full-frame RTT across a leaf-spine-leaf path (4 links each way, ~10 ms) is far more than a
flow's fixed cost (a small-frame handshake, ~0.6 ms, plus one frame's pipeline fill, 3.6 ms);
the ideal would exceed what a one-packet flow really takes alone, and slowdown would fall to
~0.5 for short flows.
"""
from __future__ import annotations

import math

from common.units import FRAME_BYTES
from controller.routing import compute_routes, port_peers
from experiments.tables import percentile
from traffic.flowsizes import TCP_PAYLOAD_BYTES, size_buckets

#: Bytes of headers a full-size TCP frame carries besides its 1448 payload bytes (Ethernet 14,
#: IPv4 20, TCP 20 with the 12-byte timestamp option).
HEADER_BYTES = FRAME_BYTES - TCP_PAYLOAD_BYTES
#: A SYN's (and a SYN-ACK's) frame: 14 + 20 + 20 bytes of headers and 20 bytes of options (MSS,
#: SACK permitted, timestamps, window scale).
HANDSHAKE_FRAME_BYTES = 74
#: Most equal-cost paths of one host pair examined for an untraced flow's ideal.
MAX_PATHS = 64
#: How the ideal is computed (summary.json -> slowdown.ideal.formula).
FORMULA = ("2 x sum_l (74 B x 8 / r_l + d) + sum_l (f x 8 / r_l + d) + (W - f) x 8 / r_min; "
           "W = bytes + ceil(bytes / 1448) x 66, f = min(W, 1514), "
           "d = max(0, (measured_rtt_full_frame_s / 2 - sum_probe 1514 B x 8 / r_l) / k_probe)")


def wire_bytes(size_bytes: int) -> int:
    """Bytes on the wire of a TCP flow of ``size_bytes`` payload: every 1448 payload bytes (or
    fewer, the last) in one frame with :data:`HEADER_BYTES` of headers. 0 for 0.

    Raises:
        ValueError: a negative size.
    """
    if size_bytes < 0:
        raise ValueError(f"size must be >= 0, got {size_bytes}")
    return size_bytes + math.ceil(size_bytes / TCP_PAYLOAD_BYTES) * HEADER_BYTES


def ideal_fct_s(size_bytes: int, link_rates_bps: list[float], link_latency_s: float = 0.0) -> float:
    """The completion time in seconds of a ``size_bytes`` TCP flow alone on a path whose links run
    at ``link_rates_bps`` (bit/s, in path order, host link first), each adding ``link_latency_s``
    beyond serialisation: the handshake, the first frame stored and forwarded over every link,
    the rest at the bottleneck (module docstring).

    Raises:
        ValueError: no links, a rate not positive, a negative latency or size.
    """
    if not link_rates_bps or any(not r > 0 for r in link_rates_bps) or link_latency_s < 0:
        raise ValueError(f"need positive link rates and a latency >= 0, got {link_rates_bps}, {link_latency_s}")
    w = wire_bytes(size_bytes)
    first = min(w, FRAME_BYTES)
    hop = sum(8 / r for r in link_rates_bps)                  # seconds per byte, summed over the links
    k = len(link_rates_bps)
    return (2 * (HANDSHAKE_FRAME_BYTES * hop + k * link_latency_s) + first * hop + k * link_latency_s
            + (w - first) * 8 / min(link_rates_bps))


def _port_rate_bps(fabric_map: dict) -> dict[tuple[str, str], float]:
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
    rate = _port_rate_bps(fabric_map)
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


def link_latency_s(env: dict, fabric_map: dict, routes: dict, peer: dict | None = None) -> float:
    """d of the ideal (seconds per link beyond serialisation) from a round's environment record:
    half the idle full-frame RTT (``scale.measured_rtt_full_frame_s``) less the probe path's
    serialisation of one full frame, over its links (``scale.rtt_probe_hosts``; of its
    equal-cost paths, the one giving the smallest d), at least 0. 0 when either is not on record."""
    scale = env.get("scale") or {}
    rtt, probe = scale.get("measured_rtt_full_frame_s"), scale.get("rtt_probe_hosts")
    if not rtt or not probe:
        return 0.0
    try:
        paths = equal_cost_rates_bps(fabric_map, routes, probe[0], probe[1], peer)
    except (KeyError, ValueError):
        return 0.0
    return min((max(0.0, (rtt / 2 - sum(FRAME_BYTES * 8 / r for r in rates)) / len(rates)) for rates in paths),
               default=0.0)


def add_ideal_fct(flows: list[dict], plan: list[dict], fabric_map: dict, env: dict, routing: str = "ecmp"
                  ) -> dict | None:
    """Set ``ideal_fct_s`` and ``slowdown`` (``fct_s / ideal_fct_s``) on every TCP flow row of a
    sized plan (every planned flow has ``bytes``): the ideal of its planned bytes on its traced
    path (flows.csv ``path``), else on the equal-cost path with the smallest ideal; ``slowdown``
    only for complete flows. Rows of other plans (time-limited flows), UDP rows and flows whose
    path cannot be found keep None.

    Args:
        flows: flows.csv rows (``flow_id``, ``src``, ``dst``, ``transport``, ``fct_s``,
            ``complete``, ``path``), changed in place.
        plan: the round's flow plan (``flow_id``, ``bytes``).
        env: the round's environment record (``scale``: the measured RTT and its probe's hosts).
        routing: the run's routing mode (``ecmp`` or ``single``).

    Returns:
        ``{"formula", "link_latency_s", "rtt_full_frame_s", "rtt_probe_hosts"}`` (the model the
        ideals come from), or None when the plan is not sized.
    """
    size = {p["flow_id"]: p.get("bytes") for p in plan}
    if not plan or any(b is None for b in size.values()):
        return None
    routes = compute_routes(fabric_map, routing)
    peer = port_peers(fabric_map)
    d = link_latency_s(env, fabric_map, routes, peer)
    paths: dict[tuple[str, str], list[list[float]]] = {}
    for f in flows:
        b = size.get(f["flow_id"])
        if b is None or f.get("transport") not in (None, "tcp"):
            continue
        rates = traced_rates_bps(fabric_map, f.get("path") or "")
        if rates is not None:
            ideal = ideal_fct_s(b, rates, d)
        else:
            pair = (f["src"], f["dst"])
            if pair not in paths:
                try:
                    paths[pair] = equal_cost_rates_bps(fabric_map, routes, *pair, peer=peer)
                except (KeyError, ValueError):
                    paths[pair] = []
            if not paths[pair]:
                continue
            ideal = min(ideal_fct_s(b, r, d) for r in paths[pair])
        f["ideal_fct_s"] = ideal
        if f.get("complete") and f.get("fct_s"):
            f["slowdown"] = f["fct_s"] / ideal
    scale = env.get("scale") or {}
    return {"formula": FORMULA, "link_latency_s": d, "rtt_full_frame_s": scale.get("measured_rtt_full_frame_s"),
            "rtt_probe_hosts": scale.get("rtt_probe_hosts")}


def slowdown_summary(flows: list[dict], plan: list[dict], ideal: dict) -> dict | None:
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
