"""Incast as the literature runs it: persistent TCP connections and barrier-synchronised blocks.

In the incast studies (Phanishayee et al., "Measurement and analysis of TCP throughput collapse
in cluster-based storage systems", FAST 2008; Vasudevan et al., "Safe and effective fine-grained
TCP retransmissions for datacenter communication", SIGCOMM 2009) a client reads a data block
striped over N servers: it asks every server for its server request unit (SRU) at once over
connections opened long before, waits until every SRU has arrived (the barrier), then asks for
the next block. Connections set up at the synchronised start instead would put N handshakes into
the same full buffer as the data, and a lost SYN waits out the kernel's 1 s initial RTO: a
regime of the tool, not of the incast.

Two agent roles (run by traffic.agent; the job is JSON, the agent never reads the scenario):

- ``blocks-server`` (:func:`run_blocks_server`), on each sender host: ``{"port",
  "deadline_unix_s", "out", "dscp", "expect_connections" (default 1), "bind_ip" (default
  0.0.0.0)}``. Listens, prints READY, then serves: for each :data:`REQUEST` read on a
  connection (block number, byte count) it sends that many bytes back. It reads the start time
  from stdin whenever it comes (it must accept the client's connections before the start) and
  ends when every expected connection has closed, or at its deadline. Per connection and block
  it records the counter deltas of the block's data, read when the block's request arrives and
  when the next one does (so no event between two reads is missed): retransmissions
  (``tcpi_total_retrans``), RTO timeouts (``tcpi_total_rto``, kernel >= 6.7; on an older kernel
  the namespace's TcpExt TCPTimeouts, and ``timeouts_method`` says which), tail loss probes (the
  namespace's TcpExt TCPLossProbes: struct tcp_info has no loss-probe counter, up to 6.18 at
  least), and the RTO and smoothed RTT the connection had when the request came.
- ``blocks-client`` (:func:`run_blocks_client`), on the aggregator: ``{"servers": [{"host",
  "ip", "port"}, ...], "block_bytes", "blocks" (or None), "duration_s" (or None),
  "deadline_unix_s", "out", "dscp", "connect_timeout_s" (default 10)}``. Opens one connection to
  every server and keeps it, then prints READY; from the start time, block after block: sends a
  request on every connection at once, waits until every response is complete, records the
  block's times, goodput and the longest spell in which no byte arrived on any connection (a
  stalled link). Stops after ``blocks`` blocks or once ``duration_s`` has passed
  since the start (whichever comes first); the deadline always ends it.

All times are Unix seconds (every namespace shares the clock).
"""
from __future__ import annotations

import os
import selectors
import socket
import struct
import sys
import time

from traffic.sockets import tcp_active_opens, wait_until

#: A request: magic, block number (u32), bytes asked for (u64); 16 bytes, network order.
REQUEST = struct.Struct("!4sIQ")
MAGIC = b"BLK1"
#: Bytes per send() of a response.
CHUNK_BYTES = 64 * 1024
#: How much of struct tcp_info to ask for (the kernel returns at most its own size: 280 B on 6.18).
TCP_INFO_ASK_BYTES = 512
#: struct tcp_info must be at least this long to hold tcpi_total_rto, tcpi_total_rto_recoveries
#: and tcpi_total_rto_time (linux/tcp.h, kernel 6.7: u16 at 240, u16 at 242, u32 at 244).
TCP_INFO_RTO_BYTES = 248
#: The struct tcp_info fields this agent reads, with the byte just past each (linux/tcp.h):
#: :func:`tcp_info_fields` names those a kernel's struct holds. None counts tail loss probes: up
#: to kernel 6.18 (whose struct is 280 bytes, ending in AccECN counters) a loss probe shows in
#: struct tcp_info only as a retransmission, so the namespace's TcpExt counters count them.
TCP_INFO_FIELDS = (("tcpi_retransmits", 3), ("tcpi_backoff", 5), ("tcpi_rto", 12), ("tcpi_snd_mss", 20),
                   ("tcpi_rtt", 72), ("tcpi_total_retrans", 104), ("tcpi_total_rto", 242),
                   ("tcpi_total_rto_recoveries", 244), ("tcpi_total_rto_time", 248))
TIMEOUTS_FROM_KERNEL = "tcpi_total_rto"
TIMEOUTS_FROM_NAMESPACE = ("TcpExt TCPTimeouts of the server's network namespace (struct tcp_info has no "
                           "tcpi_total_rto before kernel 6.7): exact while the namespace holds only this "
                           "connection, as on the fabric (one server per sender host)")
LOSS_PROBES_METHOD = ("TcpExt TCPLossProbes of the server's network namespace (struct tcp_info has no "
                      "loss-probe counter): exact while the namespace holds only this connection")


def tcp_info_fields(tcp_info_bytes: int) -> list[str]:
    """The names of :data:`TCP_INFO_FIELDS` a struct tcp_info of ``tcp_info_bytes`` (what the
    kernel returned) holds, in struct order."""
    return [name for name, end in TCP_INFO_FIELDS if end <= tcp_info_bytes]


def parse_tcp_counters(raw: bytes) -> dict:
    """The counters of a struct tcp_info (linux/tcp.h) a block's record needs.

    Args:
        raw: ``getsockopt(IPPROTO_TCP, TCP_INFO, n)`` as returned (its length is the kernel's
            struct size or ``n``, whichever is smaller); at least 104 bytes.

    Returns:
        ``{"retransmits" (consecutive RTO retransmissions of the head segment now, u8),
        "backoff" (u8), "rto_us" (the retransmission timeout now, microseconds), "snd_mss"
        (payload bytes per full segment), "srtt_us" (smoothed RTT, microseconds), "total_retrans"
        (segments retransmitted over the connection's life), "total_rto",
        "total_rto_recoveries", "total_rto_time_ms"}``; the last three are None when ``raw`` is
        shorter than :data:`TCP_INFO_RTO_BYTES` (kernel < 6.7).

    Raises:
        ValueError: ``raw`` shorter than 104 bytes.
    """
    if len(raw) < 104:
        raise ValueError(f"struct tcp_info of {len(raw)} bytes: too short for tcpi_total_retrans")
    out = {"retransmits": raw[2], "backoff": raw[4], "rto_us": struct.unpack_from("=I", raw, 8)[0],
           "snd_mss": struct.unpack_from("=I", raw, 16)[0], "srtt_us": struct.unpack_from("=I", raw, 68)[0],
           "total_retrans": struct.unpack_from("=I", raw, 100)[0],
           "total_rto": None, "total_rto_recoveries": None, "total_rto_time_ms": None}
    if len(raw) >= TCP_INFO_RTO_BYTES:
        rto, recoveries, rto_time = struct.unpack_from("=HHI", raw, 240)
        out.update(total_rto=rto, total_rto_recoveries=recoveries, total_rto_time_ms=rto_time)
    return out


#: The namespace's TCP timer counters read at each block's boundaries (/proc/net/netstat, TcpExt):
#: RTOs, tail loss probes (whose timer is at most the RTO, so bounded by RTOmin too: a block's
#: last segments lost in an incast usually end this way) and the probes that repaired a loss.
NETSTAT_COUNTERS = {"TCPTimeouts": "ns_timeouts", "TCPLossProbes": "loss_probes",
                    "TCPLossProbeRecovery": "loss_probe_recoveries"}


def netstat_counters(path: str = "/proc/net/netstat") -> dict:
    """This network namespace's :data:`NETSTAT_COUNTERS` (``{our name: count}``); empty when the
    file cannot be read. A server's host holds one connection of the incast, so the namespace's
    counters are that connection's."""
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return {}
    out = {}
    for head, vals in zip(lines[::2], lines[1::2]):
        if head.startswith("TcpExt:"):
            table = dict(zip(head.split()[1:], vals.split()[1:]))
            out = {ours: int(table[k]) for k, ours in NETSTAT_COUNTERS.items() if k in table}
    return out


def tcp_counters(sock: socket.socket) -> dict:
    """:func:`parse_tcp_counters` of ``sock``'s TCP_INFO now."""
    return parse_tcp_counters(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_ASK_BYTES))


def counter_delta(before: dict, after: dict, ns_delta: dict) -> dict:
    """One block's TCP figures from the counters before and after it (:func:`parse_tcp_counters`)
    and the namespace's netstat deltas over it (``ns_delta``: ``{our name: delta or None}``,
    :data:`NETSTAT_COUNTERS`).

    Returns:
        ``{"retrans", "timeouts", "rto_recoveries", "rto_time_ms"}``: differences of
        ``total_retrans``, ``total_rto``, ``total_rto_recoveries``, ``total_rto_time_ms``;
        without the kernel's RTO counters ``timeouts`` is the namespace's (``ns_timeouts``, None
        when unread) and the other two None. ``total_rto`` is a u16: a difference is taken modulo 2^16.
    """
    if after["total_rto"] is None:
        return {"retrans": after["total_retrans"] - before["total_retrans"], "timeouts": ns_delta.get("ns_timeouts"),
                "rto_recoveries": None, "rto_time_ms": None}
    return {"retrans": after["total_retrans"] - before["total_retrans"],
            "timeouts": (after["total_rto"] - before["total_rto"]) % 65536,
            "rto_recoveries": (after["total_rto_recoveries"] - before["total_rto_recoveries"]) % 65536,
            "rto_time_ms": after["total_rto_time_ms"] - before["total_rto_time_ms"]}


def _socket(dscp: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if dscp:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
    return s


class _Served:
    """One accepted connection of a server: its record, the request bytes read so far, the block
    in flight and the counters at its request."""

    def __init__(self, sock: socket.socket, addr):
        self.sock = sock
        self.inbuf = bytearray()
        self.left = 0                       # response bytes still to write
        self.snap = None                    # counters when the current block's request arrived
        self.ns_snap = {}                   # the namespace's netstat counters then
        self.open_block = None              # that block's record until its delta is known
        self.rec = {"peer_ip": addr[0], "peer_port": addr[1], "accepted_unix_s": time.time(),
                    "snd_mss": tcp_counters(sock)["snd_mss"], "blocks": [], "eof": False}

    def open(self, block: int, nbytes: int) -> None:
        """Close the block in flight (its request's successor came) and open ``block``: snapshot
        the counters, record the RTO and smoothed RTT the connection has now."""
        now_counters, now_ns = tcp_counters(self.sock), netstat_counters()
        self.close_block(now_counters, now_ns)            # one reading ends a block and starts the next
        self.snap, self.ns_snap = now_counters, now_ns
        self.open_block = {"block": block, "bytes": nbytes, "sent_bytes": 0, "request_unix_s": time.time(),
                           "written_unix_s": None, "rto_at_request_ms": now_counters["rto_us"] / 1e3,
                           "srtt_at_request_ms": now_counters["srtt_us"] / 1e3}
        self.rec["blocks"].append(self.open_block)
        self.left = nbytes

    def close_block(self, now_counters: dict, now_ns: dict | None = None) -> None:
        """Fill the open block's TCP deltas (the next request, EOF or the deadline came) from the
        counters now (``now_ns``: the namespace's, read here when None)."""
        if self.open_block is not None:
            now_ns = netstat_counters() if now_ns is None else now_ns
            ns = {k: now_ns[k] - self.ns_snap[k] if k in now_ns and k in self.ns_snap else None
                  for k in NETSTAT_COUNTERS.values()}
            self.open_block.update(counter_delta(self.snap, now_counters, ns))
            self.open_block.update(ns)
            self.open_block = None


def run_blocks_server(job: dict) -> dict:
    """Serve block requests on ``job["port"]`` (module doc); returns the per-connection records.

    Returns:
        ``{"role": "blocks-server", "port", "listening_unix_s", "start_at_unix_s" (None if the
        start never came), "timeouts_method" (where ``timeouts`` come from: the kernel's
        tcpi_total_rto, the namespace's TCPTimeouts, or None: not counted), "loss_probes_method",
        "tcp_info_bytes" (the kernel's struct tcp_info), "tcp_info_fields" (:func:`tcp_info_fields`
        of it), "connections": [{"peer_ip", "peer_port", "accepted_unix_s", "snd_mss", "eof",
        "error"?, "blocks": [{"block", "bytes", "sent_bytes", "request_unix_s", "written_unix_s",
        "rto_at_request_ms", "srtt_at_request_ms", "retrans", "timeouts", "rto_recoveries",
        "rto_time_ms", "ns_timeouts", "loss_probes", "loss_probe_recoveries"}]}], "complete"}``
        (``ns_timeouts``, ``loss_probes``, ``loss_probe_recoveries``: the namespace's netstat
        counters over the block, :data:`NETSTAT_COUNTERS`, None when unread); ``complete``: every
        expected connection was accepted and closed cleanly by the client.
    """
    srv = _socket(job.get("dscp", 0))
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((job.get("bind_ip", "0.0.0.0"), job["port"]))
    srv.listen(64)
    srv.setblocking(False)
    tcp_info_bytes = len(srv.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_ASK_BYTES))
    if tcp_info_bytes >= TCP_INFO_RTO_BYTES:
        timeouts_method = TIMEOUTS_FROM_KERNEL
    else:
        timeouts_method = TIMEOUTS_FROM_NAMESPACE if "ns_timeouts" in netstat_counters() else None
    expect = job.get("expect_connections", 1)
    listening = time.time()
    print("READY", flush=True)
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ, "listen")
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
    stdin_buf, start_at = b"", None
    payload = memoryview(bytes(CHUNK_BYTES))
    served: list[_Served] = []
    closed = 0
    while time.time() < job["deadline_unix_s"] and not (len(served) >= expect and closed == len(served)):
        for key, events in sel.select(timeout=0.05):
            if key.data == "listen":
                sock, addr = srv.accept()
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                c = _Served(sock, addr)
                served.append(c)
                sel.register(sock, selectors.EVENT_READ, c)
                continue
            if key.data == "stdin":
                data = os.read(key.fd, 4096)
                stdin_buf += data
                if not data or b"\n" in stdin_buf:
                    sel.unregister(key.fd)
                    if b"\n" in stdin_buf:
                        start_at = float(stdin_buf.split(b"\n", 1)[0])
                continue
            c = key.data
            try:
                if events & selectors.EVENT_WRITE and c.left:
                    n = c.sock.send(payload[:min(c.left, CHUNK_BYTES)])
                    c.left -= n
                    c.open_block["sent_bytes"] += n
                    if not c.left:
                        c.open_block["written_unix_s"] = time.time()
                        sel.modify(c.sock, selectors.EVENT_READ, c)
                if not events & selectors.EVENT_READ:
                    continue
                data = c.sock.recv(4096)
                if not data:
                    c.close_block(tcp_counters(c.sock))
                    c.rec["eof"] = True
                    sel.unregister(c.sock)
                    c.sock.close()
                    closed += 1
                    continue
                c.inbuf += data
                while len(c.inbuf) >= REQUEST.size:
                    magic, block, nbytes = REQUEST.unpack_from(c.inbuf)
                    del c.inbuf[:REQUEST.size]
                    if magic != MAGIC:
                        raise ValueError(f"not a block request: {bytes(magic)!r}")
                    if c.left:
                        raise ValueError(f"request for block {block} before block "
                                         f"{c.open_block['block']}'s response was written")
                    c.open(block, nbytes)
                    sel.modify(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
            except (BlockingIOError, InterruptedError):
                continue
            except (OSError, ValueError) as e:
                c.rec["error"] = f"{type(e).__name__}: {e}"
                c.rec["eof"] = None
                sel.unregister(c.sock)
                c.sock.close()
                closed += 1
    for c in served:
        if c.sock.fileno() >= 0:
            c.close_block(tcp_counters(c.sock))
            c.rec.setdefault("error", "deadline passed with the connection open")
            c.sock.close()
    srv.close()
    return {"role": "blocks-server", "port": job["port"], "listening_unix_s": listening, "start_at_unix_s": start_at,
            "timeouts_method": timeouts_method, "loss_probes_method": LOSS_PROBES_METHOD,
            "tcp_info_bytes": tcp_info_bytes, "tcp_info_fields": tcp_info_fields(tcp_info_bytes),
            "connections": [c.rec for c in served],
            "complete": len(served) >= expect and all(c.rec["eof"] is True for c in served)}


def _connect(server: dict, dscp: int, until_unix_s: float) -> tuple[socket.socket, dict]:
    """One persistent connection to ``server`` (``{"host", "ip", "port"}``), retried while refused
    until ``until_unix_s``; returns the socket (non-blocking, TCP_NODELAY) and its record."""
    began = time.time()
    while True:
        s = _socket(dscp)
        s.settimeout(max(0.1, until_unix_s - time.time()))
        try:
            s.connect((server["ip"], server["port"]))
            break
        except ConnectionRefusedError:
            s.close()
            if time.time() >= until_unix_s:
                raise
            time.sleep(0.05)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.setblocking(False)
    c = tcp_counters(s)
    return s, {"host": server.get("host"), "ip": server["ip"], "port": server["port"],
               "local_port": s.getsockname()[1], "connect_began_unix_s": began, "connected_unix_s": time.time(),
               "handshake_retrans": c["total_retrans"], "handshake_timeouts": c["total_rto"]}


def run_blocks_client(job: dict, ready) -> dict:
    """Connect to every server, print READY (``ready()``, which returns the start time), then read
    blocks until ``blocks`` are done, ``duration_s`` has passed or the deadline (module doc).

    Returns:
        ``{"role": "blocks-client", "start_at_unix_s", "block_bytes", "senders", "connections":
        [{"host", "ip", "port", "local_port", "connect_began_unix_s", "connected_unix_s",
        "handshake_retrans", "handshake_timeouts"}], "blocks": [{"block", "start_unix_s",
        "end_unix_s" (None: incomplete), "duration_s", "bytes", "complete", "goodput_mbps",
        "longest_gap_s", "connections": [{"host", "bytes", "first_byte_unix_s",
        "last_byte_unix_s"}]}],
        "stopped_by" ("blocks", "duration", "deadline", "stopped": SIGTERM, or "error"), "error"?, "complete",
        "all_connected_before_start", "active_opens_after_start"}``.
        ``goodput_mbps`` is senders x block_bytes x 8 / the block's time (Mbit/s of payload);
        ``longest_gap_s`` the longest spell from the request to the block's last byte in which
        no byte arrived on any connection (seconds; at least the requests' round trip: the link
        toward the client idle, waiting for a timer or a straggler);
        ``active_opens_after_start`` is the namespace's TCP ActiveOpens counted from the start to
        the end (0: no SYN sent after the start by any process of the namespace).

    Raises:
        OSError: a server could not be reached before ``connect_timeout_s`` (before READY).
    """
    dscp = job.get("dscp", 0)
    until = time.time() + job.get("connect_timeout_s", 10.0)
    conns = [_connect(s, dscp, until) for s in job["servers"]]
    socks = [s for s, _ in conns]
    recs = [r for _, r in conns]
    size, n = job["block_bytes"], len(conns)
    start_at = ready()
    wait_until(start_at)
    opens_at_start = tcp_active_opens()
    sel = selectors.DefaultSelector()
    for i, s in enumerate(socks):
        sel.register(s, selectors.EVENT_READ, i)
    buf = memoryview(bytearray(CHUNK_BYTES))
    blocks, stopped_by, error = [], None, None
    while stopped_by is None:
        deadline = job["deadline_unix_s"]          # read each time: SIGTERM sets it to 0 (traffic.agent)
        now = time.time()
        if job.get("blocks") is not None and len(blocks) >= job["blocks"]:
            stopped_by = "blocks"
            break
        if job.get("duration_s") is not None and now - start_at >= job["duration_s"]:
            stopped_by = "duration"
            break
        if now >= deadline:
            stopped_by = "stopped" if job.get("stopped") else "deadline"
            break
        k = len(blocks)
        per = [{"host": r["host"], "bytes": 0, "first_byte_unix_s": None, "last_byte_unix_s": None} for r in recs]
        t0 = time.time()
        last_rx, gap = t0, 0.0
        req = REQUEST.pack(MAGIC, k, size)
        try:
            for s in socks:                       # 16 bytes always fit an empty send buffer
                if s.send(req) != REQUEST.size:
                    raise OSError("a request did not fit the send buffer")
            pending = n
            while pending and time.time() < job["deadline_unix_s"]:
                for key, _ in sel.select(timeout=0.05):
                    p = per[key.data]
                    try:
                        got = key.fileobj.recv_into(buf, min(CHUNK_BYTES, size - p["bytes"]))
                    except (BlockingIOError, InterruptedError):
                        continue
                    if not got:
                        raise ConnectionError(f"server {p['host']} closed the connection in block {k}")
                    now = time.time()
                    gap, last_rx = max(gap, now - last_rx), now
                    if p["first_byte_unix_s"] is None:
                        p["first_byte_unix_s"] = now
                    p["bytes"] += got
                    p["last_byte_unix_s"] = now
                    if p["bytes"] == size:
                        pending -= 1
                        sel.unregister(key.fileobj)
        except OSError as e:
            error, stopped_by = f"{type(e).__name__}: {e}", "error"
            pending = -1
        t1 = time.time()
        done = pending == 0
        got_bytes = sum(p["bytes"] for p in per)
        blocks.append({"block": k, "start_unix_s": t0, "end_unix_s": t1 if done else None,
                       "duration_s": t1 - t0 if done else None, "bytes": got_bytes, "complete": done,
                       "goodput_mbps": n * size * 8 / (t1 - t0) / 1e6 if done and t1 > t0 else None,
                       "longest_gap_s": gap if done else None, "connections": per})
        if not done:
            stopped_by = stopped_by or ("stopped" if job.get("stopped") else "deadline")
            break
        for i, s in enumerate(socks):
            sel.register(s, selectors.EVENT_READ, i)
    opens_after = tcp_active_opens()
    for s in socks:
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        s.close()
    out = {"role": "blocks-client", "start_at_unix_s": start_at, "block_bytes": size, "senders": n,
           "connections": recs, "blocks": blocks, "stopped_by": stopped_by,
           "complete": stopped_by in ("blocks", "duration") and all(b["complete"] for b in blocks),
           "all_connected_before_start": all(r["connected_unix_s"] < start_at for r in recs),
           "active_opens_after_start": opens_after - opens_at_start}
    if error:
        out["error"] = error
    return out
