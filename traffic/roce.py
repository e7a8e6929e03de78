"""RoCEv2 traffic agent: queue pairs over real frames, DCQCN, go-back-N (issue 7).

Runs inside one Mininet host (role ``roce`` of traffic.agent: the same
READY / start-time protocol). One process serves every QP of its host, in one
thread:

- Transmit: one persistent AF_PACKET socket on the host's interface sends
  frames built once per QP with scapy and patched per packet
  (common.roce.FrameTemplate). Each sender QP is paced by a token bucket on the
  monotonic clock at the rate its rate controller gives (traffic.ratecontrol, by ``mode``:
  DCQCN's reaction point for ``dcqcn``, TIMELY for ``timely``, Patched TIMELY for
  ``patched_timely``, a Swift-like controller for ``swift``, a fixed rate for ``none``; or the
  plug-in class in the file ``cc_plugin`` names).
  Every ACK that acknowledges new data gives the controller the bytes it acknowledged and, when
  it can be trusted, an RTT sample: its arrival minus the send time of the newest packet it
  covers (SenderQp.acked). A send the host
  cannot take (socket buffer full: EAGAIN; the NIC queue full or paused:
  ENOBUFS) is counted (``blocked_sends``, ``host_queue_full``) and the same
  frame is sent again: back-pressure, never a silent drop.
- Receive: one UDP socket bound to port 4791 (the kernel demultiplexes; it also
  keeps the host from answering RoCE frames with ICMP port unreachable) with
  IP_RECVTOS, so the ECN field of every packet is seen. Data packets go to the
  responder of their QP (common.rc: ePSN, coalesced ACKs, NAK on a gap); a
  CE-marked packet triggers a CNP when the notification point allows
  (common.dcqcn.NotificationPoint). ACKs, NAKs and CNPs go to the requester
  QP named in their BTH.

Job (JSON)::

  {"role": "roce", "ifname", "mac", "ip", "out", "deadline_unix_s",
   "mode": a registered controller (traffic.ratecontrol.RATE_CONTROLLERS) | "plugin:<name>",
   "line_rate_mbps", "rate_mbps" (mode none),
   "dcqcn": {DcqcnParams fields} (mode dcqcn; scaled defaults when absent; its cnp_interval_s
   also sets the receivers' notification point in every mode),
   and likewise under each other registered controller's name its ``params_cls`` fields
   ("timely": {TimelyParams fields}, "swift": {SwiftParams fields}, ...),
   "cc_plugin": absolute path of a rate-controller plug-in or absent, "cc_params": {name: number},
   "dscp", "cnp_dscp", "mtu_bytes", "ack_every", "ack_delay_s" (default rto_s / 8: a quiet
   responder acknowledges what it holds), "rto_s", "sample_interval_s",
   "pcap": path or null,
   "send": [{"flow_id", "qpn", "udp_sport", "peer": {"mac", "ip", "qpn"},
             "messages": [{"at_s", "bytes"}, ...] | "duration_s" + "message_bytes"}],
   "receive": [{"flow_id", "qpn", "peer": {"mac", "ip", "qpn", "udp_sport"}, "expect_bytes" | null}],
   "end_barrier": true when the runner takes part in the end barrier (:class:`EndBarrier`)}

``at_s`` is seconds after the common start time. The result (``out``) has one
record per sender QP (bytes, message completion times, CNPs received,
retransmitted packets, NAKs, timeouts, back-pressure counts, rate over time,
target vs achieved rate with a loud ``pacing_warning`` below 90%: case T5; the controller's
figures and parameters, ``cc_params``; ``rtt_s``: the RTT samples' count, min, median and p99) and
per receiver QP (bytes delivered once and in order, duplicates, out-of-order
packets, CE packets, CNPs / ACKs / NAKs sent). ``loop`` has the agent's own figures:
its CPU share and how late its loop woke for the pacers (``pacer_late_p50_s``,
``pacer_late_p99_s``); a DCQCN sender whose agent woke late by its timer T or more
carries a ``feedback_warning`` (:func:`feedback_warning`).
"""
from __future__ import annotations

import array
import collections
import dataclasses
import errno
import math
import os
import select
import socket
import sys
import threading
import time

from common import roce
from common.dcqcn import DcqcnParams, NotificationPoint
from common.rc import Requester, Responder
from traffic.ccplugin import PluginError, failure_in
from traffic.ratecontrol import for_job
from traffic.sockets import big_receive_buffer, udp_receive_errors

ETH_P_ALL = 0x0003
IP_RECVTOS = 13
#: token bucket depth in frames: a sender woken late (9 agents, the controller and Open vSwitch share
#: 2 cores in an 8:1 incast) catches up instead of losing its turn; the host NIC's own shaper still
#: holds the line rate (4 frames lost ~10% of the allowed bytes in a PFC incast here)
BURST_FRAMES = 16
PACING_WARN_FRACTION = 0.9


class TokenBucket:
    """Token bucket on a monotonic clock: ``rate_bps`` refill, at most ``burst_bytes`` saved up.
    A frame may go when the bucket is not in debt; sending takes its bytes (the bucket may go
    negative by one frame). Source: the classic token bucket (e.g. RFC 2697's committed bucket)."""

    def __init__(self, rate_bps: float, burst_bytes: float, now_s: float):
        self.rate_bps, self.burst_bytes = rate_bps, burst_bytes
        self.tokens, self.t_s = burst_bytes, now_s
        self.busy = False
        # what the pacer allowed: the rate's integral over the time the sender had frames waiting,
        # plus the credit saved up while it had none, as that credit is spent (a burst after an idle
        # spell was allowed; counting it keeps sent / allowed at or below 1 for a sender that keeps up)
        self.allowed_bytes = 0.0
        self.idle_credit = float(burst_bytes)

    def _refill(self, now_s: float) -> None:
        add = (now_s - self.t_s) * self.rate_bps / 8
        tokens = min(self.burst_bytes, self.tokens + add)
        if self.busy:
            self.allowed_bytes += add
        else:
            self.idle_credit += tokens - self.tokens
        self.tokens = tokens
        self.idle_credit = min(self.idle_credit, max(tokens, 0.0))
        self.t_s = now_s

    def set_busy(self, busy: bool, now_s: float) -> None:
        """Whether frames are waiting for the pacer from ``now_s`` on: the time they wait counts
        toward :attr:`allowed_bytes` (what the sender should have sent), at the rate then in force."""
        self._refill(now_s)
        self.busy = busy

    def ready_wait_s(self, busy: bool, now_s: float) -> float:
        """:meth:`set_busy` then :meth:`wait_s` in one refill (the sender's per-frame call)."""
        self._refill(now_s)
        self.busy = busy
        return 0.0 if self.tokens >= 0 else -self.tokens * 8 / self.rate_bps

    def set_rate(self, rate_bps: float, now_s: float) -> None:
        """Change the rate from ``now_s`` on (tokens saved so far are kept)."""
        self._refill(now_s)
        self.rate_bps = rate_bps

    def wait_s(self, now_s: float) -> float:
        """Seconds until a frame may go (0 when it may go now)."""
        self._refill(now_s)
        return 0.0 if self.tokens >= 0 else -self.tokens * 8 / self.rate_bps

    def take(self, nbytes: int) -> None:
        """A frame of ``nbytes`` left: take its tokens (the bucket may go into debt by one frame),
        the idle spells' saved credit first (that part counts toward :attr:`allowed_bytes` now)."""
        spent = min(self.idle_credit, float(nbytes))
        self.idle_credit -= spent
        self.allowed_bytes += spent
        self.tokens -= nbytes


def rtt_summary(samples) -> dict:
    """``{"count", "min", "median", "p99"}`` of RTT samples in seconds (percentiles by linear
    interpolation between order statistics, as numpy's default; None without samples)."""
    xs = sorted(samples)
    n = len(xs)

    def pct(q):
        if not n:
            return None
        pos = (n - 1) * q / 100
        lo = int(pos)
        hi = min(lo + 1, n - 1)
        return round(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo), 9)
    return {"count": n, "min": round(xs[0], 9) if n else None, "median": pct(50), "p99": pct(99)}


def params_record(params) -> dict | None:
    """A rate controller's ``params`` as JSON values: a dataclass's fields, a mapping as it is,
    None as None, anything else by its ``repr``."""
    if params is None:
        return None
    if dataclasses.is_dataclass(params) and not isinstance(params, type):
        return dataclasses.asdict(params)
    if isinstance(params, dict):
        return {str(k): (v if isinstance(v, (int, float, str, bool)) or v is None else repr(v))
                for k, v in params.items()}
    return {"repr": repr(params)}


class SenderQp:
    """One requester QP: messages, go-back-N, pacing, its rate controller (traffic.ratecontrol),
    RTT samples from its own send times, statistics."""

    def __init__(self, flow: dict, job: dict, local_mac: str, local_ip: str):
        peer = flow["peer"]
        self.flow_id = flow["flow_id"]
        self.qpn = flow["qpn"]
        src = roce.Endpoint(local_mac, local_ip, flow["udp_sport"], flow["qpn"])
        dst = roce.Endpoint(peer["mac"], peer["ip"], 0, peer["qpn"])
        self.tmpl = roce.FrameTemplate(src, dst, (job.get("dscp", 0) << 2) | roce.ECT0)
        self.req = Requester(mtu_bytes=job.get("mtu_bytes", 1024), rto_s=job.get("rto_s", 0.1))
        self.mode = job.get("mode", "dcqcn")
        self.cc = for_job(job)          # the rate controller (traffic.ratecontrol): DCQCN, a fixed rate, ...
        self.schedule = sorted(((m["at_s"], m["bytes"]) for m in flow.get("messages", [])), reverse=True)
        self.duration_s = flow.get("duration_s")
        self.message_bytes = flow.get("message_bytes", 1 << 20)
        # every frame shape this QP will send, built now (scapy takes ~1 ms a frame, and its first
        # import far longer): nothing is built while the pacer runs
        sizes = {b for _, b in self.schedule} | ({self.message_bytes} if self.duration_s is not None else set())
        for size in sizes:
            self.tmpl.prebuild(roce.message_shapes(size, self.req.mtu_bytes))
        self.pending: bytes | None = None
        self.pending_payload = 0
        self.pending_seq, self.pending_retx, self.pending_ackreq = -1, False, False
        # RTT samples (the rate controller's on_ack): send time of each packet's first transmission
        # by sequence number (a resent one is dropped: Karn's rule), the packets that asked for an
        # ACK, the newest sequence number the last ACK covered, and every sample taken (seconds)
        self.sent_at: dict[int, float] = {}
        self.ackreq_seqs: set[int] = set()
        self.ack_every = job.get("ack_every", 16)
        # below this rate the responder's count (ack_every packets) takes longer than half its
        # coalescing delay: its ACKs come late or from its timer, with no RTT sample, and at a crawl
        # after the local ACK timeout, whose resends Karn's rule leaves unsampled too. A controller
        # that reads round trips then has each packet ask for an ACK (the BTH AckReq bit), so it
        # still hears them; DCQCN and a fixed rate keep the responder's count, and a controller
        # that names its own cadence (ack_every_packets) gets exactly that at any rate
        ack_delay_s = job.get("ack_delay_s") or job.get("rto_s", 0.1) / 8
        self.ask_below_bps = (self.ack_every * (self.req.mtu_bytes + roce.OVERHEAD_BYTES) * 8 / (ack_delay_s / 2)
                              if self.cc.wants_rtt_samples and self.cc.ack_every_packets is None else 0.0)
        # a controller that wants its ACKs more often than the responder's count asks for them
        self.ask_every = self.cc.ack_every_packets
        if self.ask_every is not None and not (isinstance(self.ask_every, int) and not isinstance(self.ask_every, bool)
                                               and self.ask_every >= 1):
            raise ValueError(f"{type(self.cc).__name__}.ack_every_packets must be an integer >= 1 or None, "
                             f"not {self.ask_every!r}")
        self.last_ack_seq = self.req.acked_seq
        self.rtt_samples = array.array("d")
        self.payloads: dict[int, memoryview] = {}     # sequence number -> its payload (data messages)
        self.waiters: collections.deque = collections.deque()   # (Message, callback) by completion order
        self.stats = {"packets_sent": 0, "wire_bytes_sent": 0, "payload_bytes_sent": 0, "cnps_received": 0,
                      "acks_received": 0, "naks_received": 0, "blocked_sends": 0, "host_queue_full": 0}
        self.samples = []           # (t_unix_s, wire_bytes_sent, rate_bps, target_bps)
        self.bucket = None

    @property
    def params(self):
        """The rate controller's parameters (DCQCN's :class:`DcqcnParams`), or None (a fixed rate)."""
        return self.cc.params

    def start(self, now_s: float, unix_offset_s: float) -> None:
        """Start the clock: message times count from ``now_s`` (monotonic); ``unix_offset_s`` converts
        monotonic to Unix seconds in the records. The QP starts at its controller's first rate."""
        self.start_s, self.unix_offset_s = now_s, unix_offset_s
        self.cc.start(now_s)
        frame_bytes = self.req.mtu_bytes + roce.OVERHEAD_BYTES
        self.bucket = TokenBucket(self.rate_bps(), BURST_FRAMES * frame_bytes, now_s)

    # -- messages --
    def post_due(self, now_s: float) -> None:
        """Post the messages whose time has come (and keep a long-lived flow fed)."""
        t = now_s - self.start_s
        while self.schedule and self.schedule[-1][0] <= t:
            self.req.post(self.schedule.pop()[1], now_s)
        if self.duration_s is not None and t < self.duration_s and \
                self.req.outstanding_packets + self.req.unsent_packets < 64:
            self.req.post(self.message_bytes, now_s)

    def post_data(self, data: bytes, now_s: float, on_complete=None):
        """Post a message carrying ``data`` (its bytes go on the wire, one MTU per packet; keep ``data``
        unchanged until it completes). ``on_complete(message)`` is called on the sending thread when
        its last PSN is acknowledged. Returns the :class:`common.rc.Message`.
        Raises ValueError on empty ``data``."""
        mtu = self.req.mtu_bytes
        self.tmpl.prebuild(roce.message_shapes(len(data), mtu))
        m = self.req.post(len(data), now_s)
        mv = memoryview(data).cast("B")
        for i, seq in enumerate(range(m.first_seq, m.last_seq + 1)):
            self.payloads[seq] = mv[i * mtu:(i + 1) * mtu]
        self.waiters.append((m, on_complete))
        return m

    def _completed(self) -> None:
        """Release the payloads of data messages that completed and call their callbacks, in order."""
        while self.waiters and self.waiters[0][0].completed_s is not None:
            m, cb = self.waiters.popleft()
            for seq in range(m.first_seq, m.last_seq + 1):
                self.payloads.pop(seq, None)
            if cb is not None:
                cb(m)

    @property
    def finished(self) -> bool:
        """Every message posted and acknowledged, none left to post, nothing waiting to go."""
        more = self.schedule or (self.duration_s is not None and time.monotonic() - self.start_s < self.duration_s)
        return not more and self.req.done and self.pending is None

    # -- pacing and transmission --
    def rate_bps(self) -> float:
        """The QP's sending rate now (bit/s)."""
        return self.cc.rate_bps()

    def next_frame(self, now_s: float):
        """The frame to send now, or (None, wait_s) until one may go (inf when nothing is to send)."""
        self.cc.advance(now_s)
        if self.cc.rate_bps() != self.bucket.rate_bps:
            self.bucket.set_rate(self.cc.rate_bps(), now_s)
        if self.pending is not None:
            return self.pending, 0.0
        w = self.bucket.ready_wait_s(self.req.unsent_packets > 0, now_s)
        if w > 0:
            return None, w
        pkt = self.req.next_packet(now_s)
        if pkt is None:
            return None, (self.req.rto_s if self.req.outstanding_packets else math.inf)
        ask = (pkt.ackreq or self.bucket.rate_bps < self.ask_below_bps
               or (self.ask_every is not None and pkt.seq % self.ask_every == self.ask_every - 1))
        self.pending = self.tmpl.patch(pkt.opcode, pkt.psn, ask, pkt.payload_bytes,
                                       payload=self.payloads.get(pkt.seq) if self.payloads else None)
        self.pending_payload = pkt.payload_bytes
        self.pending_seq, self.pending_retx, self.pending_ackreq = pkt.seq, pkt.retransmission, ask
        return self.pending, 0.0

    def pump(self, tx: socket.socket, max_frames: int | None = None) -> tuple[float, bool]:
        """Send on ``tx`` every frame the pacer allows now (at most ``max_frames``). Returns (seconds until the next frame may
        go, inf when nothing is to send; whether the socket buffer is full: EAGAIN). Back-pressure is
        counted: EAGAIN in ``blocked_sends``, ENOBUFS (NIC queue full) in ``host_queue_full``."""
        sent = 0
        while max_frames is None or sent < max_frames:
            now = time.monotonic()
            frame, w = self.next_frame(now)
            if frame is None:
                return w, False
            try:
                n = tx.send(frame)
            except BlockingIOError:
                self.stats["blocked_sends"] += 1
                self.pushed_back(now)
                return 0.0, True
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
                self.stats["host_queue_full"] += 1      # the NIC queue is full (or paused): send it again
                self.pushed_back(now)                   # in a moment (the socket itself stays writable)
                return 0.001, False
            self.sent(n, now)
            sent += 1
        return 0.0, False

    def sent(self, nbytes: int, now_s: float) -> None:
        """The pending frame (``nbytes`` on the wire) left at ``now_s``: pacer, counters, byte
        counter, and its send time for the RTT samples (a retransmission's is forgotten: Karn)."""
        self.pending = None
        if self.pending_retx:
            self.sent_at.pop(self.pending_seq, None)
        else:
            self.sent_at[self.pending_seq] = now_s
            if self.pending_ackreq:
                self.ackreq_seqs.add(self.pending_seq)
        self.bucket.take(nbytes)
        st = self.stats
        st["packets_sent"] += 1
        st["wire_bytes_sent"] += nbytes
        st["payload_bytes_sent"] += self.pending_payload
        self.cc.on_sent(nbytes, now_s)

    def pushed_back(self, now_s: float) -> None:
        """The host did not take the frame: keep it (copied: the template buffer is reused), pause accounting."""
        if self.pending is not None and not isinstance(self.pending, bytes):
            self.pending = bytes(self.pending)
        self.bucket.set_busy(False, now_s)

    # -- feedback --
    def on_feedback(self, b: roce.Bth, now_s: float) -> None:
        """A CNP (to the rate controller), ACK or NAK (go-back-N, then the rate controller's
        :meth:`on_ack` with the RTT sample: :meth:`acked`) for this QP arrived at ``now_s``."""
        if b.opcode == roce.CNP:
            self.stats["cnps_received"] += 1
            self.cc.on_cnp(now_s)
            self.bucket.set_rate(self.cc.rate_bps(), now_s)
        elif b.opcode == roce.ACKNOWLEDGE and b.syndrome is not None:
            before = self.req.acked_seq
            if b.syndrome >> 5 == 0:
                self.stats["acks_received"] += 1
                acked = self.req.on_ack(b.psn, now_s)
                if acked:
                    self.acked(before, acked, True, now_s)
            elif b.syndrome == roce.AETH_NAK_SEQ:
                self.stats["naks_received"] += 1
                acked = self.req.on_nak(b.psn, now_s)
                if acked:
                    self.acked(before, acked, False, now_s)
            if self.waiters:
                self._completed()

    def acked(self, before_seq: int, acked_bytes: int, is_ack: bool, now_s: float) -> None:
        """New data up to ``self.req.acked_seq`` (from ``before_seq`` + 1) was acknowledged at
        ``now_s``, ``acked_bytes`` payload bytes, by an ACK (``is_ack``) or a NAK: tell the rate
        controller, with the RTT sample when there is a trustworthy one.

        The sample is ``now_s`` minus the send time of the newest packet acknowledged. There is
        none for a NAK, for a packet that was sent more than once (Karn's rule: whose copy is
        acknowledged is unknown), and for an ACK the responder sent on its coalescing timer
        (common.rc.Responder.flush: it carries up to the job's ``ack_delay_s`` of waiting), nor
        when the clock has not moved since the send (a sample of 0 s is no round trip). The
        responder acknowledges at once every ``ack_every`` accepted packets and every packet that
        asks (the last of a message), and counts from its last ACK; so an ACK that covers
        ``ack_every`` or more packets past the previous ACK's, or a packet that asked, was sent
        at once, and one that covers fewer, without asking, came from the timer."""
        newest = self.req.acked_seq
        sent_at, asked = self.sent_at, self.ackreq_seqs
        rtt = None
        if is_ack:
            t = sent_at.get(newest)
            if t is not None and now_s > t and (newest - self.last_ack_seq >= self.ack_every or newest in asked):
                rtt = now_s - t
                self.rtt_samples.append(rtt)
            self.last_ack_seq = newest
        for seq in range(before_seq + 1, newest + 1):
            sent_at.pop(seq, None)
        if asked:
            asked.difference_update([q for q in asked if q <= newest])
        self.cc.on_ack(now_s, rtt, acked_bytes)
        rate = self.cc.rate_bps()
        if rate != self.bucket.rate_bps:
            self.bucket.set_rate(rate, now_s)

    def sample(self, now_s: float) -> None:
        """Record (Unix time, wire bytes sent, rate, target rate) for the rate-over-time results."""
        self.samples.append((round(now_s + self.unix_offset_s, 6), self.stats["wire_bytes_sent"],
                             round(self.rate_bps()), round(self.cc.target_bps())))

    def record(self) -> dict:
        """The sender QP's result record (see the module docstring)."""
        req = self.req
        msgs = [{"bytes": m.size_bytes, "posted_unix_s": m.posted_s + self.unix_offset_s,
                 "first_sent_unix_s": None if m.first_sent_s is None else m.first_sent_s + self.unix_offset_s,
                 "completed_unix_s": None if m.completed_s is None else m.completed_s + self.unix_offset_s,
                 "fct_s": None if m.completed_s is None else m.completed_s - m.posted_s} for m in req.messages]
        busy_s = None
        if self.samples:
            busy_s = self.samples[-1][0] - self.samples[0][0]
        allowed = self.bucket.allowed_bytes
        achieved_fraction = self.stats["wire_bytes_sent"] / allowed if allowed > 0 else None
        rec = {"flow_id": self.flow_id, "qpn": self.qpn, "mode": self.mode,
               "start_at_unix_s": self.start_s + self.unix_offset_s, **self.stats,
               "message_bytes": sum(m.size_bytes for m in req.messages),
               "messages": msgs, "all_complete": all(m["completed_unix_s"] is not None for m in msgs) and bool(msgs),
               "retransmitted_packets": req.retransmitted_packets, "naks": req.naks, "timeouts": req.timeouts,
               "allowed_bytes": round(allowed), "achieved_fraction_of_pacer": achieved_fraction,
               "final_rate_bps": self.rate_bps(), **self.cc.record(), "cc_params": params_record(self.cc.params),
               "rtt_s": rtt_summary(self.rtt_samples), "samples": self.samples, "sampled_s": busy_s}
        if achieved_fraction is not None and achieved_fraction < PACING_WARN_FRACTION:
            rec["pacing_warning"] = (f"SENDER BELOW TARGET: flow {self.flow_id} sent {achieved_fraction:.0%} of the "
                                     f"bytes its pacer allowed (case T5): its rates are not what was asked")
        return rec


class ReceiverQp:
    """One responder QP with its notification point's bookkeeping and prebuilt reply frames."""

    def __init__(self, flow: dict, job: dict, local_mac: str, local_ip: str):
        peer = flow["peer"]
        self.flow_id, self.qpn = flow["flow_id"], flow["qpn"]
        src = roce.Endpoint(local_mac, local_ip, peer.get("udp_sport", 49152), flow["qpn"])
        dst = roce.Endpoint(peer["mac"], peer["ip"], 0, peer["qpn"])
        tos = job.get("cnp_dscp", 48) << 2
        self.acks = roce.FrameTemplate(src, dst, tos)
        self.acks.prebuild([(roce.ACKNOWLEDGE, roce.AETH_BYTES)])
        self.cnp = roce.cnp_frame(src, dst, tos)
        self.resp = Responder(ack_every=job.get("ack_every", 16))
        self.expect_bytes = flow.get("expect_bytes")
        self.unix_offset_s = 0.0
        self.ce_packets = self.ect_packets = self.not_ect_packets = self.cnps_sent = 0
        self.first_s = self.last_s = None
        self.samples = []
        self.on_message = None      # callback(bytes) for each whole message, when the payload is wanted
        self._message = bytearray()

    def reply_frame(self, kind: str, psn: int) -> bytes:
        """The ACK (``kind`` "ack") or NAK ("nak") frame for ``psn`` to this QP's requester."""
        return bytes(self.acks.patch(roce.ACKNOWLEDGE, psn, False, roce.AETH_BYTES,
                                     roce.aeth(kind == "nak", self.resp.messages_done)))

    def on_data(self, b: roce.Bth, ecn: int, nps: NotificationPoint, now_s: float, payload=None) -> list[bytes]:
        """One data packet (its BTH, the IP ECN field it arrived with, its ``payload`` bytes) at
        ``now_s``: counts it, asks the notification point for a CNP, runs the responder; returns the
        frames to send back. With :attr:`on_message` set, the payloads the responder accepts (in PSN
        order, each once) are joined and every whole message is handed to it."""
        if ecn == roce.CE:
            self.ce_packets += 1
        elif ecn:
            self.ect_packets += 1
        else:
            self.not_ect_packets += 1
        if self.first_s is None:
            self.first_s = now_s
        self.last_s = now_s
        out = []
        if nps.on_packet(b.dqpn, ecn == roce.CE, now_s):
            self.cnps_sent += 1
            out.append(self.cnp)
        r = self.resp.on_packet(b.psn, b.payload_bytes, b.ackreq, b.opcode in (roce.SEND_LAST, roce.SEND_ONLY))
        if self.on_message is not None and r.deliver:
            self._message += payload[:r.deliver]
            if r.message_done:
                msg, self._message = bytes(self._message), bytearray()
                self.on_message(msg)
        if r.reply is not None:
            out.append(self.reply_frame(*r.reply))
        return out

    @property
    def complete(self) -> bool:
        """Every expected byte arrived (never true for a long-lived flow, whose size is unknown)."""
        return self.expect_bytes is not None and self.resp.delivered_bytes >= self.expect_bytes

    def record(self) -> dict:
        """The receiver QP's result record (see the module docstring)."""
        r, off = self.resp, self.unix_offset_s
        return {"flow_id": self.flow_id, "qpn": self.qpn, "bytes_delivered": r.delivered_bytes,
                "packets_delivered": r.delivered_packets, "messages_done": r.messages_done,
                "duplicates": r.duplicates, "out_of_order": r.out_of_order, "naks_sent": r.naks_sent,
                "acks_sent": r.acks_sent, "ce_packets": self.ce_packets, "ect_packets": self.ect_packets,
                "not_ect_packets": self.not_ect_packets, "cnps_sent": self.cnps_sent,
                "expect_bytes": self.expect_bytes, "complete": self.complete,
                "first_byte_unix_s": None if self.first_s is None else self.first_s + off,
                "last_byte_unix_s": None if self.last_s is None else self.last_s + off, "samples": self.samples}


class PcapThread(threading.Thread):
    """Capture every frame on ``ifname`` into a pcap file (scapy's PcapWriter) until stopped."""

    def __init__(self, ifname: str, path: str):
        super().__init__(daemon=True)
        from scapy.utils import PcapWriter   # scapy loads in ~0.8 s: only an agent that captures
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        big_receive_buffer(self.sock, 16 << 20)   # a burst must not overflow the capture while the sender runs
        self.sock.bind((ifname, 0))
        self.sock.settimeout(0.1)
        self.writer = PcapWriter(path, linktype=1, sync=False)
        self.stop = threading.Event()
        self.frames = 0

    def run(self):
        """Write every frame seen until :attr:`stop` is set; then close the file and the socket."""
        while not self.stop.is_set():
            try:
                data = self.sock.recv(65535)
            except socket.timeout:
                continue
            except OSError:
                break
            self.writer.write(data)
            self.frames += 1
        self.writer.close()
        self.sock.close()


def open_sockets(ifname: str) -> tuple[socket.socket, socket.socket]:
    """The transmit AF_PACKET socket on ``ifname`` and the receive UDP 4791 socket (IP_RECVTOS)."""
    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    tx.bind((ifname, 0))
    tx.setblocking(False)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    big_receive_buffer(rx)
    rx.setsockopt(socket.IPPROTO_IP, IP_RECVTOS, 1)
    rx.bind(("0.0.0.0", roce.ROCE_UDP_PORT))
    rx.setblocking(False)
    return tx, rx


def receive_waiting(rx: socket.socket, buf: bytearray, cmsg_space: int, senders: dict, receivers: dict,
                    nps: NotificationPoint, now_s: float, replies: list, stats: dict) -> bool:
    """Read every RoCE datagram waiting on ``rx``: data to its receiver QP (ECN field from
    IP_RECVTOS; the ACK/NAK/CNP frames it answers with are appended to ``replies``), feedback to
    its sender QP (by destination QP number). Counts ``rx_frames`` and ``rx_unknown_qp`` in
    ``stats``; returns whether anything arrived."""
    got = False
    while True:
        try:
            n, anc, _flags, _addr = rx.recvmsg_into([buf], cmsg_space)
        except BlockingIOError:
            return got
        got = True
        stats["rx_frames"] += 1
        try:
            b = roce.parse_bth(memoryview(buf)[:n])
        except ValueError:
            continue
        q = (receivers if b.opcode in roce.DATA_OPCODES else senders).get(b.dqpn)
        if q is None:
            stats["rx_unknown_qp"] += 1
        elif b.opcode in roce.DATA_OPCODES:
            payload = memoryview(buf)[roce.BTH_BYTES:roce.BTH_BYTES + b.payload_bytes] \
                if q.on_message is not None else None           # only a QP that keeps the data
            replies += q.on_data(b, (anc[0][2][0] if anc else 0) & 3, nps, now_s, payload)
        else:
            q.on_feedback(b, now_s)


def send_replies(tx: socket.socket, replies: list, stats: dict) -> None:
    """Send ``replies`` in order on ``tx``, removing what went; stop at back-pressure (EAGAIN or
    ENOBUFS, counted in ``stats["reply_blocked"]``): the rest waits for the next loop.
    Raises OSError for any other send error."""
    while replies:
        try:
            tx.send(replies[0])
        except BlockingIOError:
            stats["reply_blocked"] += 1
            return
        except OSError as e:
            if e.errno != errno.ENOBUFS:
                raise
            stats["reply_blocked"] += 1
            return
        replies.pop(0)


def plugin_failure(exc: BaseException, job: dict) -> PluginError | None:
    """When ``job`` runs a rate-controller plug-in (``cc_plugin``) and ``exc`` came from the
    plug-in's code: a PluginError naming the file, the exception and its line (the agent records
    it as its error; experiments.workloads.roce ends the run with it). Else None."""
    path = job.get("cc_plugin")
    return failure_in(exc, path) if path else None


def feedback_warning(q: "SenderQp", late_p99_s: float | None) -> str | None:
    """A warning when the agent's loop woke too late for ``q``'s DCQCN timers, else None.

    DCQCN's control loop is stable only while its feedback (CNPs, the sender's reaction) is fast
    against its timers (Zhu et al., SIGCOMM 2015, the fluid model's analysis: the rate-increase
    timer T and the alpha timer K must be long against the feedback delay). When the agent's pacer wake-ups
    are late by T or more at the 99th percentile (a slow or emulated CPU: p99 ~6 ms in the VM lane
    under TCG, 0.7 ms on a 2-core host), rates overshoot and are cut again and again and the port
    runs below capacity; longer timers (``time_scale``) help."""
    timer_s = getattr(q.params, "timer_s", None)      # DCQCN's T; other controllers have no such timer
    if timer_s is None or late_p99_s is None or late_p99_s < timer_s:
        return None
    return (f"DCQCN FEEDBACK TOO SLOW: flow {q.flow_id}'s agent woke {late_p99_s * 1e3:.1f} ms late at the 99th "
            f"percentile, against DCQCN's timer T {q.params.timer_s * 1e3:.1f} ms: expect rate oscillation and an "
            f"underused port; raise roce.dcqcn.time_scale")


class EndBarrier:
    """The agent's side of a round's end barrier, on its stdio (after READY and the start time).

    A host whose QPs are done (every sent message acknowledged, every expected byte delivered)
    would otherwise linger 3 x ``rto_s`` in case a peer's last ACK was lost and the peer sends
    again (at the default RTO of a 100-packet buffer at 10 Mbit/s, about 3 s a round). Instead it
    prints ``FINISHED`` once; the runner (experiments.live.Agents.wait), once every agent of the
    round has said so or ended, writes ``END`` on each one's stdin: every sender then holds an
    ACK for all it sent, so no frame can still need an answer and the loop ends at once. Without
    ``END`` (a runner that does not take part, a peer that never finishes) the linger still ends
    the loop, as before.

    Args:
        out: where ``FINISHED`` goes (a text stream; the agent's stdout).
        fd: the descriptor ``END`` arrives on (the agent's stdin, 0).
    """
    FINISHED = "FINISHED"
    END = b"END"

    def __init__(self, out, fd: int = 0):
        self.out, self.fd = out, fd
        self.said = self.ended = self.closed = False
        self._buf = b""

    def arrive(self) -> None:
        """Say ``FINISHED`` (once)."""
        if not self.said:
            self.said = True
            print(self.FINISHED, file=self.out, flush=True)

    def watching(self) -> bool:
        """Whether :attr:`fd` is to be watched: said, not yet ended, not at end of file."""
        return self.said and not self.ended and not self.closed

    def read(self) -> bool:
        """Read what :attr:`fd` holds (call when it is readable); True once ``END`` arrived. End of
        file (the runner gone) stops the watching and leaves the linger to end the loop."""
        data = os.read(self.fd, 4096)
        if not data:
            self.closed = True
        self._buf += data
        self.ended = self.ended or self.END in self._buf.split(b"\n")
        return self.ended


class Engine:
    """One host's RoCE transport: its QPs, one transmit and one receive socket, and the loop that
    moves their frames (module docstring). Other threads hand it work with :meth:`call_soon`
    (the loop runs the callable on its own thread and wakes at once).

    Args:
        job: the host's job (module docstring: ``ifname``, ``line_rate_mbps``, ``dcqcn``, ``rto_s``, ...).
        senders, receivers: ``{qpn: SenderQp}``, ``{qpn: ReceiverQp}``.

    Raises:
        OSError: the sockets cannot be opened (not in a host namespace, no such interface).
    """

    def __init__(self, job: dict, senders: dict, receivers: dict):
        self.job, self.senders, self.receivers = job, senders, receivers
        self.tx, self.rx = open_sockets(job["ifname"])
        self.nps = NotificationPoint(job.get("dcqcn", {}).get("cnp_interval_s") or
                                     DcqcnParams.scaled(job["line_rate_mbps"] * 1e6).cnp_interval_s)
        # ended_by: how a loop that ended by itself ended ("end barrier" or "linger"; None: not so)
        self.stats = {"rx_frames": 0, "rx_unknown_qp": 0, "reply_blocked": 0, "loops": 0, "ended_by": None}
        self.late: list[float] = []          # how late select() returned past a pacer's wait, seconds
        self.inbox: collections.deque = collections.deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.unix_offset_s = 0.0             # Unix time = monotonic time + this
        self.cpu0_s = self.wall0_s = None    # process CPU and monotonic time when the loop started

    def start_clock(self) -> float:
        """Start every QP's clock now; returns the monotonic now (Unix = monotonic + :attr:`unix_offset_s`)."""
        now = time.monotonic()
        self.unix_offset_s = time.time() - now
        for q in self.senders.values():
            q.start(now, self.unix_offset_s)
        for q in self.receivers.values():
            q.unix_offset_s = self.unix_offset_s
        return now

    def call_soon(self, fn) -> None:
        """Run ``fn(now_monotonic_s)`` on the loop's thread at its next turn (thread-safe)."""
        self.inbox.append(fn)
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass                            # the pipe is full: the loop is already due to wake

    def loop(self, finished, deadline_unix_s: float, barrier: EndBarrier | None = None) -> str | None:
        """Move frames until ``finished(now)`` holds, nothing waits to be sent and either nothing
        arrived for a linger of 3 x rto_s (peers may still need ACKs) or, with ``barrier``, the
        runner said every agent is done (:class:`EndBarrier`: said once ``finished`` holds); or
        until ``deadline_unix_s`` or ``job["stopped"]`` (the agent's SIGTERM). Returns None,
        ``"deadline passed"`` or ``"stopped by the runner"``."""
        job, senders, receivers, stats = self.job, self.senders, self.receivers, self.stats
        rx, tx, nps = self.rx, self.tx, self.nps
        now = time.monotonic()
        interval = job.get("sample_interval_s", 0.05)
        linger_s = 3 * job.get("rto_s", 0.1)
        ack_delay_s = job.get("ack_delay_s") or job.get("rto_s", 0.1) / 8
        deadline_mono = deadline_unix_s - self.unix_offset_s
        buf = bytearray(4200)
        cmsg_space = socket.CMSG_SPACE(4)
        replies: list[bytes] = []
        next_sample = now
        last_rx = now
        order = list(senders.values())      # the QPs are fixed; who goes first rotates per turn
        self.cpu0_s, self.wall0_s = time.process_time(), now
        while True:
            now = time.monotonic()
            if now >= deadline_mono:
                return "deadline passed"
            if job.get("stopped"):              # SIGTERM (traffic.agent.stop_on_sigterm)
                return "stopped by the runner"
            stats["loops"] += 1
            while self.inbox:
                self.inbox.popleft()(now)
            if receive_waiting(rx, buf, cmsg_space, senders, receivers, nps, now, replies, stats):
                last_rx = now
            send_replies(tx, replies, stats)         # replies first (ACK/NAK/CNP), then data
            wait = math.inf
            blocked = bool(replies)
            if not blocked:
                k = stats["loops"] % len(order) if len(order) > 1 else 0
                for q in (order[k:] + order[:k] if k else order):
                    q.post_due(now)
                    w, blocked = q.pump(tx)
                    wait = min(wait, w)
                    if blocked:
                        break
            now = time.monotonic()
            for q in receivers.values():
                if q.last_s is not None and now - q.last_s >= ack_delay_s:
                    r = q.resp.flush()
                    if r is not None:
                        replies.append(q.reply_frame(*r))
                if q.first_s is not None and now >= next_sample:
                    q.samples.append((round(now + self.unix_offset_s, 6), q.resp.delivered_bytes))
            if now >= next_sample:
                for q in senders.values():
                    q.sample(now)
                next_sample = now + interval
            done = finished(now) and not self.inbox
            if done and barrier is not None:
                barrier.arrive()
            if done and not replies and (now - last_rx >= linger_s or (barrier is not None and barrier.ended)):
                self.stats["ended_by"] = "end barrier" if barrier is not None and barrier.ended else "linger"
                return None
            timeout = min(wait, next_sample - now, linger_s, deadline_mono - now)
            if done:
                timeout = min(timeout, linger_s - (now - last_rx))
            t_sel = time.monotonic()
            watch = [rx, self._wake_r] + ([barrier.fd] if barrier is not None and barrier.watching() else [])
            ready_rx, _w, _x = select.select(watch, [tx] if blocked else [], [], max(0.0, timeout))
            if barrier is not None and barrier.fd in ready_rx and barrier.read():
                continue
            if self._wake_r in ready_rx:
                try:
                    os.read(self._wake_r, 4096)
                except BlockingIOError:
                    pass
            elif not ready_rx and timeout == wait and 0 < wait < math.inf:
                self.late.append(time.monotonic() - t_sel - wait)

    def loop_stats(self) -> dict:
        """The loop's counters with its CPU share and the pacer wake-up lateness (p50, p99; seconds)."""
        stats = dict(self.stats)
        wall_s = time.monotonic() - self.wall0_s if self.wall0_s is not None else 0.0
        stats["cpu_fraction"] = round((time.process_time() - self.cpu0_s) / wall_s, 3) if wall_s > 0 else None
        late = sorted(self.late)
        stats["pacer_wakeups"] = len(late)
        stats["pacer_late_p50_s"] = round(late[len(late) // 2], 6) if late else None
        stats["pacer_late_p99_s"] = round(late[int(len(late) * 0.99)], 6) if late else None
        return stats

    def sender_records(self, late_p99_s: float | None) -> list[dict]:
        """Every sender QP's record, with its :func:`feedback_warning` when there is one."""
        recs = []
        for q in self.senders.values():
            rec = q.record()
            w = feedback_warning(q, late_p99_s)
            if w:
                rec["feedback_warning"] = w
            recs.append(rec)
        return recs

    def close(self) -> None:
        """Close the sockets and the wake-up pipe."""
        for s in (self.tx, self.rx):
            s.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass


def run_roce(job: dict, ready=None, start_at_unix_s: float | None = None) -> dict:
    """Run one host's QPs (module docstring); returns the result record. ``ready`` is called once the
    sockets are open (the agent prints READY there) and must return the start time (Unix s)."""
    try:
        senders = {f["qpn"]: SenderQp(f, job, job["mac"], job["ip"]) for f in job.get("send", [])}
    except Exception as e:
        raise plugin_failure(e, job) or e
    receivers = {f["qpn"]: ReceiverQp(f, job, job["mac"], job["ip"]) for f in job.get("receive", [])}
    eng = Engine(job, senders, receivers)
    udp_before = udp_receive_errors()
    pcap = PcapThread(job["ifname"], job["pcap"]) if job.get("pcap") else None
    start_unix = ready() if ready is not None else (start_at_unix_s or time.time())
    if pcap:
        pcap.start()
    while time.time() < start_unix:
        time.sleep(min(0.01, max(0.0, start_unix - time.time())))
    eng.start_clock()

    def finished(now):
        return all(q.finished for q in senders.values()) and \
            all(q.complete or (q.expect_bytes is None and q.last_s is not None and now - q.last_s > 1.0)
                for q in receivers.values())
    try:
        error = eng.loop(finished, job["deadline_unix_s"],
                         EndBarrier(sys.stdout) if job.get("end_barrier") and ready is not None else None)
    except Exception as e:
        raise plugin_failure(e, job) or e
    finally:
        if pcap:
            pcap.stop.set()
            pcap.join(2)
        eng.close()
    stats = eng.loop_stats()
    return {"role": "roce", "host_ip": job["ip"], "start_at_unix_s": start_unix, "mode": job.get("mode", "dcqcn"),
            "senders": eng.sender_records(stats["pacer_late_p99_s"]),
            "receivers": [q.record() for q in receivers.values()],
            "loop": stats, "pcap_frames": pcap.frames if pcap else None, "error": error,
            "host_udp_drops": {k: v - udp_before[k] for k, v in udp_receive_errors().items()}}
