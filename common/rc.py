"""Reliable-connection (RC) queue pair logic: PSNs, coalesced ACKs, NAK and go-back-N.

Pure state machines, no sockets, driven by injected time; traffic.roce moves
the frames. Source: InfiniBand Architecture Specification Vol. 1, 9.7
(requester and responder behaviour of the RC transport), as RoCEv2 NICs run
it without selective retransmission:

- Requester (:class:`Requester`): sends each message as packets with
  consecutive PSNs (24-bit, wrapping), the last with the ack-request bit.
  A cumulative ACK for PSN p acknowledges every PSN up to p; a message is
  complete when its last PSN is acknowledged. A NAK (PSN sequence error)
  for PSN p acknowledges everything before p and rewinds sending to p
  (go-back-N). With nothing acknowledged for ``rto_s`` while packets are
  outstanding (the lost packet was the last one, or the NAK was lost),
  sending rewinds to the oldest unacknowledged PSN (the local ACK timeout).
- Responder (:class:`Responder`): accepts only the expected PSN (ePSN).
  A packet ahead of it is dropped and answered with one NAK per gap (no
  further NAK until the ePSN arrives); a duplicate (behind it) is dropped and
  answered with an ACK of ePSN - 1 so a requester that rewound moves on.
  ACKs are coalesced: one every ``ack_every`` accepted packets, one for
  every packet that asks (the last of a message), and one when accepted
  packets have waited a while unacknowledged (:meth:`Responder.flush`).

PSNs are tracked internally as unbounded sequence numbers (the PSN is the
sequence number mod 2^24), so wrap-around needs no special case.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from common.roce import PSN_MASK, message_opcodes, psn_diff


@dataclass
class Message:
    """One message of a requester: ``size_bytes`` in packets ``first_seq`` .. ``last_seq``;
    ``posted_s`` when it was queued, ``completed_s`` when its last PSN was acknowledged."""
    msg_id: int
    size_bytes: int
    first_seq: int
    last_seq: int
    posted_s: float
    first_sent_s: float | None = None
    completed_s: float | None = None


@dataclass(slots=True)
class Packet:
    """What to send next: sequence number (PSN = seq mod 2^24), opcode, ack-request bit, payload bytes,
    and whether it is a retransmission."""
    seq: int
    opcode: int
    ackreq: bool
    payload_bytes: int
    retransmission: bool

    @property
    def psn(self) -> int:
        """The 24-bit PSN on the wire."""
        return self.seq & PSN_MASK


@dataclass
class Requester:
    """Go-back-N sender side of one QP (see the module docstring). ``mtu_bytes``: payload bytes per
    packet (an IB path MTU: 256, 512, 1024, 2048 or 4096); ``rto_s``: local ACK timeout.
    Raises ValueError on a bad MTU or message size."""
    mtu_bytes: int = 1024
    rto_s: float = 0.1
    start_psn: int = 0
    messages: list = field(default_factory=list)
    retransmitted_packets: int = 0
    naks: int = 0
    timeouts: int = 0

    def __post_init__(self):
        if self.mtu_bytes not in (256, 512, 1024, 2048, 4096):
            raise ValueError(f"mtu_bytes must be an IB path MTU (256..4096), not {self.mtu_bytes}")
        self._next_new = self.start_psn        # next sequence number never sent
        self._send = self.start_psn            # next sequence number to transmit
        self._una = self.start_psn             # oldest unacknowledged
        self._highest_sent = self.start_psn - 1
        self._last_progress_s = None
        self._pkts: dict[int, tuple[int, bool, int]] = {}   # seq -> opcode, ackreq, payload
        self._open = 0                         # index of the oldest incomplete message
        self._unstarted = 0                    # index of the first message none of whose packets was sent

    def post(self, size_bytes: int, now_s: float) -> Message:
        """Queue a message of ``size_bytes`` (>= 1) for sending; returns its record."""
        if not (isinstance(size_bytes, int) and size_bytes >= 1):
            raise ValueError(f"message size_bytes must be an integer >= 1, not {size_bytes!r}")
        n = -(-size_bytes // self.mtu_bytes)
        first = self._next_new
        for i, op in enumerate(message_opcodes(n)):
            last = i == n - 1
            self._pkts[first + i] = (op, last, size_bytes - (n - 1) * self.mtu_bytes if last else self.mtu_bytes)
        self._next_new += n
        m = Message(len(self.messages), size_bytes, first, first + n - 1, now_s)
        self.messages.append(m)
        return m

    @property
    def outstanding_packets(self) -> int:
        """Packets sent and not yet acknowledged."""
        return self._highest_sent + 1 - self._una

    @property
    def highest_sent_psn(self) -> int:
        """The PSN of the newest packet sent so far (wrapped to 24 bits)."""
        return self._highest_sent & PSN_MASK

    @property
    def unsent_packets(self) -> int:
        """Packets posted (or rewound by go-back-N) that wait to be transmitted."""
        return self._next_new - self._send

    @property
    def done(self) -> bool:
        """Every posted message is complete."""
        return self._una == self._next_new

    def next_packet(self, now_s: float) -> Packet | None:
        """The packet to transmit now, or None when everything posted was sent (and awaits ACKs).
        Fires the local ACK timeout first when due."""
        self.check_timeout(now_s)
        if self._send >= self._next_new:
            return None
        seq = self._send
        self._send += 1
        op, ackreq, size = self._pkts[seq]
        retx = seq <= self._highest_sent
        if retx:
            self.retransmitted_packets += 1
        else:
            self._highest_sent = seq
            ms = self.messages
            if self._unstarted < len(ms) and ms[self._unstarted].first_seq == seq:
                ms[self._unstarted].first_sent_s = now_s
                self._unstarted += 1
        if self._last_progress_s is None:
            self._last_progress_s = now_s
        return Packet(seq, op, ackreq, size, retx)

    def _acked_through(self, seq_exclusive: int, now_s: float) -> int:
        """Acknowledge every sequence number below ``seq_exclusive``; returns the payload bytes
        that were not acknowledged before."""
        if seq_exclusive <= self._una:
            return 0
        acked = 0
        pkts = self._pkts
        for s in range(self._una, seq_exclusive):
            p = pkts.pop(s, None)
            if p is not None:
                acked += p[2]
        self._una = seq_exclusive
        self._send = max(self._send, self._una)
        self._last_progress_s = now_s
        while self._open < len(self.messages) and self.messages[self._open].last_seq < self._una:
            self.messages[self._open].completed_s = now_s
            self._open += 1
        return acked

    def _seq_of(self, psn: int) -> int:
        """The sequence number of an incoming PSN, taken as the nearest to the oldest unacknowledged one."""
        return self._una + psn_diff(psn, self._una & PSN_MASK)

    @property
    def acked_seq(self) -> int:
        """The newest sequence number acknowledged so far (``start_psn - 1`` before any)."""
        return self._una - 1

    def on_ack(self, psn: int, now_s: float) -> int:
        """Cumulative ACK of every PSN up to ``psn``. ACKs of PSNs never sent are ignored.
        Returns the payload bytes it acknowledged that were not acknowledged before (0 for a
        duplicate)."""
        seq = self._seq_of(psn)
        if seq <= self._highest_sent:
            return self._acked_through(seq + 1, now_s)
        return 0

    def on_nak(self, psn: int, now_s: float) -> int:
        """NAK, PSN sequence error, expecting ``psn``: everything before it is acknowledged, and
        sending goes back to it. Returns the payload bytes it acknowledged that were not
        acknowledged before."""
        seq = self._seq_of(psn)
        if seq > self._highest_sent + 1 or seq < self._una:
            return 0
        self.naks += 1
        acked = self._acked_through(seq, now_s)
        self._send = seq
        self._last_progress_s = now_s
        return acked

    def check_timeout(self, now_s: float) -> bool:
        """Go back to the oldest unacknowledged PSN when nothing was acknowledged for ``rto_s``
        while packets are outstanding; True when it fired."""
        if self.outstanding_packets > 0 and self._last_progress_s is not None and \
                now_s - self._last_progress_s >= self.rto_s and self._send > self._una:
            self.timeouts += 1
            self._send = self._una
            self._last_progress_s = now_s
            return True
        return False


@dataclass
class Response:
    """What the responder does with one packet: ``deliver`` the payload bytes (0 when dropped), and
    ``reply``: None, ("ack", psn) or ("nak", psn); ``message_done`` when a message's last packet was
    accepted."""
    deliver: int
    reply: tuple | None
    message_done: bool
    duplicate: bool = False
    out_of_order: bool = False


@dataclass
class Responder:
    """Go-back-N receiver side of one QP (see the module docstring)."""
    ack_every: int = 16
    start_psn: int = 0
    delivered_packets: int = 0
    delivered_bytes: int = 0
    messages_done: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    naks_sent: int = 0
    acks_sent: int = 0

    def __post_init__(self):
        if not (isinstance(self.ack_every, int) and self.ack_every >= 1):
            raise ValueError(f"ack_every must be an integer >= 1, not {self.ack_every!r}")
        self._expected = self.start_psn
        self._nak_pending = False
        self._since_ack = 0

    def on_packet(self, psn: int, payload_bytes: int, ackreq: bool, last_of_message: bool) -> Response:
        """Account one data packet (PSN as received) and say what to do."""
        d = psn_diff(psn, self._expected & PSN_MASK)
        if d > 0:
            self.out_of_order += 1
            if self._nak_pending:
                return Response(0, None, False, out_of_order=True)
            self._nak_pending = True
            self.naks_sent += 1
            return Response(0, ("nak", self._expected & PSN_MASK), False, out_of_order=True)
        if d < 0:
            self.duplicates += 1
            self.acks_sent += 1
            return Response(0, ("ack", (self._expected - 1) & PSN_MASK), False, duplicate=True)
        self._expected += 1
        self._nak_pending = False
        self.delivered_packets += 1
        self.delivered_bytes += payload_bytes
        if last_of_message:
            self.messages_done += 1
        self._since_ack += 1
        reply = None
        if ackreq or self._since_ack >= self.ack_every:
            self._since_ack = 0
            self.acks_sent += 1
            reply = ("ack", psn)
        return Response(payload_bytes, reply, last_of_message)

    def flush(self) -> tuple | None:
        """The coalescing timer's ACK: ("ack", ePSN - 1) when accepted packets wait for one, else None
        (the caller calls it after a quiet spell, so a slow requester's packets are acknowledged
        before its timeout would resend them)."""
        if self._since_ack == 0:
            return None
        self._since_ack = 0
        self.acks_sent += 1
        return ("ack", (self._expected - 1) & PSN_MASK)
