"""PFC's pause gates: the priority classes under a port's shaper and the gate that closes one
class when its downstream port sends a pause.

Errors are raised as :class:`common.errors.SetupError` carrying the kernel's own message.
"""
from __future__ import annotations

import os
import socket
import struct
import threading
from dataclasses import dataclass

from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import RTM_NEWQDISC, tcmsg

from common.errors import SetupError
from common.units import shaper_burst_bytes
from controller.dataplane.netlink import HTB_CLASS, HTB_ROOT, NLMSG_ERROR, in_netns, ipr_given_or_in, link_index
from controller.timers import shaper_slack_s


#: A paused gate still owns a token bucket: 8 kbit/s with a one-frame burst. pyroute2 encodes
#: slower TBF rates with a 1514-byte burst wrongly (the kernel saw 429 bytes and dropped every
#: packet), and TBF needs a burst of at least one frame. See docs/pfc-dataplane.md.
PAUSED_RATE_BPS = 8000


PAUSED_BURST_BYTES = 1514


def prio_class(prio: int) -> int:
    """The HTB class ``1:1p`` (minor 0x10 + prio) that holds priority ``prio``'s queue."""
    return HTB_ROOT | (0x10 + prio)


def prio_gate_handle(prio: int) -> int:
    """The handle ``(0x10+prio):`` of priority ``prio``'s TBF pause gate (its bfifo is the gate's child)."""
    return (0x10 + prio) << 16


@dataclass(frozen=True)
class PriorityQueues:
    """The egress queues of one port with a queue per priority (issue 6).

    ``htb 1:`` -> ``1:1`` (the link rate) -> ``1:1p`` per priority (strict: HTB prio 7-p with a
    token guaranteed rate, so the highest priority number is served first; weighted: guaranteed
    rates in proportion to the weights, all borrowing up to the link) -> a TBF gate at the link
    rate (closed to pause) -> its bfifo.

    Attributes:
        rate_bps: the link rate in bit/s.
        fifo_bytes: ``{prio: bfifo limit in bytes}``; its keys are the port's priorities.
        default_prio: the class of frames no classifier placed.
        weights: ``{prio: weight}`` for weighted scheduling, None for strict priority.
        burst_bytes: HTB burst and cburst (and the open gate's burst) in bytes; None: from the
            rate and the shaper's timer slack (:func:`common.units.shaper_burst_bytes`,
            :func:`controller.timers.shaper_slack_s`).
    """
    rate_bps: float
    fifo_bytes: dict
    default_prio: int = 0
    weights: dict | None = None
    burst_bytes: int | None = None

    def __post_init__(self):
        if self.burst_bytes is None:
            object.__setattr__(self, "burst_bytes", shaper_burst_bytes(self.rate_bps, shaper_slack_s()))

    def class_rate_bps(self, prio: int) -> int:
        """Guaranteed rate of priority ``prio``'s class (the rest is borrowed up to the link)."""
        if self.weights:
            return max(8000, int(self.rate_bps * self.weights[prio] / sum(self.weights.values())))
        return max(8000, int(self.rate_bps / 1000))

    def gate_burst_bytes(self) -> int:
        """The open gate's burst: :data:`OPEN_GATE_BURST_FRAMES` full frames, never below HTB's. The
        HTB classes above already hold the port to its rate, so an open gate only has to pass
        what they hand it; a TBF with a burst as small as HTB's loses tokens whenever the qdisc
        runs late (timer slack, a busy CPU). In the VM lane the default experiment's ECN round
        measured a queue median of 36 packets (K = 20) with a 2-frame gate burst, 28 with this."""
        return max(self.burst_bytes, OPEN_GATE_BURST_FRAMES * 1514)


#: Burst of an open pause gate in full frames (see PriorityQueues.gate_burst_bytes).
OPEN_GATE_BURST_FRAMES = 32


def install_priority_queues(ifname: str, q: PriorityQueues, netns_pid: int | None = None, ipr=None) -> None:
    """Replace the root qdisc of ``ifname`` with the tree of :class:`PriorityQueues` (``ipr``: an
    open ``IPRoute`` on the port's namespace to use, else one is opened in ``netns_pid``'s).

    Raises:
        SetupError: the interface is missing, the kernel refused a qdisc or class, or the
            read-back lacks one of them.
    """
    rate = int(round(q.rate_bps))
    try:
        with ipr_given_or_in(ipr, netns_pid) as ipr:
            idx = link_index(ipr, ifname)
            ipr.tc("replace", "htb", idx, HTB_ROOT, default=0x10 + q.default_prio)
            ipr.tc("replace-class", "htb", idx, HTB_CLASS, parent=HTB_ROOT, rate=f"{rate}bit", ceil=f"{rate}bit",
                   burst=q.burst_bytes, cburst=q.burst_bytes)
            for prio, limit in sorted(q.fifo_bytes.items()):
                ipr.tc("replace-class", "htb", idx, prio_class(prio), parent=HTB_CLASS,
                       rate=f"{q.class_rate_bps(prio)}bit", ceil=f"{rate}bit", burst=q.burst_bytes,
                       cburst=q.burst_bytes, prio=0 if q.weights else 7 - prio)
                ipr.tc("replace", "tbf", idx, prio_gate_handle(prio), parent=prio_class(prio), rate=f"{rate}bit",
                       burst=q.gate_burst_bytes(), limit=int(limit))
            kinds = {(m["parent"], m.get_attr("TCA_KIND")) for m in ipr.get_qdiscs(index=idx)}
    except NetlinkError as e:
        raise SetupError(f"tc on {ifname}: kernel refused ({e.code}: {e.args[1] if len(e.args) > 1 else e})") from None
    missing = [p for p in q.fifo_bytes if (prio_class(p), "tbf") not in kinds]
    if (0xFFFFFFFF, "htb") not in kinds or missing:
        raise SetupError(f"tc on {ifname}: read-back shows {sorted(kinds)}; no gate for priorities {missing}")


class PauseGates:
    """Closes and opens the TBF pause gates of one port (the upstream transmitter of a link).

    Holds a netlink socket in the port's namespace and a packet socket for the kick: a TBF gate
    that reopens does not make the port's qdisc run (its watchdog was armed at the paused rate:
    the first held frame left 0.79 s later), so each resume enqueues one 60-byte PFC frame with
    pause time 0 (MAC Control; the peer drops it) on the port, which runs the qdisc at once.

    The change messages are encoded once per (priority, rate, burst, limit) and sent on a raw
    netlink socket: a change costs ~4 us that way, against ~0.26 ms through pyroute2's request
    path (measured on a veth here, median of 300), whose encoding runs under the interpreter
    lock: during an incast's burst of XOFFs the gate threads queued behind each other for it
    (gate change p99 7.2 ms).

    Raises (all methods): SetupError with the kernel's message.
    """

    def __init__(self, ifname: str, q: PriorityQueues, netns_pid: int | None = None, kick_frame: bytes = b"",
                 ipr=None):
        """``ipr``: an open ``IPRoute`` on the port's namespace to look the port up with, else one
        is opened in ``netns_pid``'s."""
        self.ifname, self.q, self.kick_frame = ifname, q, kick_frame
        self.limits = dict(q.fifo_bytes)
        self.closed: set[int] = set()
        with ipr_given_or_in(ipr, netns_pid) as ipr:
            self.idx = link_index(ipr, ifname, "pause gate")
        self.sock = None
        self.nl = in_netns(netns_pid, lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW,
                                                               socket.NETLINK_ROUTE))
        self.nl.bind((0, 0))
        self._msgs: dict[tuple, bytes] = {}
        self._seq = 0
        self._lock = threading.RLock()   # the pauser and the port's gate thread both change gates
        if kick_frame:
            self.sock = in_netns(netns_pid, lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))
            self.sock.bind((ifname, 0))
            self.sock.setblocking(False)

    def _message(self, prio: int, rate_bps: int, burst_bytes: int, limit_bytes: int) -> bytes:
        """The RTM_NEWQDISC change of ``prio``'s TBF gate, encoded by pyroute2 once and kept."""
        key = (prio, rate_bps, burst_bytes, limit_bytes)
        if key not in self._msgs:
            msg = tcmsg.tcmsg()
            msg["index"], msg["handle"], msg["parent"] = self.idx, prio_gate_handle(prio), prio_class(prio)
            opts = tcmsg.plugins["tbf"].get_parameters({"rate": f"{rate_bps}bit", "burst": burst_bytes, "limit": limit_bytes})
            msg["attrs"] = [["TCA_KIND", "tbf"], ["TCA_OPTIONS", opts]]
            msg["header"]["type"] = RTM_NEWQDISC
            msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK
            msg.encode()
            self._msgs[key] = bytes(msg.data)
        return self._msgs[key]

    def _set(self, prio: int, rate_bps: int, burst_bytes: int) -> None:
        with self._lock:      # the pauser and the port's gate thread share the socket: one request at a time
            msg = bytearray(self._message(prio, rate_bps, burst_bytes, int(self.limits[prio])))
            self._seq += 1
            struct.pack_into("=I", msg, 8, self._seq)              # nlmsghdr.nlmsg_seq
            try:
                self.nl.send(msg)
                while True:
                    reply = self.nl.recv(65536)
                    kind, seq = struct.unpack_from("=H", reply, 4)[0], struct.unpack_from("=I", reply, 8)[0]
                    if kind == NLMSG_ERROR and seq == self._seq:
                        break
            except OSError as e:
                raise SetupError(f"pause gate {self.ifname} priority {prio}: netlink: {e}") from None
        err = -struct.unpack_from("=i", reply, 16)[0]
        if err:
            raise SetupError(f"pause gate {self.ifname} priority {prio}: kernel refused ({err}: "
                             f"{os.strerror(err)})")

    def close_gate(self, prio: int) -> None:
        """Pause ``prio``: its packets wait in its bfifo (at most the frame already granted leaves)."""
        with self._lock:
            self._set(prio, PAUSED_RATE_BPS, PAUSED_BURST_BYTES)
            self.closed.add(prio)

    def set_limit(self, prio: int, limit_bytes: int) -> None:
        """Change ``prio``'s FIFO limit, keeping the gate as it is (TBF passes a change's limit to its FIFO)."""
        with self._lock:
            self.limits[prio] = int(limit_bytes)
            if prio in self.closed:
                self._set(prio, PAUSED_RATE_BPS, PAUSED_BURST_BYTES)
            else:
                self._set(prio, int(round(self.q.rate_bps)), self.q.gate_burst_bytes())

    def open_gate(self, prio: int) -> None:
        """Resume ``prio`` at the link rate and make the port's qdisc run now."""
        with self._lock:
            self._set(prio, int(round(self.q.rate_bps)), self.q.gate_burst_bytes())
            self.closed.discard(prio)
        if self.sock is not None:
            try:
                self.sock.send(self.kick_frame)
            except OSError:
                pass   # a full lossy queue: it is running anyway

    def close(self) -> None:
        """Close the sockets (the gates keep their state)."""
        self.nl.close()
        if self.sock is not None:
            self.sock.close()
