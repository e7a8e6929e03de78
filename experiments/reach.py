"""All-pairs reachability of a live fabric, fast: one process, one raw ICMP
socket per host namespace, every ordered pair probed at once.

Mininet's ``pingAll`` runs one ``ping`` process per ordered pair, one after
the other (16,256 processes for a 128-host Fat-Tree). This sends the same
ICMP echo requests (RFC 792) from every host's own network namespace, in
rounds that are permutations (round r: host i -> host i+r), so no receiver
port sees an incast of probes; pairs that got no reply are retried until the
timeout.
"""
from __future__ import annotations

import ctypes
import os
import select
import socket
import struct
import time
from dataclasses import dataclass, field

CLONE_NEWNET = 0x40000000
ICMP_ECHO_REQUEST, ICMP_ECHO_REPLY = 8, 0
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def socket_in_netns(pid: int, family: int, kind: int, proto: int) -> socket.socket:
    """A socket created inside the network namespace of process ``pid``.

    The calling thread enters the namespace only for the ``socket()`` call and
    always returns to its own (a socket keeps the namespace it was made in).

    Raises:
        OSError: no such process, or not permitted (needs root / CAP_SYS_ADMIN).
    """
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        _setns(target)
        try:
            return socket.socket(family, kind, proto)
        finally:
            _setns(own)
    finally:
        os.close(target)
        os.close(own)


def icmp_checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of ``data``, as an int 0..0xffff."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def echo_request(ident: int, seq: int, payload: bytes = b"fabriclab") -> bytes:
    """An ICMP echo request (type 8) with a valid checksum."""
    hdr = struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, 0, ident, seq)
    csum = icmp_checksum(hdr + payload)
    return struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, csum, ident, seq) + payload


@dataclass
class Reachability:
    """Result of :func:`all_pairs`.

    Attributes:
        pairs: ordered pairs probed (N x (N-1)).
        missing: ``[(src, dst), ...]`` never answered before the timeout.
        elapsed_s: from the first probe to the last needed reply (or the timeout).
        rounds: probe rounds sent (1 when nothing had to be retried).
    """
    pairs: int
    missing: list = field(default_factory=list)
    elapsed_s: float = 0.0
    rounds: int = 0

    @property
    def reached(self) -> int:
        """Pairs that got an echo reply."""
        return self.pairs - len(self.missing)

    @property
    def loss(self) -> float:
        """Fraction of pairs never reached (0.0 = all-pairs reachable)."""
        return len(self.missing) / self.pairs if self.pairs else 0.0


def all_pairs(hosts: list[tuple[str, int, str]], timeout_s: float = 10.0, retry_s: float = 0.5,
              step_gap_s: float = 0.0005, stall_s: float | None = None) -> Reachability:
    """Probe every ordered pair of ``hosts`` with ICMP echo until all answer or ``timeout_s``.

    Args:
        hosts: ``[(name, pid of a process in the host's namespace, IPv4 address), ...]``.
        timeout_s: give up on the pairs still unanswered after this long.
        stall_s: if given, give up earlier once no new pair has answered for this long (a
            slow machine keeps probing while pairs keep answering, up to ``timeout_s``).
        retry_s: re-send to unanswered pairs after this long without progress.
        step_gap_s: pause between permutation rounds (spreads the probes).

    Returns:
        A :class:`Reachability`.

    Raises:
        OSError: a namespace cannot be entered or a raw socket opened (needs root).
    """
    n = len(hosts)
    index_of_ip = {ip: i for i, (_, _, ip) in enumerate(hosts)}
    ident_base = os.getpid() & 0x7FFF
    pending = {(i, j) for i in range(n) for j in range(n) if i != j}
    total = len(pending)
    socks: list[socket.socket] = []
    rounds = 0
    try:
        for _, pid, _ in hosts:
            socks.append(socket_in_netns(pid, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
            socks[-1].setblocking(False)
        by_fd = {s.fileno(): i for i, s in enumerate(socks)}
        watch = select.poll()
        for sock in socks:
            watch.register(sock, select.POLLIN)
        t0 = time.monotonic()
        last_answer = t0
        while pending and time.monotonic() - t0 < timeout_s and \
                (stall_s is None or time.monotonic() - last_answer < stall_s):
            rounds += 1
            for r in range(1, n):
                for i in range(n):
                    j = (i + r) % n
                    if (i, j) in pending:
                        try:
                            socks[i].sendto(echo_request(ident_base + i, j), (hosts[j][2], 0))
                        except OSError:
                            pass   # full queue or no neighbour yet: the next round retries
                if step_gap_s:
                    time.sleep(step_gap_s)
            last_progress = time.monotonic()
            while pending and time.monotonic() - last_progress < retry_s and time.monotonic() - t0 < timeout_s:
                for fd, _ in watch.poll(50):            # poll: no limit on descriptor numbers
                    i = by_fd[fd]
                    s = socks[i]
                    answered = {(i, j) for j in _echo_replies(s, ident_base + i, index_of_ip)} & pending
                    if answered:
                        pending -= answered
                        last_progress = last_answer = time.monotonic()
        elapsed = time.monotonic() - t0
    finally:
        for s in socks:
            s.close()
    missing = sorted((hosts[i][0], hosts[j][0]) for i, j in pending)
    return Reachability(pairs=total, missing=missing, elapsed_s=elapsed, rounds=rounds)


def _echo_replies(sock: socket.socket, ident: int, index_of_ip: dict[str, int]) -> list[int]:
    """Drain a non-blocking raw ICMP socket; return the host indices whose echo reply to ``ident`` arrived
    (the sequence number carries the index of the host probed)."""
    found = []
    while True:
        try:
            pkt, (src_ip, _) = sock.recvfrom(2048)
        except BlockingIOError:
            return found
        ihl = (pkt[0] & 0x0F) * 4
        if len(pkt) < ihl + 8:
            continue
        typ, _, _, got_ident, seq = struct.unpack_from("!BBHHH", pkt, ihl)
        if typ == ICMP_ECHO_REPLY and got_ident == ident and seq == index_of_ip.get(src_ip):
            found.append(seq)


def live_fabric_hosts(lf) -> list[tuple[str, int, str]]:
    """``[(name, pid, ip)]`` of a :class:`experiments.fabric.LiveFabric`'s hosts, in fabric order."""
    return [(h.name, lf.host(h.name).pid, h.ip) for h in lf.fabric.hosts]
