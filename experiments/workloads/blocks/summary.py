"""An incast in barrier-synchronised blocks (``traffic.incast_mode: blocks``): the round's tables and summary from their records (traffic.blocks).

Pure file-in / file-out code (no root, no live fabric): :func:`load_records` reads what they wrote;
:func:`block_rows` and :func:`connection_rows` join the client's blocks with the servers'
per-block TCP deltas; :func:`stall_rule` and :func:`classify_stall` decide which blocks stalled
and what stalled them; :func:`blocks_summary` is the summary's ``blocks`` section;
:func:`round_row` one row of blocks_rounds.csv.

Which blocks stalled, and why. A block *stalled* when it took longer than its ideal time by more
than one round trip through a full buffer (:class:`StallRule`): the ideal is every sender's
response on the wire (payload plus 66 bytes per segment, :func:`common.units.tcp_wire_bytes`)
through the receiver's link at its rate, the fan-in sharing it, plus one round trip for the
requests. The cause comes
from the counters the late senders' servers read over the block (traffic.blocks): ``rto`` when a
late connection had an RTO timeout, else ``tlp`` when it sent a tail loss probe (whose timer the
RTO bounds: with one segment out it waits out about RTOmin), else ``other`` (no timer fired: a
fast retransmission, a slow start, the hosts' CPU), ``unknown`` when a late sender left no
counters.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from common.stats import sample_percentiles
from common.units import FRAME_BYTES, TCP_FRAME_OVERHEAD_BYTES, tcp_wire_bytes
from experiments.tables import percentile
from experiments.workloads.blocks.plan import CLIENT_ROLE, SERVER_ROLE


#: blocks.csv: one row per block (times in seconds from the common start).
BLOCK_COLUMNS = ("block", "start_s", "end_s", "duration_s", "bytes", "complete", "goodput_mbps", "excess_s",
                 "stalled", "stall_cause", "late_senders", "longest_gap_s", "retrans", "timeouts", "loss_probes",
                 "connections_with_timeout", "rto_time_ms", "slowest_sender", "slowest_last_byte_s")


#: block_connections.csv: one row per block and sender.
CONNECTION_COLUMNS = ("block", "sender", "bytes", "first_byte_s", "last_byte_s", "retrans", "timeouts",
                      "rto_recoveries", "rto_time_ms", "loss_probes", "loss_probe_recoveries", "rto_at_request_ms",
                      "srtt_at_request_ms")


#: blocks_rounds.csv: one row per round.
ROUND_COLUMNS = ("round", "name", "senders", "block_bytes", "rto_min_ms", "delayed_ack", "congestion_control",
                 "blocks", "complete", "goodput_overall_mbps", "fraction_of_link", "goodput_median_mbps",
                 "goodput_p5_mbps", "goodput_p95_mbps", "goodput_min_mbps", "block_time_ideal_s",
                 "block_time_median_s", "block_time_p99_s", "stall_threshold_s", "blocks_stalled", "stalled_rto",
                 "stalled_tlp", "stalled_other", "stalled_unknown", "time_stalled_s", "retransmissions_total",
                 "timeouts_total", "blocks_with_timeout", "loss_probes_total", "bottleneck_drops", "total_drops",
                 "peak_backlog_packets", "folder")


#: What stalled a block (:func:`classify_stall`), strongest first.
STALL_CAUSES = ("rto", "tlp", "other", "unknown")


@dataclass(frozen=True)
class StallRule:
    """When a block stalled: its time exceeded ``ideal_s`` by more than ``threshold_s``.

    ``ideal_s`` = senders x :func:`common.units.tcp_wire_bytes` (block_bytes, ``mss_bytes``) x 8 /
    the receiver's rate + ``rtt_s`` (the requests' round trip). ``threshold_s`` = ``rtt_s`` +
    ``queue_s``, one round trip through a full buffer (the switch buffer at the receiver's rate):
    about what a loss repaired without a timer (a fast retransmission, sent after the duplicate
    acknowledgements came back through the queue and queued again) adds. A timer costs more: a
    tail loss probe fires two smoothed RTTs plus 2 jiffies after the last send (with one segment
    out, RTOmin more, up to the RTO), an RTO at least RTOmin. Measured on this machine kind (8 x
    8 KiB blocks at 10 Mbit/s into 16 packets, threshold 20.6-20.9 ms; 36 rounds at RTOmin 200, 50
    and 5 ms and of one sender alone, 720 blocks): of the 349 blocks whose last sender counted no
    timer, 10 exceeded their ideal by more than the threshold (at most 47 ms; median 3.7-6.7 ms
    per round kind), called ``other``; of the 371 whose last sender counted one, 27 by less (a
    probe that fired early costs little), not called stalled; the timers' median excess was
    262 ms (probe) and 250 ms (RTO) at RTOmin 200, 129 and 118 ms at 50, 54 and 120 ms at 5.
    A share of RTOmin would not separate them: the short probe's wait does not follow RTOmin.

    Attributes:
        ideal_s: the block's ideal time (seconds).
        threshold_s: the excess over ``ideal_s`` above which a block stalled (seconds).
        rate_mbps: the receiver's link rate; rtt_s: the measured round trip (seconds, 0 when not
            measured); queue_s: the buffer's drain time at that rate (seconds); mss_bytes:
            payload per segment.
    """
    ideal_s: float
    threshold_s: float
    rate_mbps: float
    rtt_s: float
    queue_s: float
    mss_bytes: int

    def as_dict(self) -> dict:
        """The rule as the summary records it."""
        return {"ideal_block_time_s": self.ideal_s, "stall_threshold_s": self.threshold_s,
                "rate_mbps": self.rate_mbps, "rtt_s": self.rtt_s, "queue_s": self.queue_s,
                "mss_bytes": self.mss_bytes}


def stall_rule(senders: int, block_bytes: int, rate_mbps: float, rtt_s: float | None, buffer_bytes: int,
               mss_bytes: int | None = None) -> StallRule:
    """The :class:`StallRule` of a round: ``senders`` x ``block_bytes`` (payload bytes each) per
    block into the receiver's ``rate_mbps`` link, a measured round trip ``rtt_s`` (None: 0), the
    switch buffer ``buffer_bytes`` and the senders' segment size ``mss_bytes`` (None: 1448).

    Raises:
        ValueError: ``senders``, ``block_bytes``, ``rate_mbps`` or ``buffer_bytes`` not positive.
    """
    if not (senders > 0 and block_bytes > 0 and rate_mbps > 0 and buffer_bytes > 0):
        raise ValueError(f"senders, block_bytes, rate_mbps and buffer_bytes must be > 0, got {senders}, "
                         f"{block_bytes}, {rate_mbps}, {buffer_bytes}")
    mss = mss_bytes or FRAME_BYTES - TCP_FRAME_OVERHEAD_BYTES
    rtt = rtt_s or 0.0
    queue = buffer_bytes * 8 / (rate_mbps * 1e6)
    ideal = senders * tcp_wire_bytes(block_bytes, mss) * 8 / (rate_mbps * 1e6) + rtt
    return StallRule(ideal_s=ideal, threshold_s=rtt + queue, rate_mbps=rate_mbps, rtt_s=rtt, queue_s=queue,
                     mss_bytes=mss)


def classify_stall(duration_s: float | None, start_s: float, conns: list[dict], rule: StallRule | None) -> dict:
    """Whether one block stalled under ``rule`` and what stalled it.

    Args:
        duration_s: the block's time (seconds; None: it did not complete).
        start_s: its start (seconds from the common start, as ``conns``' times).
        conns: its rows of block_connections.csv (:func:`connection_rows`: ``sender``,
            ``last_byte_s``, ``timeouts``, ``loss_probes``; None where unknown).
        rule: the round's :class:`StallRule` (None: no ideal, e.g. the receiver's rate unknown).

    Returns:
        ``{"excess_s" (the time beyond ``rule.ideal_s``), "stalled" (bool), "stall_cause" (one
        of :data:`STALL_CAUSES`, None when not stalled), "late_senders" (the senders whose last
        byte came after the ideal time plus the threshold, the last one always among them when
        the block stalled, space-separated)}``, every value None when ``duration_s`` or ``rule``
        is None. The cause is the strongest timer the late senders' servers counted over the
        block: an RTO, else a tail loss probe, else ``other`` when every late sender's counters
        are known, else ``unknown``.
    """
    if duration_s is None or rule is None:
        return {"excess_s": None, "stalled": None, "stall_cause": None, "late_senders": None}
    excess = duration_s - rule.ideal_s
    if excess <= rule.threshold_s:
        return {"excess_s": excess, "stalled": False, "stall_cause": None, "late_senders": ""}
    done = [c for c in conns if c["last_byte_s"] is not None]
    cut = start_s + rule.ideal_s + rule.threshold_s
    late = [c for c in done if c["last_byte_s"] > cut]
    last = max(done, key=lambda c: c["last_byte_s"], default=None)
    if last is not None and last not in late:
        late.append(last)
    if any(c["timeouts"] for c in late):
        cause = "rto"
    elif any(c["loss_probes"] for c in late):
        cause = "tlp"
    elif late and all(c["timeouts"] is not None and c["loss_probes"] is not None for c in late):
        cause = "other"
    else:
        cause = "unknown"
    return {"excess_s": excess, "stalled": True, "stall_cause": cause,
            "late_senders": " ".join(str(c["sender"]) for c in late)}


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


def senders_mss_bytes(servers: dict) -> int | None:
    """The smallest segment size (payload bytes, tcpi_snd_mss at accept) the servers recorded
    (``servers``: :func:`load_records`'s ``{sender: record}``); None when none did."""
    mss = [c["snd_mss"] for s in servers.values() for c in (s.get("connections") or [])[:1] if c.get("snd_mss")]
    return min(mss) if mss else None


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
                                                  "loss_probes", "loss_probe_recoveries", "rto_at_request_ms",
                                                  "srtt_at_request_ms")}})
    return rows


def block_rows(client: dict, conn_rows: list[dict], rule: StallRule | None = None) -> list[dict]:
    """One row per block (:data:`BLOCK_COLUMNS`), times in seconds from the start: the client's
    times, bytes, goodput and longest spell without a byte, whether the block stalled under
    ``rule`` and what stalled it (:func:`classify_stall`; None without a rule), the senders'
    retransmissions, timeouts and tail loss probes summed over the block (None when no sender
    recorded them), how many connections had a timeout, and the sender whose last byte came
    last (the block's straggler)."""
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
        start = b["start_unix_s"] - t0
        rows.append({"block": b["block"], "start_s": start,
                     "end_s": b["end_unix_s"] - t0 if b["end_unix_s"] is not None else None,
                     "duration_s": b["duration_s"], "bytes": b["bytes"], "complete": b["complete"],
                     "goodput_mbps": b["goodput_mbps"], **classify_stall(b["duration_s"], start, cs, rule),
                     "longest_gap_s": b.get("longest_gap_s"), "retrans": total(cs, "retrans"),
                     "timeouts": total(cs, "timeouts"), "loss_probes": total(cs, "loss_probes"),
                     "connections_with_timeout": sum(1 for r in cs if r["timeouts"]),
                     "rto_time_ms": total(cs, "rto_time_ms"),
                     "slowest_sender": last["sender"] if last else None,
                     "slowest_last_byte_s": last["last_byte_s"] if last else None})
    return rows


def stall_counts(rows: list[dict]) -> dict:
    """How many of ``rows`` (:func:`block_rows`) stalled, by cause, and what they cost.

    Returns:
        ``{"blocks_stalled", "stalled_by" ({cause: blocks} for every one of
        :data:`STALL_CAUSES`), "time_stalled_s" (the stalled blocks' time beyond their ideal,
        seconds)}``; ``blocks_stalled`` and ``time_stalled_s`` are None when no row was
        classified (no stall rule).
    """
    judged = [r for r in rows if r.get("stalled") is not None]
    stalled = [r for r in judged if r["stalled"]]
    return {"blocks_stalled": len(stalled) if judged else None,
            "stalled_by": {c: sum(1 for r in stalled if r["stall_cause"] == c) for c in STALL_CAUSES},
            "time_stalled_s": sum(r["excess_s"] for r in stalled) if judged else None}


def blocks_summary(client: dict, servers: dict, rows: list[dict], receiver_rate_mbps: float | None,
                   rule: StallRule | None = None) -> dict:
    """The summary's ``blocks`` section.

    Args:
        client, servers: :func:`load_records`.
        rows: :func:`block_rows` (classified under ``rule``).
        receiver_rate_mbps: the receiver's link rate, or None.
        rule: the round's :class:`StallRule` (None: stalls not judged, their counts None).

    Returns:
        ``{"senders", "block_bytes", "count", "complete", "stopped_by", "errors",
        "goodput_overall_mbps" (every complete block's bytes over the time from the first
        block's start to the last one's end: the block phase), "fraction_of_link" (that over
        the receiver's rate), "goodput_mbps" (per complete block, Mbit/s of payload),
        "goodput_mbps_stats" ({median, p5, p95, min}), "bytes_total", "time_total_s",
        "block_time_s" ({median, p99, max}), "ideal_block_time_s" (the rule's ideal),
        "stall_rule" (:meth:`StallRule.as_dict`), "blocks_stalled", "stalled_by",
        "time_stalled_s" (:func:`stall_counts`), "stalled_share_of_time" (that over
        ``time_total_s``), "retransmissions", "timeouts" (per block), "retransmissions_total",
        "timeouts_total", "blocks_with_timeout", "loss_probes" (per block: tail loss probes, whose
        timer is bounded by the RTO), "loss_probes_total", "blocks_with_timer_recovery" (blocks
        with a timeout or a loss probe, stalled or not), "timeouts_method",
        "loss_probes_method", "tcp_info_fields" (the struct tcp_info counters the servers'
        kernel offered), "all_connected_before_start", "active_opens_after_start",
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

    def one(key):
        vals = sorted({json.dumps(s[key]) for s in servers.values() if s.get(key) is not None})
        return json.loads(vals[0]) if len(vals) == 1 else [json.loads(v) for v in vals] or None
    errors = [e for e in [client.get("error")] + [s.get("error") for s in servers.values()]
              + [c.get("error") for s in servers.values() for c in s.get("connections", [])] if e]
    retrans = [r["retrans"] for r in rows]
    timeouts = [r["timeouts"] for r in rows]
    probes = [r.get("loss_probes") for r in rows]
    stalls = stall_counts(rows)
    return {
        "senders": n, "block_bytes": size, "count": len(rows), "complete": bool(client.get("complete")),
        "stopped_by": client.get("stopped_by"), "errors": errors,
        "goodput_overall_mbps": overall,
        "fraction_of_link": overall / receiver_rate_mbps if overall is not None and receiver_rate_mbps else None,
        "goodput_mbps": good,
        "goodput_mbps_stats": {"median": stats["p50"], "p5": stats["p5"], "p95": stats["p95"], "min": min(good)}
        if stats else None,
        "bytes_total": total_bytes, "time_total_s": span,
        "block_time_s": {"median": percentile(times, 50), "p99": percentile(times, 99),
                         "max": max(times) if times else None},
        "ideal_block_time_s": rule.ideal_s if rule else None,
        "stall_rule": rule.as_dict() if rule else None,
        **stalls,
        "stalled_share_of_time": stalls["time_stalled_s"] / span
        if stalls["time_stalled_s"] is not None and span else None,
        "retransmissions": retrans, "timeouts": timeouts,
        "retransmissions_total": sum(x for x in retrans if x is not None),
        "timeouts_total": sum(x for x in timeouts if x is not None),
        "blocks_with_timeout": sum(1 for x in timeouts if x),
        "loss_probes": probes, "loss_probes_total": sum(x for x in probes if x is not None),
        "blocks_with_timer_recovery": sum(1 for t, p in zip(timeouts, probes) if t or p),
        "timeouts_method": one("timeouts_method"), "loss_probes_method": one("loss_probes_method"),
        "tcp_info_fields": one("tcp_info_fields"),
        "all_connected_before_start": client.get("all_connected_before_start"),
        "active_opens_after_start": client.get("active_opens_after_start"),
        "handshake_retrans": sum(c.get("handshake_retrans") or 0 for c in client.get("connections", [])),
    }


def format_stalls(b: dict) -> str:
    """The stall counts of a ``blocks`` section in words: ``"7 of 20 blocks stalled (RTO 1, TLP 6,
    other 0), 1.52 s beyond their ideal 56.4 ms"``, or why they were not judged."""
    if b.get("blocks_stalled") is None:
        return "stalls not judged (no ideal block time: the receiver's rate is unknown)"
    by = b["stalled_by"]
    unknown = f", unknown {by['unknown']}" if by.get("unknown") else ""
    return (f"{b['blocks_stalled']} of {b['count']} blocks stalled (RTO {by['rto']}, TLP {by['tlp']}, other "
            f"{by['other']}{unknown}), {b['time_stalled_s']:.2f} s beyond their ideal "
            f"{b['ideal_block_time_s'] * 1e3:.1f} ms")


def format_line(b: dict) -> str:
    """The ``blocks`` section in one line for the terminal."""
    g, t = b.get("goodput_mbps_stats"), b["block_time_s"]
    if not g:
        return f"blocks: {b['count']} of {b['senders']} x {b['block_bytes']} B, none complete ({b['stopped_by']})"
    frac = f" ({100 * b['fraction_of_link']:.0f}% of the receiver's link)" if b.get("fraction_of_link") else ""
    return (f"blocks: {b['count']} x {b['senders']} senders x {b['block_bytes']} B, goodput overall "
            f"{b['goodput_overall_mbps']:.2f} Mbit/s{frac}, per block median {g['median']:.2f} (p5 {g['p5']:.2f}, "
            f"min {g['min']:.2f}); block time median {t['median'] * 1e3:.1f} ms, p99 {t['p99'] * 1e3:.1f} ms; "
            f"{format_stalls(b)}; {b['retransmissions_total']} retransmissions, {b['timeouts_total']} timeouts in "
            f"{b['blocks_with_timeout']} blocks, {b.get('loss_probes_total')} tail loss probes; connections set up "
            f"before the start: {b['all_connected_before_start']}")


def round_row(i: int, rnd, s: dict, folder: str) -> dict:
    """One row of blocks_rounds.csv (:data:`ROUND_COLUMNS`) from round ``i``'s resolved round
    ``rnd`` (experiments.model.Round) and its summary ``s``; ``folder`` is its results folder,
    relative to the run's."""
    b, bn = s["blocks"], s.get("bottleneck") or {}
    g = b.get("goodput_mbps_stats") or {}
    by = b.get("stalled_by") or {}
    return {"round": i + 1, "name": rnd.name, "senders": b["senders"], "block_bytes": b["block_bytes"],
            "rto_min_ms": rnd.hosts.rto_min_ms, "delayed_ack": rnd.hosts.delayed_ack,
            "congestion_control": rnd.hosts.tcp_congestion_control, "blocks": b["count"], "complete": b["complete"],
            "goodput_overall_mbps": b["goodput_overall_mbps"], "fraction_of_link": b["fraction_of_link"],
            "goodput_median_mbps": g.get("median"), "goodput_p5_mbps": g.get("p5"),
            "goodput_p95_mbps": g.get("p95"), "goodput_min_mbps": g.get("min"),
            "block_time_ideal_s": b.get("ideal_block_time_s"),
            "block_time_median_s": b["block_time_s"]["median"], "block_time_p99_s": b["block_time_s"]["p99"],
            "stall_threshold_s": (b.get("stall_rule") or {}).get("stall_threshold_s"),
            "blocks_stalled": b.get("blocks_stalled"),
            **{f"stalled_{c}": by.get(c) if b.get("blocks_stalled") is not None else None for c in STALL_CAUSES},
            "time_stalled_s": b.get("time_stalled_s"),
            "retransmissions_total": b["retransmissions_total"], "timeouts_total": b["timeouts_total"],
            "blocks_with_timeout": b["blocks_with_timeout"], "loss_probes_total": b.get("loss_probes_total"),
            "bottleneck_drops": bn.get("drops"), "total_drops": s.get("total_drops"),
            "peak_backlog_packets": bn.get("peak_backlog_packets"), "folder": folder}


def format_rounds(rows: list[dict], out: Path) -> str:
    """blocks_rounds.csv's rows side by side, for the terminal: goodput over the block phase
    beside the per-block median and p5, block times beside the ideal, the blocks that stalled
    and what stalled them (RTO, tail loss probe, other; ``?``: a late sender left no counters),
    and the retransmissions, RTOs and tail loss probes counted."""
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    def ms(v):
        return f(v * 1e3 if v is not None else None, ".1f")
    lines = ["", f"== incast blocks, rounds ({out}) ==",
             f"{'':<16} {'':>3} {'':>8} {'':>6} {'goodput Mbit/s':^19} {'block ms':^20} "
             f"{'blocks stalled':^23} {'counted':^17}",
             f"{'round':<16} {'N':>3} {'block B':>8} {'RTOmin':>6} {'overall':>7} {'med/p5':>11} {'ideal':>6} "
             f"{'med/p99':>13} {'stalled':>7} {'RTO':>4} {'TLP':>4} {'other':>5} {'retx':>5} {'RTOs':>5} "
             f"{'TLPs':>5}"]
    for r in rows:
        other = f(r["stalled_other"], "d") + (f"+{r['stalled_unknown']}?" if r.get("stalled_unknown") else "")
        stalled = "-" if r["blocks_stalled"] is None else f"{r['blocks_stalled']}/{r['blocks']}"
        lines.append(f"{r['name'][:16]:<16} {r['senders']:>3} {r['block_bytes']:>8} {f(r['rto_min_ms'], 'd'):>6} "
                     f"{f(r['goodput_overall_mbps'], '.2f'):>7} "
                     f"{f(r['goodput_median_mbps'], '.2f') + '/' + f(r['goodput_p5_mbps'], '.2f'):>11} "
                     f"{ms(r['block_time_ideal_s']):>6} "
                     f"{ms(r['block_time_median_s']) + '/' + ms(r['block_time_p99_s']):>13} "
                     f"{stalled:>7} {f(r['stalled_rto'], 'd'):>4} {f(r['stalled_tlp'], 'd'):>4} {other:>5} "
                     f"{f(r['retransmissions_total'], 'd'):>5} {f(r['timeouts_total'], 'd'):>5} "
                     f"{f(r['loss_probes_total'], 'd'):>5}")
    return "\n".join(line.rstrip() for line in lines)
