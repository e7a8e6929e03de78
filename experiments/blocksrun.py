"""An incast in barrier-synchronised blocks (``traffic.incast_mode: blocks``): the agents' jobs,
and the round's tables and summary from their records (traffic.blocks).

Pure file-in / file-out code (no root, no live fabric): :func:`server_job` and
:func:`client_job` build the agents' JSON jobs; :func:`load_records` reads what they wrote;
:func:`block_rows` and :func:`connection_rows` join the client's blocks with the servers'
per-block TCP deltas; :func:`blocks_summary` is the summary's ``blocks`` section;
:func:`round_row` one row of blocks_rounds.csv.
"""
from __future__ import annotations

import json
from pathlib import Path

from common.stats import sample_percentiles
from experiments.tables import percentile

#: The agents' role names in a round's agents/ folder: ``<host>.srv.json``, ``<host>.cli.json``.
SERVER_ROLE, CLIENT_ROLE = "srv", "cli"

#: blocks.csv: one row per block (times in seconds from the common start).
BLOCK_COLUMNS = ("block", "start_s", "end_s", "duration_s", "bytes", "complete", "goodput_mbps", "retrans",
                 "timeouts", "loss_probes", "connections_with_timeout", "rto_time_ms", "slowest_sender",
                 "slowest_last_byte_s")
#: block_connections.csv: one row per block and sender.
CONNECTION_COLUMNS = ("block", "sender", "bytes", "first_byte_s", "last_byte_s", "retrans", "timeouts",
                      "rto_recoveries", "rto_time_ms", "loss_probes")
#: blocks_rounds.csv: one row per round.
ROUND_COLUMNS = ("round", "name", "senders", "block_bytes", "rto_min_ms", "delayed_ack", "congestion_control",
                 "blocks", "complete", "goodput_median_mbps", "goodput_p5_mbps", "goodput_p95_mbps",
                 "goodput_min_mbps", "goodput_overall_mbps", "fraction_of_link", "block_time_median_s",
                 "block_time_p99_s", "retransmissions_total", "timeouts_total", "blocks_with_timeout",
                 "bottleneck_drops", "total_drops", "peak_backlog_packets", "folder")


def server_job(port: int, deadline_unix_s: float, out: Path, dscp: int) -> dict:
    """A ``blocks-server`` job (traffic.blocks): one client connection on ``port``, ending at
    ``deadline_unix_s`` at the latest, its record written to ``out``."""
    return {"role": "blocks-server", "port": port, "expect_connections": 1, "deadline_unix_s": deadline_unix_s,
            "dscp": dscp, "out": str(out)}


def client_job(servers: list[dict], traffic, deadline_unix_s: float, out: Path) -> dict:
    """A ``blocks-client`` job (traffic.blocks) for a round's resolved ``traffic`` section
    (experiments.model.Round.traffic: ``block_bytes``, ``blocks``, ``duration_s``, ``dscp``).

    Args:
        servers: ``[{"host", "ip", "port"}, ...]``, one per sender.
        deadline_unix_s: the client stops there, a block in flight or not.
    """
    return {"role": "blocks-client", "servers": servers, "block_bytes": traffic.block_bytes,
            "blocks": traffic.blocks, "duration_s": traffic.duration_s, "deadline_unix_s": deadline_unix_s,
            "dscp": traffic.dscp, "out": str(out)}


def load_records(agent_dir: Path, receiver: str, senders: list[str], codes: dict[str, int]) -> tuple[dict, dict]:
    """The client's and every server's record from ``agent_dir``: ``(client, {sender: server})``;
    a missing or unreadable record is ``{"error": ...}`` naming the agent and its exit code
    (``codes``: ``{"<host>.srv"|"<host>.cli": exit code}``)."""
    def load(name):
        try:
            return json.loads((Path(agent_dir) / f"{name}.json").read_text())
        except (OSError, ValueError) as e:
            return {"error": f"no result from {name} ({e.__class__.__name__}; exit {codes.get(name)})"}
    return (load(f"{receiver}.{CLIENT_ROLE}"),
            {s: load(f"{s}.{SERVER_ROLE}") for s in senders})


def _server_blocks(server: dict) -> dict[int, dict]:
    """``{block number: the server's record of it}`` on its (one) connection."""
    conns = server.get("connections") or []
    return {b["block"]: b for c in conns[:1] for b in c["blocks"]}


def connection_rows(client: dict, servers: dict) -> list[dict]:
    """One row per block and sender (:data:`CONNECTION_COLUMNS`): the bytes the client got on
    that connection, its first and last byte (seconds from the start), and the server's TCP
    deltas for that block (None where the server has no record of it)."""
    t0 = client.get("start_at_unix_s") or 0.0
    served = {h: _server_blocks(s) for h, s in servers.items()}

    def rel(t):
        return t - t0 if t is not None else None
    rows = []
    for b in client.get("blocks", []):
        for c in b["connections"]:
            x = served.get(c["host"], {}).get(b["block"], {})
            rows.append({"block": b["block"], "sender": c["host"], "bytes": c["bytes"],
                         "first_byte_s": rel(c["first_byte_unix_s"]), "last_byte_s": rel(c["last_byte_unix_s"]),
                         **{k: x.get(k) for k in ("retrans", "timeouts", "rto_recoveries", "rto_time_ms",
                                                  "loss_probes")}})
    return rows


def block_rows(client: dict, conn_rows: list[dict]) -> list[dict]:
    """One row per block (:data:`BLOCK_COLUMNS`), times in seconds from the start: the client's
    times, bytes and goodput, the senders' retransmissions and timeouts summed over the block
    (None when no sender recorded them), how many connections had a timeout, and the sender
    whose last byte came last (the block's straggler)."""
    t0 = client.get("start_at_unix_s") or 0.0
    per_block: dict[int, list[dict]] = {}
    for r in conn_rows:
        per_block.setdefault(r["block"], []).append(r)

    def total(rows, key):
        vals = [r[key] for r in rows if r[key] is not None]
        return sum(vals) if vals else None
    rows = []
    for b in client.get("blocks", []):
        cs = per_block.get(b["block"], [])
        last = max((r for r in cs if r["last_byte_s"] is not None), key=lambda r: r["last_byte_s"], default=None)
        rows.append({"block": b["block"], "start_s": b["start_unix_s"] - t0,
                     "end_s": b["end_unix_s"] - t0 if b["end_unix_s"] is not None else None,
                     "duration_s": b["duration_s"], "bytes": b["bytes"], "complete": b["complete"],
                     "goodput_mbps": b["goodput_mbps"], "retrans": total(cs, "retrans"),
                     "timeouts": total(cs, "timeouts"), "loss_probes": total(cs, "loss_probes"),
                     "connections_with_timeout": sum(1 for r in cs if r["timeouts"]),
                     "rto_time_ms": total(cs, "rto_time_ms"),
                     "slowest_sender": last["sender"] if last else None,
                     "slowest_last_byte_s": last["last_byte_s"] if last else None})
    return rows


def blocks_summary(client: dict, servers: dict, rows: list[dict], receiver_rate_mbps: float | None) -> dict:
    """The summary's ``blocks`` section.

    Args:
        client, servers: :func:`load_records`.
        rows: :func:`block_rows`.
        receiver_rate_mbps: the receiver's link rate (the ideal block time's bottleneck), or None.

    Returns:
        ``{"senders", "block_bytes", "count", "complete", "stopped_by", "errors",
        "goodput_mbps" (per complete block, Mbit/s of payload), "goodput_mbps_stats" ({median,
        p5, p95, min}), "goodput_overall_mbps" (every block's bytes over the time from the first
        block's start to the last one's end), "fraction_of_link" (that over the receiver's rate),
        "bytes_total", "time_total_s", "block_time_s" ({median, p99, max}), "ideal_block_time_s"
        (senders x block_bytes at the receiver's rate), "retransmissions", "timeouts" (per
        block), "retransmissions_total", "timeouts_total", "blocks_with_timeout", "loss_probes" (per
        block: tail loss probes, whose timer is bounded by the RTO), "loss_probes_total",
        "blocks_with_timer_recovery" (blocks with a timeout or a loss probe), "timeouts_method", "all_connected_before_start", "active_opens_after_start",
        "handshake_retrans"}``.
    """
    done = [r for r in rows if r["complete"]]
    good = [r["goodput_mbps"] for r in done if r["goodput_mbps"] is not None]
    times = [r["duration_s"] for r in done]
    stats = sample_percentiles(good, (5, 50, 95))
    span = (max(r["end_s"] for r in done) - min(r["start_s"] for r in done)) if done else None
    total_bytes = sum(r["bytes"] for r in done)
    overall = total_bytes * 8 / span / 1e6 if span else None
    n, size = client.get("senders"), client.get("block_bytes")
    methods = sorted({s["timeouts_method"] for s in servers.values() if s.get("timeouts_method")})
    errors = [e for e in [client.get("error")] + [s.get("error") for s in servers.values()]
              + [c.get("error") for s in servers.values() for c in s.get("connections", [])] if e]
    retrans = [r["retrans"] for r in rows]
    timeouts = [r["timeouts"] for r in rows]
    probes = [r.get("loss_probes") for r in rows]
    return {
        "senders": n, "block_bytes": size, "count": len(rows), "complete": bool(client.get("complete")),
        "stopped_by": client.get("stopped_by"), "errors": errors,
        "goodput_mbps": good,
        "goodput_mbps_stats": {"median": stats["p50"], "p5": stats["p5"], "p95": stats["p95"], "min": min(good)}
        if stats else None,
        "goodput_overall_mbps": overall,
        "fraction_of_link": overall / receiver_rate_mbps if overall is not None and receiver_rate_mbps else None,
        "bytes_total": total_bytes, "time_total_s": span,
        "block_time_s": {"median": percentile(times, 50), "p99": percentile(times, 99),
                         "max": max(times) if times else None},
        "ideal_block_time_s": n * size * 8 / (receiver_rate_mbps * 1e6) if n and size and receiver_rate_mbps else None,
        "retransmissions": retrans, "timeouts": timeouts,
        "retransmissions_total": sum(x for x in retrans if x is not None),
        "timeouts_total": sum(x for x in timeouts if x is not None),
        "blocks_with_timeout": sum(1 for x in timeouts if x),
        "loss_probes": probes, "loss_probes_total": sum(x for x in probes if x is not None),
        "blocks_with_timer_recovery": sum(1 for t, p in zip(timeouts, probes) if t or p),
        "timeouts_method": methods[0] if len(methods) == 1 else methods or None,
        "all_connected_before_start": client.get("all_connected_before_start"),
        "active_opens_after_start": client.get("active_opens_after_start"),
        "handshake_retrans": sum(c.get("handshake_retrans") or 0 for c in client.get("connections", [])),
    }


def format_line(b: dict) -> str:
    """The ``blocks`` section in one line for the terminal."""
    g, t = b.get("goodput_mbps_stats"), b["block_time_s"]
    if not g:
        return f"blocks: {b['count']} of {b['senders']} x {b['block_bytes']} B, none complete ({b['stopped_by']})"
    frac = f" ({100 * b['fraction_of_link']:.0f}% of the receiver's link)" if b.get("fraction_of_link") else ""
    return (f"blocks: {b['count']} x {b['senders']} senders x {b['block_bytes']} B, goodput median "
            f"{g['median']:.2f} Mbit/s (p5 {g['p5']:.2f}, min {g['min']:.2f}), overall "
            f"{b['goodput_overall_mbps']:.2f} Mbit/s{frac}; block time median {t['median'] * 1e3:.1f} ms, "
            f"p99 {t['p99'] * 1e3:.1f} ms; {b['retransmissions_total']} retransmissions, "
            f"{b['timeouts_total']} timeouts in {b['blocks_with_timeout']} blocks, {b.get('loss_probes_total')} tail "
            f"loss probes; connections set up before the "
            f"start: {b['all_connected_before_start']}")


def round_row(i: int, rnd, s: dict, folder: str) -> dict:
    """One row of blocks_rounds.csv (:data:`ROUND_COLUMNS`) from round ``i``'s resolved round
    ``rnd`` (experiments.model.Round) and its summary ``s``; ``folder`` is its results folder,
    relative to the run's."""
    b, bn = s["blocks"], s.get("bottleneck") or {}
    g = b.get("goodput_mbps_stats") or {}
    return {"round": i + 1, "name": rnd.name, "senders": b["senders"], "block_bytes": b["block_bytes"],
            "rto_min_ms": rnd.hosts.rto_min_ms, "delayed_ack": rnd.hosts.delayed_ack,
            "congestion_control": rnd.hosts.tcp_congestion_control, "blocks": b["count"], "complete": b["complete"],
            "goodput_median_mbps": g.get("median"), "goodput_p5_mbps": g.get("p5"),
            "goodput_p95_mbps": g.get("p95"), "goodput_min_mbps": g.get("min"),
            "goodput_overall_mbps": b["goodput_overall_mbps"], "fraction_of_link": b["fraction_of_link"],
            "block_time_median_s": b["block_time_s"]["median"], "block_time_p99_s": b["block_time_s"]["p99"],
            "retransmissions_total": b["retransmissions_total"], "timeouts_total": b["timeouts_total"],
            "blocks_with_timeout": b["blocks_with_timeout"], "bottleneck_drops": bn.get("drops"),
            "total_drops": s.get("total_drops"), "peak_backlog_packets": bn.get("peak_backlog_packets"),
            "folder": folder}


def format_rounds(rows: list[dict], out: Path) -> str:
    """blocks_rounds.csv's rows side by side, for the terminal."""
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    def ms(v):
        return f(v * 1e3 if v is not None else None, ".1f")
    lines = ["", f"== incast blocks, rounds ({out}) ==",
             f"{'round':<16} {'N':>3} {'block B':>8} {'RTOmin':>6} {'goodput med/p5 Mbit/s':>22} {'overall':>8} "
             f"{'block ms med/p99':>17} {'retx':>6} {'RTOs':>5} {'blk w/ RTO':>10}"]
    for r in rows:
        lines.append(f"{r['name'][:16]:<16} {r['senders']:>3} {r['block_bytes']:>8} {f(r['rto_min_ms'], 'd'):>6} "
                     f"{f(r['goodput_median_mbps'], '.2f') + '/' + f(r['goodput_p5_mbps'], '.2f'):>22} "
                     f"{f(r['goodput_overall_mbps'], '.2f'):>8} "
                     f"{ms(r['block_time_median_s']) + '/' + ms(r['block_time_p99_s']):>17} "
                     f"{f(r['retransmissions_total'], 'd'):>6} {f(r['timeouts_total'], 'd'):>5} "
                     f"{f(r['blocks_with_timeout'], 'd'):>10}")
    return "\n".join(lines)
