"""Traffic agent: runs inside one Mininet host, driven by a JSON job.

Started by the runner with popen (never ``host.cmd``: case T2). Protocol on
stdin/stdout: the agent sets up (receiver: listens), prints ``READY``, then
reads one line from stdin holding the absolute start time (Unix seconds; all
namespaces share the clock), runs, writes its result JSON to ``job["out"]``
and exits 0. A RoCE engine (roles ``roce``, and ``collective`` and the training roles over
RoCE) whose job has ``end_barrier`` also prints ``FINISHED`` once its part is done and ends
when ``END`` arrives on stdin (traffic.roce.EndBarrier: the runner sends it once every agent
is done). Every agent has a deadline and exits by itself after it. The TCP and
UDP agents also end early on SIGTERM (the runner stopping a round whose emulation
broke): their loops end as at the deadline, and the result, written as usual,
says each unfinished flow was ``stopped`` (:func:`stop_on_sigterm`).

Roles (``job["role"]``; the registry is :data:`ROLES`):
- ``receiver``: ``{"port", "expect_flows", "deadline_unix_s", "out",
  "sample_interval_s", "count_ecn"}``. Accepts TCP connections, counts bytes per flow
  until EOF; records first/last byte times and cumulative bytes over time.
  With ``count_ecn`` it also reads every arriving IPv4 packet's header on the
  host's interfaces (an AF_PACKET socket) and counts, per flow, data packets
  that arrived Not-ECT, ECT and CE (a TCP socket cannot show the IP ECN field).
- ``sender``: ``{"flows": [{"dst_ip", "port", "bytes" | "duration_s", "flow_id", "src_port", "start_s"}, ...],
  "deadline_unix_s", "out", "dscp", "tcp_sample_interval_s", "notsent_lowat_bytes"}``. A time-limited
  flow's socket holds at most about ``notsent_lowat_bytes`` not yet sent (TCP_NOTSENT_LOWAT; absent:
  the kernel's default, as much as the send buffer takes), so that it ends soon after its
  ``duration_s`` instead of draining a send buffer of seconds at its share of the link. Opens each flow at the start time plus
  its ``start_s`` (default 0: every flow at once at the start; :class:`Launches`);
  each sends ``bytes`` of zeros (or as much as it can for ``duration_s``), half-closes, waits for the receiver to
  close; records times, congestion control in use, whether ECN was
  negotiated, and retransmissions (TCP_INFO) per flow, and every ``tcp_sample_interval_s``
  (default :data:`TCP_SAMPLE_INTERVAL_S`; 0: never) each live connection's congestion window,
  RTT, ssthresh, retransmissions and delivery rate (``tcp_samples``, :func:`tcp_sample`).
- ``udp-receiver`` / ``udp-sender``: the same jobs over UDP (``traffic.transport: udp``):
  one socket per flow sends sequence-numbered datagrams of up to :data:`UDP_PAYLOAD_BYTES`
  (full-size frames; :data:`UDP_DATA_BYTES` of flow bytes each) as fast as the host takes them, then an end marker carrying the
  count. A send the host cannot take now (socket buffer full: EAGAIN; the NIC's queue
  full: ENOBUFS, reported because of IP_RECVERR) is counted in ``blocked_sends`` /
  ``host_queue_full`` and the same datagram is sent again when the socket is writable:
  back-pressure from a paused NIC is felt, never a silent host drop. The receiver counts
  distinct sequence numbers per flow (``datagrams_received``; duplicates apart), so a
  datagram lost in the fabric shows as ``datagrams_sent - datagrams_received``; the receiver
  also reports its namespace's UDP receive drops over the run (``host_udp_drops``), so a
  loss at the receiving host is told apart from one in the fabric.

- ``blocks-server`` / ``blocks-client``: an incast over persistent connections in
  barrier-synchronised blocks (traffic.blocks): each sender host serves requests for bytes, the
  aggregator connects to every server before READY and then reads one block at a time.
- ``roce``: RoCEv2 queue pairs with DCQCN and go-back-N over real frames (traffic.roce, issue 7).
- ``collective``: ranks of a ring AllReduce, reduce-scatter, all-gather or all-to-all over
  TCP, reducing real float32 arrays (traffic.collective, issue 8).
- ``training``: data-parallel ranks running training iterations (compute emulated by time,
  gradients synchronised in buckets; traffic.training).
- ``parallel``: ranks of a mixed-parallel job (tensor groups over NVLink, pipeline stages and
  data-parallel replicas over the fabric; traffic.parallel).

``dscp`` (0-63, default 0) goes into every packet's IP header (IP_TOS; the kernel keeps
the ECN bits of TCP), which is how a flow picks its priority class (issue 6).
"""
from __future__ import annotations

import errno
import importlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass
from typing import Callable

from traffic.blocks import run_blocks_client, run_blocks_server
from traffic.sockets import big_receive_buffer, udp_receive_errors, wait_until

CHUNK_BYTES = 64 * 1024


def tcp_info(sock: socket.socket) -> dict:
    """``{"total_retrans", "rtt_us", "snd_cwnd"}`` from struct tcp_info (linux/tcp.h)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    rtt_us, = struct.unpack_from("=I", raw, 68)
    snd_cwnd, = struct.unpack_from("=I", raw, 80)
    total_retrans, = struct.unpack_from("=I", raw, 100)
    return {"total_retrans": total_retrans, "rtt_us": rtt_us, "snd_cwnd": snd_cwnd}


#: struct tcp_info (linux/tcp.h) fields of a congestion-window sample: (name, offset, struct format).
TCP_SAMPLE_FIELDS = (("rtt_us", 68, "I"), ("snd_ssthresh", 76, "I"), ("snd_cwnd", 80, "I"),
                     ("total_retrans", 100, "I"), ("delivery_rate_Bps", 160, "Q"))
#: linux/tcp.h: the most unsent bytes a socket holds before it stops taking more (Linux 3.12).
TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)
#: Bytes of struct tcp_info asked for (through tcpi_delivery_rate, Linux 4.9).
TCP_SAMPLE_BYTES = 168
#: How often a TCP sender samples its live connections' TCP_INFO (seconds; a job may say otherwise).
TCP_SAMPLE_INTERVAL_S = 0.02


def tcp_sample(sock: socket.socket, t_unix_s: float) -> list:
    """``[t_unix_s, snd_cwnd (segments), rtt_us, snd_ssthresh, total_retrans, delivery_rate (bytes/s)]``
    of a live connection, from struct tcp_info; the delivery rate is None on a kernel whose
    tcp_info is shorter than :data:`TCP_SAMPLE_BYTES`."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_SAMPLE_BYTES)
    v = {n: (struct.unpack_from("=" + fmt, raw, off)[0] if len(raw) >= off + struct.calcsize(fmt) else None)
         for n, off, fmt in TCP_SAMPLE_FIELDS}
    return [round(t_unix_s, 6), v["snd_cwnd"], v["rtt_us"], v["snd_ssthresh"], v["total_retrans"], v["delivery_rate_Bps"]]


#: tcpi_options bit: ECN was negotiated on the connection (linux/tcp.h TCPI_OPT_ECN).
TCPI_OPT_ECN = 8


def ecn_negotiated(sock: socket.socket) -> bool:
    """True if the connection negotiated ECN (SYN with ECE+CWR answered; RFC 3168 s6.1.1)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return bool(raw[5] & TCPI_OPT_ECN)


ETH_P_IP = 0x0800
PACKET_OUTGOING = 4


class EcnCounter:
    """Per-flow ECN codepoints of TCP segments arriving at ``port`` (AF_PACKET, IPv4 headers only).

    :meth:`drain` reads what is queued on the socket (non-blocking);
    :attr:`flows` maps ``(src_ip, src_port)`` to ``{"not_ect", "ect", "ce"}``
    counts of data-carrying segments.
    """

    def __init__(self, port: int):
        self.port = port
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 2**20)
        self.sock.setblocking(False)
        self.flows: dict = {}

    def drain(self) -> None:
        """Count every packet waiting on the socket."""
        while True:
            try:
                data, addr = self.sock.recvfrom(80)
            except (BlockingIOError, InterruptedError):
                return
            if addr[2] == PACKET_OUTGOING or len(data) < 40 or data[9] != socket.IPPROTO_TCP:
                continue
            ihl = (data[0] & 15) * 4
            if len(data) < ihl + 14:
                continue
            sport, dport = struct.unpack_from("!HH", data, ihl)
            total_len, = struct.unpack_from("!H", data, 2)
            doff = (data[ihl + 12] >> 4) * 4
            if dport != self.port or total_len - ihl - doff <= 0:   # data segments only
                continue
            key = (socket.inet_ntoa(data[12:16]), sport)
            c = self.flows.setdefault(key, {"not_ect": 0, "ect": 0, "ce": 0})
            ecn = data[1] & 3
            c["ce" if ecn == 3 else "not_ect" if ecn == 0 else "ect"] += 1


def bind_source_port(sock: socket.socket, flow: dict) -> None:
    """Bind ``sock`` to the flow's planned ``src_port`` (traffic.patterns.source_ports: the seed
    fixes each flow's 5-tuple, hence its ECMP path); a flow without one keeps a kernel-chosen
    port. SO_REUSEADDR lets a later round's flow take the port of an earlier round's connection
    in TIME_WAIT (the connect then needs ``net.ipv4.tcp_tw_reuse``, which the hosts feature sets).

    Raises:
        OSError: the port is in use by a live socket.
    """
    if flow.get("src_port"):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", flow["src_port"]))


def congestion_control(sock: socket.socket) -> str:
    """The congestion control algorithm the kernel uses on ``sock``."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode()


def run_receiver(job: dict) -> dict:
    """Receive ``expect_flows`` TCP flows; return per-flow records (see module doc)."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if job.get("dscp"):                   # the ACKs travel in the flows' class (accepted sockets inherit it)
        srv.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, job["dscp"] << 2)
    srv.bind(("0.0.0.0", job["port"]))
    srv.listen(1024)
    srv.setblocking(False)
    print("READY", flush=True)
    start_at = float(sys.stdin.readline())
    interval = job.get("sample_interval_s", 0.01)
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ, None)
    counter = EcnCounter(job["port"]) if job.get("count_ecn") else None
    if counter is not None:
        sel.register(counter.sock, selectors.EVENT_READ, "ecn")
    flows = {}
    done = 0
    buf = bytearray(CHUNK_BYTES)
    while done < job["expect_flows"] and time.time() < job["deadline_unix_s"]:
        for key, _ in sel.select(timeout=0.05):
            if key.data == "ecn":
                counter.drain()
                continue
            if key.data is None:
                conn, addr = srv.accept()
                conn.setblocking(False)
                rec = {"src_ip": addr[0], "src_port": addr[1], "bytes": 0, "accepted_unix_s": time.time(),
                       "first_byte_unix_s": None, "last_byte_unix_s": None, "eof": False, "samples": []}
                flows[addr] = rec
                sel.register(conn, selectors.EVENT_READ, rec)
                continue
            rec, conn = key.data, key.fileobj
            try:
                n = conn.recv_into(buf)
            except (BlockingIOError, InterruptedError):
                continue
            except ConnectionError as e:
                rec["error"] = repr(e)
                n = 0
            now = time.time()
            if n == 0:
                rec["eof"] = "error" not in rec
                sel.unregister(conn)
                conn.close()
                rec["samples"].append((now, rec["bytes"]))
                done += 1
                continue
            if rec["first_byte_unix_s"] is None:
                rec["first_byte_unix_s"] = now
            rec["bytes"] += n
            rec["last_byte_unix_s"] = now
            s = rec["samples"]
            if not s or now - s[-1][0] >= interval:
                s.append((now, rec["bytes"]))
    if counter is not None:
        counter.drain()
        for (ip, port), c in counter.flows.items():
            rec = flows.get((ip, port))
            if rec is not None:
                rec["ecn_received"] = c
    return {"role": "receiver", "start_at_unix_s": start_at, "flows": list(flows.values()),
            "complete": done >= job["expect_flows"]}


class Launches:
    """When each flow of a sender job connects: at the common start plus its ``start_s``.

    Pure bookkeeping (no sockets, no clock of its own): :meth:`due` hands out the flows whose
    time has come, in order of their times (ties in job order), and :meth:`wait_s` says how long
    the sender's loop may block before the next one is due. A flow without ``start_s`` (or 0)
    is due at the start itself, so a job whose flows all start together launches them all at once.

    Args:
        flows: the job's flows (dicts, each with an optional ``start_s`` in seconds >= 0).
        start_at_unix_s: the common start (Unix seconds).

    Raises:
        ValueError: a negative ``start_s``.
    """

    def __init__(self, flows: list[dict], start_at_unix_s: float):
        starts = [float(f.get("start_s") or 0.0) for f in flows]
        if any(t < 0 for t in starts):
            raise ValueError(f"start_s must be >= 0, got {min(starts)}")
        order = sorted(range(len(flows)), key=lambda i: (starts[i], i))
        self._at = [(start_at_unix_s + starts[i], i) for i in order]
        self._next = 0

    def due(self, now_unix_s: float) -> list[int]:
        """The indices (into the job's flows) of the flows due at ``now_unix_s`` not handed out
        yet, in launch order."""
        out = []
        while self._next < len(self._at) and self._at[self._next][0] <= now_unix_s:
            out.append(self._at[self._next][1])
            self._next += 1
        return out

    @property
    def pending(self) -> int:
        """Flows not handed out yet."""
        return len(self._at) - self._next

    def wait_s(self, now_unix_s: float, cap_s: float) -> float:
        """How long (seconds) the loop may wait for sockets before the next flow is due: at most
        ``cap_s``; 0 when that flow is due within a millisecond (an epoll wait is rounded up to
        whole milliseconds, so the loop polls instead and launches it on time); otherwise one
        millisecond short of its time."""
        if not self.pending:
            return cap_s
        left = self._at[self._next][0] - now_unix_s
        return 0.0 if left < 0.001 else min(cap_s, left - 0.001)


def run_sender(job: dict) -> dict:
    """Send every flow of ``job["flows"]`` from the start time; return their records.

    Each flow is one TCP connection that sends its bytes, half-closes and
    waits for the receiver's close. A flow connects at the start plus its ``start_s`` (seconds,
    default 0: every flow of a job without it connects at the start, all at once; see
    :class:`Launches`); a flow not yet connected is not open, and the deadline covers every
    flow alike. Its record keeps ``start_s`` and ``started_unix_s`` (when it connected). The
    flows of one host are multiplexed in this one process with non-blocking sockets (a
    permutation or all-to-all needs many flows per host; one process per flow would not fit
    the CPU).
    """
    flows = job["flows"]
    print("READY", flush=True)
    start_at = float(sys.stdin.readline())
    payload = memoryview(bytes(CHUNK_BYTES))
    sample_every = job.get("tcp_sample_interval_s", TCP_SAMPLE_INTERVAL_S)
    wait_until(start_at)
    sel = selectors.DefaultSelector()
    socks = {}                     # flow_id -> socket, while it is connected
    recs = [{"flow_id": f["flow_id"], "dst_ip": f["dst_ip"], "bytes_planned": f.get("bytes"),
             "start_s": float(f.get("start_s") or 0.0), "start_at_unix_s": start_at, "started_unix_s": None,
             "bytes_sent": 0, "state": "scheduled", "tcp_samples": []} for f in flows]
    launches = Launches(flows, start_at)

    def launch(i: int) -> None:
        f, rec = flows[i], recs[i]
        began = start_at + rec["start_s"]
        rec.update(until_unix_s=began + f["duration_s"] if f.get("duration_s") else None,
                   started_unix_s=time.time(), state="connecting")
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if job.get("dscp"):
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, job["dscp"] << 2)
        if f.get("duration_s") and job.get("notsent_lowat_bytes"):
            s.setsockopt(socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, int(job["notsent_lowat_bytes"]))
        bind_source_port(s, f)
        s.setblocking(False)
        s.connect_ex((f["dst_ip"], f["port"]))
        sel.register(s, selectors.EVENT_WRITE, rec)

    open_flows = 0

    def half_close(s: socket.socket, rec: dict, now: float) -> None:
        """The flow has sent what it will: FIN after what is queued, then wait for the receiver's close."""
        rec.update(state="closing", sent_unix_s=now)
        s.shutdown(socket.SHUT_WR)
        sel.modify(s, selectors.EVENT_READ, rec)

    def finish(s: socket.socket, rec: dict, **fields) -> None:
        """The flow is over (``fields``: its state and what it records): its socket closed."""
        nonlocal open_flows
        rec.update(**fields)
        socks.pop(rec["flow_id"], None)
        sel.unregister(s)
        s.close()
        open_flows -= 1

    for i in launches.due(time.time()):
        launch(i)
        open_flows += 1
    next_sample = time.time()
    cap_s = min(0.05, sample_every) if sample_every else 0.05
    while (open_flows or launches.pending) and time.time() < job["deadline_unix_s"]:
        now = time.time()
        for i in launches.due(now):
            launch(i)
            open_flows += 1
        if sample_every and now >= next_sample:
            for rec in recs:
                s = socks.get(rec["flow_id"])
                if s is not None and rec["state"] in ("sending", "closing"):
                    try:
                        rec["tcp_samples"].append(tcp_sample(s, now))
                    except OSError:
                        pass
            next_sample = now + sample_every
        for rec in recs:
            # a time-limited flow half-closes at its end even while its socket takes nothing (a flow
            # in retransmission backoff is not writable for seconds): its FIN then waits behind
            # what is unsent, not for the socket to take more
            s = socks.get(rec["flow_id"])
            if s is not None and rec["state"] == "sending" and rec["until_unix_s"] is not None \
                    and now >= rec["until_unix_s"]:
                try:
                    half_close(s, rec, now)
                except OSError as e:
                    finish(s, rec, state="failed", error=f"{type(e).__name__}: {e}")
        for key, _ in sel.select(timeout=launches.wait_s(time.time(), cap_s)):
            s, rec = key.fileobj, key.data
            try:
                if rec["state"] == "connecting":
                    err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if err:
                        raise OSError(err, os.strerror(err))
                    rec.update(state="sending", src_port=s.getsockname()[1], connected_unix_s=time.time(),
                               congestion_control=congestion_control(s), ecn_negotiated=ecn_negotiated(s))
                    socks[rec["flow_id"]] = s
                if rec["state"] == "sending":
                    if rec["until_unix_s"] is not None:      # time-limited flow
                        over = time.time() >= rec["until_unix_s"]
                        if not over:
                            rec["bytes_sent"] += s.send(payload)
                    else:                                    # sized flow
                        left = rec["bytes_planned"] - rec["bytes_sent"]
                        if left > 0:
                            rec["bytes_sent"] += s.send(payload[:min(left, CHUNK_BYTES)])
                        over = rec["bytes_sent"] >= rec["bytes_planned"]
                    if over:
                        half_close(s, rec, time.time())
                    continue
                if rec["state"] == "closing" and not s.recv(4096):
                    finish(s, rec, state="closed", closed_unix_s=time.time(), **tcp_info(s))
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as e:
                finish(s, rec, state="failed", error=f"{type(e).__name__}: {e}")
    for rec in recs:
        if rec["state"] not in ("closed", "failed"):
            rec["error"] = _unfinished(job, rec["state"])
    return {"role": "sender", "flows": recs}


#: Datagram payload: 1472 B + 8 UDP + 20 IP + 14 Ethernet = a 1514 B frame.
UDP_PAYLOAD_BYTES = 1472
UDP_HEADER = struct.Struct("!IQ")       # sequence number (END_SEQ: end marker), and in the marker the count
#: Flow bytes per datagram (the rest of the payload is the header): what bytes_sent/bytes count.
UDP_DATA_BYTES = UDP_PAYLOAD_BYTES - UDP_HEADER.size
END_SEQ = 0xFFFFFFFF
END_MARKERS = 3                          # the end marker is sent this often (it may be lost without PFC)
IP_RECVERR = 11                          # linux/in.h
#: A UDP receiver ends a flow this long after its last datagram when the end marker was lost.
UDP_IDLE_S = 3.0


def run_udp_receiver(job: dict) -> dict:
    """Receive ``expect_flows`` UDP flows on ``job["port"]``; per flow (keyed by the sender's
    address): distinct datagrams and bytes, first/last arrival, cumulative bytes over time, the
    sender's count from its end marker. Ends when every flow's end marker came, or
    ``job["idle_s"]`` (default :data:`UDP_IDLE_S`) after the last datagram, or at the deadline.
    A caller that holds a lossless flow paused on purpose passes an ``idle_s`` longer than the
    pause: a receiver that left early would answer the held datagrams with ICMP port unreachable."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    big_receive_buffer(s)
    s.bind(("0.0.0.0", job["port"]))
    s.settimeout(0.05)
    errors_before = udp_receive_errors()
    print("READY", flush=True)
    start_at = float(sys.stdin.readline())
    interval = job.get("sample_interval_s", 0.01)
    idle_s = float(job.get("idle_s", UDP_IDLE_S))
    flows, seen = {}, {}
    ended = 0
    last = None
    buf = bytearray(2048)
    while ended < job["expect_flows"] and time.time() < job["deadline_unix_s"]:
        try:
            n, addr = s.recvfrom_into(buf)
        except socket.timeout:
            if last is not None and time.time() - last > idle_s:
                break
            continue
        now = last = time.time()
        if n < UDP_HEADER.size:
            continue
        seq, count = UDP_HEADER.unpack_from(buf)
        rec = flows.get(addr)
        if rec is None:
            rec = flows[addr] = {"src_ip": addr[0], "src_port": addr[1], "bytes": 0, "datagrams_received": 0,
                                 "duplicates": 0, "first_byte_unix_s": None, "last_byte_unix_s": None,
                                 "eof": False, "datagrams_sent_marker": None, "samples": []}
            seen[addr] = set()
        if seq == END_SEQ:
            if not rec["eof"]:
                rec.update(eof=True, datagrams_sent_marker=count)
                rec["samples"].append((now, rec["bytes"]))
                ended += 1
            continue
        if seq in seen[addr]:
            rec["duplicates"] += 1
            continue
        seen[addr].add(seq)
        if rec["first_byte_unix_s"] is None:
            rec["first_byte_unix_s"] = now
        rec["bytes"] += n - UDP_HEADER.size
        rec["datagrams_received"] += 1
        rec["last_byte_unix_s"] = now
        smp = rec["samples"]
        if not smp or now - smp[-1][0] >= interval:
            smp.append((now, rec["bytes"]))
    for rec in flows.values():
        if rec["samples"] and rec["samples"][-1][1] != rec["bytes"]:
            rec["samples"].append((rec["last_byte_unix_s"], rec["bytes"]))
    drained = drain(s)
    s.close()
    after = udp_receive_errors()
    return {"role": "udp-receiver", "start_at_unix_s": start_at, "flows": list(flows.values()),
            "complete": ended >= job["expect_flows"], "drained_after_end": drained,
            "host_udp_drops": {k: after[k] - errors_before[k] for k in after}}


#: How long :func:`drain` waits, once its socket refuses new datagrams, for one that the kernel
#: had already matched to it to be queued (seconds).
DRAIN_SETTLE_S = 0.02


def drain(s: socket.socket) -> int:
    """Stop ``s`` taking new datagrams, then read and count every datagram still queued on it
    without waiting (the repeated end markers that came after the flows ended). Returns the count.

    The kernel counts a UDP datagram as received (/proc/net/snmp InDatagrams) only when it is read;
    one left queued at close is freed uncounted, and one arriving after the close counts as NoPorts.
    So that none can slip in between the last read and the close (seen once in about 30 PFC
    experiments: a paused end marker released in that moment, lost in no counter), the socket is
    first connected to an address nothing sends from (the discard port on the loopback): the
    kernel then delivers no new datagram to it, and refuses each (NoPorts). What was already on
    its way into the queue gets :data:`DRAIN_SETTLE_S` to arrive. The caller closes ``s`` next."""
    try:
        s.connect(("127.0.0.1", 9))
        time.sleep(DRAIN_SETTLE_S)
    except OSError:             # no loopback in this namespace: read what is there, as before
        pass
    s.setblocking(False)
    n = 0
    while True:
        try:
            s.recv(2048)
        except (BlockingIOError, InterruptedError):
            return n
        except ConnectionRefusedError:     # an ICMP error answering the connect's peer: not a datagram
            continue
        n += 1


def run_udp_sender(job: dict) -> dict:
    """Send every flow of ``job["flows"]`` over UDP from the start time, all at once (module doc);
    returns per flow ``bytes_sent``, ``datagrams_sent``, ``blocked_sends``, ``host_queue_full``."""
    flows = job["flows"]
    socks, recs = [], []
    for f in flows:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, job.get("dscp", 0) << 2)
        s.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
        bind_source_port(s, f)
        s.setblocking(False)
        s.connect((f["dst_ip"], f["port"]))
        socks.append(s)
    print("READY", flush=True)
    start_at = float(sys.stdin.readline())
    pad = bytes(UDP_DATA_BYTES)
    wait_until(start_at)
    sel = selectors.DefaultSelector()
    for f, s in zip(flows, socks):
        rec = {"flow_id": f["flow_id"], "dst_ip": f["dst_ip"], "bytes_planned": f.get("bytes"),
               "until_unix_s": start_at + f["duration_s"] if f.get("duration_s") else None,
               "start_at_unix_s": start_at, "started_unix_s": time.time(), "src_port": s.getsockname()[1],
               "bytes_sent": 0, "datagrams_sent": 0, "blocked_sends": 0, "host_queue_full": 0,
               "end_markers": 0, "state": "sending"}
        sel.register(s, selectors.EVENT_WRITE, rec)
        recs.append(rec)
    open_flows = len(recs)
    while open_flows and time.time() < job["deadline_unix_s"]:
        for key, _ in sel.select(timeout=0.05):
            s, rec = key.fileobj, key.data
            while not job.get("stopped"):   # send until the host pushes back (or SIGTERM: loopback never does)
                if rec["state"] == "sending":
                    left = (rec["bytes_planned"] - rec["bytes_sent"]) if rec["until_unix_s"] is None else (
                        UDP_DATA_BYTES if time.time() < rec["until_unix_s"] else 0)
                    if left <= 0:
                        rec.update(state="ending", sent_unix_s=time.time())
                        continue
                    msg = UDP_HEADER.pack(rec["datagrams_sent"], 0) + pad[:min(left, UDP_DATA_BYTES)]
                else:
                    msg = UDP_HEADER.pack(END_SEQ, rec["datagrams_sent"])
                try:
                    s.send(msg)
                except BlockingIOError:
                    rec["blocked_sends"] += 1
                    break
                except OSError as e:
                    if e.errno == errno.ECONNREFUSED and rec["state"] == "ending" and rec["end_markers"]:
                        # every datagram and an end marker went out, and the receiver has closed its
                        # socket since (it had every flow's marker, or gave up): done, not failed
                        rec.update(state="closed", closed_unix_s=time.time(), receiver_closed_first=True)
                        sel.unregister(s)
                        open_flows -= 1
                        break
                    if e.errno != errno.ENOBUFS:
                        rec.update(state="failed", error=f"{type(e).__name__}: {e}")
                        sel.unregister(s)
                        open_flows -= 1
                        break
                    rec["host_queue_full"] += 1        # not sent: the same datagram again when writable
                    time.sleep(0.001)                  # the socket stays writable while the NIC queue is full
                    break
                if rec["state"] == "sending":
                    rec["datagrams_sent"] += 1
                    rec["bytes_sent"] += len(msg) - UDP_HEADER.size
                    continue
                rec["end_markers"] += 1
                if rec["end_markers"] >= END_MARKERS:
                    rec.update(state="closed", closed_unix_s=time.time())
                    sel.unregister(s)
                    open_flows -= 1
                    break
    for s in socks:
        s.close()
    for rec in recs:
        if rec["state"] not in ("closed", "failed"):
            rec["error"] = _unfinished(job, rec["state"])
    return {"role": "udp-sender", "flows": recs}


def _ready_then_start_time() -> float:
    """Print READY, then read the start time (Unix seconds) from stdin."""
    print("READY", flush=True)
    return float(sys.stdin.readline())


#: The signals a stoppable agent ends early on (the runner sends SIGTERM; SIGINT and SIGHUP, should
#: one reach an agent, end it the same way instead of losing its record).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def stop_on_sigterm(job: dict) -> None:
    """On SIGTERM (and SIGINT, SIGHUP: :data:`STOP_SIGNALS`), end the job's loops as at its
    deadline (``job["deadline_unix_s"]`` set to 0 and ``job["stopped"]`` to True), so the agent
    still writes what it measured: bytes, finished flows' times, a UDP receiver's counts. Call
    from the main thread."""
    def handler(signum, frame):
        job["deadline_unix_s"] = 0.0
        job["stopped"] = True
    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)


def _unfinished(job: dict, state: str) -> str:
    """The error of a flow left in ``state`` when its loop ended early."""
    return f"{'stopped by the runner' if job.get('stopped') else 'deadline passed'} while {state}"


@dataclass(frozen=True)
class Role:
    """One role an agent can run (``job["role"]``).

    Attributes:
        name: the role's name in a job.
        run: its function, ``run(job) -> dict`` (the agent's record), or ``"module:function"``
            for a role whose module is imported only by the agents that run it (numpy, the RoCE
            engine); with ``handshake`` the function takes ``ready``: a callable that prints
            READY and returns the common start time (Unix seconds), to call once it is set up.
        handshake: the function calls ``ready`` itself (else the agent's loops print READY).
        stoppable: its loops end at ``job["deadline_unix_s"]`` (or, RoCE, at ``job["stopped"]``),
            so it can end early on SIGTERM and still write its record (:func:`stop_on_sigterm`).
    """
    name: str
    run: Callable[..., dict] | str
    handshake: bool = False
    stoppable: bool = False

    def load(self) -> Callable[..., dict]:
        """The role's function (importing its module the first time, for a ``"module:function"``)."""
        if callable(self.run):
            return self.run
        module, function = self.run.split(":")
        return getattr(importlib.import_module(module), function)


#: Registered roles by name: adding one is a module with its ``run_<role>(job, ready)`` and an entry here.
ROLES: dict[str, Role] = {r.name: r for r in (
    Role("receiver", run_receiver, stoppable=True),
    Role("sender", run_sender, stoppable=True),
    Role("udp-receiver", run_udp_receiver, stoppable=True),
    Role("udp-sender", run_udp_sender, stoppable=True),
    Role("blocks-server", run_blocks_server, stoppable=True),
    Role("blocks-client", run_blocks_client, handshake=True, stoppable=True),
    Role("roce", "traffic.roce:run_roce", handshake=True, stoppable=True),        # frame templates, DCQCN
    Role("collective", "traffic.collective:run_collective", handshake=True),      # numpy: ranks that reduce
    Role("training", "traffic.training:run_training", handshake=True),            # numpy: ranks that train
    Role("parallel", "traffic.parallel:run_parallel", handshake=True),            # numpy: mixed-parallel ranks
)}


def main(argv=None) -> int:
    """``python -m traffic.agent JOB_JSON``: run the job's role (:data:`ROLES`), write its result,
    exit 0 (1 on error, an unknown role included: the record says why)."""
    argv = sys.argv[1:] if argv is None else argv
    job = json.loads(argv[0])
    role = ROLES.get(job.get("role"))
    if role is not None and role.stoppable:
        stop_on_sigterm(job)
    try:
        if role is None:
            raise ValueError(f"unknown role {job.get('role')!r} (roles: {', '.join(ROLES)})")
        run = role.load()
        res = run(job, ready=_ready_then_start_time) if role.handshake else run(job)
        rc = 0
    except Exception as e:  # recorded in the result, reported by the runner
        res = {"role": job.get("role"), "flow_id": job.get("flow_id"), "error": f"{type(e).__name__}: {e}",
               "error_type": type(e).__name__}
        rc = 1
    with open(job["out"], "w") as f:
        json.dump(res, f)
    if role is not None and role.stoppable:
        # the record is written: a stop signal now changes nothing, and one that arrived while
        # the interpreter shuts down (which gives Python's handlers back to the default) would
        # kill the agent with it instead of exit 0
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
    return rc


if __name__ == "__main__":
    sys.exit(main())
