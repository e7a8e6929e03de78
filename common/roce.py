"""RoCEv2 frames: Ether / IPv4 / UDP 4791 / BTH [/ AETH] / payload / ICRC.

Frames are packed once (:func:`build_frame`; byte for byte what scapy's RoCE layers,
``scapy.contrib.roce``, build: :func:`scapy_frame` is the tests' reference) as
templates; the fast path patches the Base Transport Header's PSN and ack-request
bit in those bytes and recomputes only the ICRC (a CRC-32 over the frame's
invariant fields, InfiniBand Architecture Specification Vol. 1 Annex A17
"RoCEv2", A17.4.1): with the CRC of the invariant prefix (8 bytes of 0xFF
standing for the LRH, the IPv4 header with TOS, TTL and checksum set to ones,
the UDP header with its checksum set to ones, the first 8 BTH bytes with the
FECN/BECN/reserved byte set to ones) kept per template, each frame costs one
``zlib.crc32`` over its last 4 BTH bytes and payload. The ICRC goes on the wire
least-significant byte first (as scapy packs it, and as the ConnectX-4 Lx CNP
capture in scapy's RoCE tests shows).

IPv4 identification is 0 and DF is set (RFC 6864: the ID of atomic datagrams
has no meaning); the UDP checksum is 0 (RoCEv2 senders may leave it unset in
IPv4; the ICRC protects the payload). Every data frame carries ECT(0)
(``tos & 3 == 2``, case T4) in the DSCP of its class; CNPs and ACKs carry the
DSCP given for them and Not-ECT, as NICs send them.

Opcodes and layouts are the RC transport's (reliable connection): SEND_FIRST /
MIDDLE / LAST / ONLY for data, ACKNOWLEDGE with an AETH (syndrome 0x00-0x1F:
ACK; 0x60: NAK, PSN sequence error) for acknowledgements, and the CNP (opcode
0x81, BECN set, 16 reserved bytes: IP length 60, UDP length 40; case R1).
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

ROCE_UDP_PORT = 4791
PSN_MASK = 0xFFFFFF
ETH_BYTES, IP_BYTES, UDP_BYTES, BTH_BYTES, AETH_BYTES, ICRC_BYTES = 14, 20, 8, 12, 4, 4
#: bytes of a frame around its payload (Ether + IPv4 + UDP + BTH + ICRC)
OVERHEAD_BYTES = ETH_BYTES + IP_BYTES + UDP_BYTES + BTH_BYTES + ICRC_BYTES
BTH_OFFSET = ETH_BYTES + IP_BYTES + UDP_BYTES          # 42
#: fabriclab's numbering of a flow's queue pairs: flow i sends from QP SENDER_QPN + i and UDP source
#: port SPORT_BASE + i (the ECMP hash sees a port per flow) to QP RECEIVER_QPN + i
SENDER_QPN, RECEIVER_QPN, SPORT_BASE = 0x100, 0x200, 49152

# RC opcodes (IBA Vol. 1, 9.2, table 38) and the CNP (Annex A17.9.3)
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY = 0x00, 0x01, 0x02, 0x04
ACKNOWLEDGE = 0x11
CNP = 0x81
DATA_OPCODES = (SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY)
#: AETH syndromes: 0b000xxxxx ACK (x: credit count; 0x1F = no credit limit), 0x60 NAK PSN sequence error
AETH_ACK, AETH_NAK_SEQ = 0x1F, 0x60

ECT0 = 0b10
CE = 0b11


def _masked_prefix(frame: bytes | bytearray) -> bytes:
    """The ICRC's input up to and including BTH byte 7, invariant fields masked to ones (A17.4.1)."""
    ip = bytearray(frame[ETH_BYTES:ETH_BYTES + IP_BYTES])
    ip[1] = 0xFF                 # TOS (DSCP + ECN): switches rewrite it
    ip[8] = 0xFF                 # TTL
    ip[10:12] = b"\xff\xff"      # header checksum
    udp = bytearray(frame[ETH_BYTES + IP_BYTES:BTH_OFFSET])
    udp[6:8] = b"\xff\xff"       # UDP checksum
    bth = bytearray(frame[BTH_OFFSET:BTH_OFFSET + 8])
    bth[4] = 0xFF                # FECN, BECN, resv6
    return b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(bth)


def icrc(frame: bytes | bytearray) -> bytes:
    """The 4 ICRC bytes, as on the wire, of a RoCEv2 IPv4 frame (``frame`` includes its 4 trailing ICRC
    bytes, whatever they hold). Source: IBA Vol. 1 Annex A17.4.1 (RoCEv2 ICRC over IPv4).
    Raises ValueError when the frame is too short or not IPv4/UDP 4791."""
    if len(frame) < BTH_OFFSET + BTH_BYTES + ICRC_BYTES:
        raise ValueError(f"frame of {len(frame)} B is too short for RoCEv2")
    if frame[12:14] != b"\x08\x00" or frame[ETH_BYTES + 9] != 17 or \
            struct.unpack_from("!H", frame, ETH_BYTES + IP_BYTES + 2)[0] != ROCE_UDP_PORT:
        raise ValueError("not an IPv4 / UDP 4791 frame")
    crc = zlib.crc32(_masked_prefix(frame))
    crc = zlib.crc32(bytes(frame[BTH_OFFSET + 8:-ICRC_BYTES]), crc)
    return struct.pack("<I", crc)


@dataclass(frozen=True)
class Endpoint:
    """One end of a queue pair: MAC and IPv4 address of the host, the UDP source port it sends from
    (RoCEv2's flow entropy: ECMP hashes on it) and its QP number (24 bits)."""
    mac: str
    ip: str
    udp_sport: int
    qpn: int


#: The IPv4 header's fixed part as every frame here carries it: version 4, IHL 5, ID 0, DF, TTL 64, UDP.
_IP_HEADER = struct.Struct("!BBHHHBBH4s4s")
_UDP_BTH = struct.Struct("!HHHHBBHBBHI")


def _ip_checksum(header: bytes) -> int:
    """The IPv4 header checksum (RFC 791: the ones' complement of the ones' complement sum of the
    header's 16-bit words, the checksum field taken as 0)."""
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def build_frame(src: Endpoint, dst: Endpoint, tos: int, opcode: int, psn: int, payload: bytes,
                ackreq: bool = False, becn: bool = False, aeth: bytes = b"") -> bytes:
    """One RoCEv2 frame, packed here: Ethernet, IPv4 (ID 0, DF, TTL 64), UDP to 4791 (checksum 0),
    BTH (P_Key 0xFFFF, transport version 0, the pad count for ``payload`` padded to 4 bytes),
    ``aeth``, the payload, the pad and the ICRC (:func:`icrc`). Byte for byte what scapy's layers
    build (:func:`scapy_frame`, tests/unit/test_roce_frames.py), without scapy's 0.3-0.8 s of
    imports in every agent. ``tos`` is the full TOS byte; ``psn`` is taken mod 2^24."""
    pad = (-len(payload)) % 4
    body = aeth + payload + b"\x00" * pad
    udp_len = UDP_BYTES + BTH_BYTES + len(body) + ICRC_BYTES
    ip = bytearray(_IP_HEADER.pack(0x45, tos, IP_BYTES + udp_len, 0, 0x4000, 64, 17, 0,
                                   bytes(map(int, src.ip.split("."))), bytes(map(int, dst.ip.split(".")))))
    struct.pack_into("!H", ip, 10, _ip_checksum(bytes(ip)))
    frame = bytearray(bytes.fromhex(dst.mac.replace(":", "")) + bytes.fromhex(src.mac.replace(":", "")) +
                      b"\x08\x00" + bytes(ip))
    frame += _UDP_BTH.pack(src.udp_sport, ROCE_UDP_PORT, udp_len, 0, opcode, pad << 4, 0xFFFF,
                           0x40 if becn else 0, (dst.qpn >> 16) & 0xFF, dst.qpn & 0xFFFF,
                           (psn & PSN_MASK) | (0x80000000 if ackreq else 0))
    frame += body + bytes(ICRC_BYTES)
    frame[-ICRC_BYTES:] = icrc(frame)
    return bytes(frame)


def scapy_frame(src: Endpoint, dst: Endpoint, tos: int, opcode: int, psn: int, payload: bytes,
                ackreq: bool = False, becn: bool = False, aeth: bytes = b"") -> bytes:
    """:func:`build_frame`'s frame built with scapy's layers (``scapy.contrib.roce``; ICRC computed
    by scapy): the reference the tests hold the packed frames to."""
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    pad = (-len(payload)) % 4
    pkt = (Ether(src=src.mac, dst=dst.mac) /
           IP(src=src.ip, dst=dst.ip, tos=tos, id=0, flags="DF", ttl=64) /
           UDP(sport=src.udp_sport, dport=ROCE_UDP_PORT, chksum=0) /
           BTH(opcode=opcode, padcount=pad, dqpn=dst.qpn, psn=psn & PSN_MASK, ackreq=int(ackreq),
               becn=int(becn)) /
           Raw(aeth + payload + b"\x00" * pad))
    return bytes(pkt)


class FrameTemplate:
    """Prebuilt frames of one queue pair's direction, patched per packet.

    ``frame(opcode, psn, ackreq, payload_bytes)`` returns a ``bytes`` frame whose BTH carries
    ``psn`` (mod 2^24) and the ack-request bit, with a correct ICRC. Templates are packed (:func:`build_frame`)
    once per (opcode, payload length); the payload is zeros. ``tos`` is the full IP TOS byte
    (DSCP << 2 | ECN). Raises ValueError on a payload above 4096 B (the largest IB path MTU)."""

    def __init__(self, src: Endpoint, dst: Endpoint, tos: int):
        self.src, self.dst, self.tos = src, dst, tos
        self._cache: dict[tuple[int, int], tuple[bytearray, int]] = {}

    def _template(self, opcode: int, payload_bytes: int) -> tuple[bytearray, int]:
        key = (opcode, payload_bytes)
        t = self._cache.get(key)
        if t is None:
            if not 0 <= payload_bytes <= 4096:
                raise ValueError(f"payload_bytes {payload_bytes} outside 0..4096")
            raw = bytearray(build_frame(self.src, self.dst, self.tos, opcode, 0, bytes(payload_bytes)))
            t = self._cache[key] = (raw, zlib.crc32(_masked_prefix(raw)))
        return t

    def prebuild(self, shapes) -> None:
        """Build the templates of ``shapes`` ((opcode, payload_bytes) pairs) now rather than at first use."""
        for opcode, payload_bytes in shapes:
            self._template(opcode, payload_bytes)

    def patch(self, opcode: int, psn: int, ackreq: bool, payload_bytes: int, aeth: int | None = None,
              payload=None) -> bytearray:
        """The template's own buffer patched in place (the fast path: send it before the next ``patch``
        of the same opcode and length); ``len`` = payload (padded to 4) + :data:`OVERHEAD_BYTES`.
        ``aeth`` (an ACKNOWLEDGE's 32-bit AETH, with ``payload_bytes`` 4) is written after the BTH.
        ``payload`` (bytes-like of exactly ``payload_bytes``; None keeps the template's zeros, or
        what the last patch of this shape wrote) is copied in after the BTH; the ICRC covers it.
        Raises ValueError when ``payload`` is not ``payload_bytes`` long."""
        raw, prefix_crc = self._cache.get((opcode, payload_bytes)) or self._template(opcode, payload_bytes)
        struct.pack_into("!I", raw, BTH_OFFSET + 8, (psn & PSN_MASK) | (0x80000000 if ackreq else 0))
        if aeth is not None:
            struct.pack_into("!I", raw, BTH_OFFSET + BTH_BYTES, aeth)
        if payload is not None:
            if len(payload) != payload_bytes:
                raise ValueError(f"payload of {len(payload)} B for a {payload_bytes} B packet")
            raw[BTH_OFFSET + BTH_BYTES:BTH_OFFSET + BTH_BYTES + payload_bytes] = payload
        crc = zlib.crc32(memoryview(raw)[BTH_OFFSET + 8:-ICRC_BYTES], prefix_crc)
        struct.pack_into("<I", raw, len(raw) - ICRC_BYTES, crc)
        return raw

    def frame(self, opcode: int, psn: int, ackreq: bool, payload_bytes: int) -> bytes:
        """A copy of :meth:`patch`'s frame."""
        return bytes(self.patch(opcode, psn, ackreq, payload_bytes))


def aeth(nak: bool = False, msn: int = 0) -> int:
    """The 32-bit AETH: syndrome (ACK with no credit limit, or NAK PSN sequence error) and MSN."""
    return ((AETH_NAK_SEQ if nak else AETH_ACK) << 24) | (msn & PSN_MASK)


def ack_frame(src: Endpoint, dst: Endpoint, tos: int, psn: int, nak: bool = False, msn: int = 0) -> bytes:
    """An RC ACKNOWLEDGE frame to ``dst`` (the requester) for ``psn``: with ``nak`` a NAK, PSN sequence
    error, whose ``psn`` is the one the responder expects (go-back-N restarts there), else a
    cumulative ACK of every PSN up to ``psn``. Packed by :func:`build_frame` (the reference for
    ``FrameTemplate.patch(ACKNOWLEDGE, psn, False, AETH_BYTES, aeth(nak, msn))``)."""
    return build_frame(src, dst, tos, ACKNOWLEDGE, psn, b"", aeth=struct.pack("!I", aeth(nak, msn)))


def cnp_frame(src: Endpoint, dst: Endpoint, tos: int) -> bytes:
    """A RoCEv2 CNP to ``dst``'s QP (opcode 0x81, BECN, 16 reserved bytes; IP length 60, UDP length 40:
    case R1; IBA Annex A17.9.3)."""
    return build_frame(src, dst, tos, CNP, 0, bytes(16), becn=True)


@dataclass(frozen=True)
class Bth:
    """The fields of a received BTH (and AETH) that the transport uses."""
    opcode: int
    becn: bool
    dqpn: int
    ackreq: bool
    psn: int
    payload_bytes: int        # after BTH (and AETH), without pad and ICRC
    syndrome: int | None      # AETH syndrome of an ACKNOWLEDGE, else None


def parse_bth(udp_payload: bytes | bytearray | memoryview) -> Bth:
    """Parse a UDP 4791 payload (BTH onwards, ICRC included), as a UDP socket receives it.
    Raises ValueError when it is shorter than a BTH plus ICRC."""
    n = len(udp_payload)
    if n < BTH_BYTES + ICRC_BYTES:
        raise ValueError(f"UDP payload of {n} B is shorter than BTH + ICRC")
    opcode, flags, _pkey, fb, dqpn_hi, dqpn_lo, ar_psn = struct.unpack_from("!BBHBBHI", udp_payload, 0)
    pad = (flags >> 4) & 3
    body = n - BTH_BYTES - ICRC_BYTES - pad
    syndrome = None
    if opcode == ACKNOWLEDGE and body >= AETH_BYTES:
        syndrome = udp_payload[BTH_BYTES]
        body -= AETH_BYTES
    return Bth(opcode=opcode, becn=bool(fb & 0x40), dqpn=(dqpn_hi << 16) | dqpn_lo,
               ackreq=bool(ar_psn & 0x80000000), psn=ar_psn & PSN_MASK, payload_bytes=max(body, 0),
               syndrome=syndrome)


def psn_diff(a: int, b: int) -> int:
    """``a - b`` in 24-bit serial arithmetic (IBA 9.7.1): in -2^23 .. 2^23 - 1."""
    d = (a - b) & PSN_MASK
    return d - (1 << 24) if d & 0x800000 else d


def message_shapes(size_bytes: int, mtu_bytes: int) -> set[tuple[int, int]]:
    """The distinct (opcode, payload_bytes) of a message of ``size_bytes`` (>= 1) cut into ``mtu_bytes`` packets."""
    n = -(-size_bytes // mtu_bytes)
    if n == 1:
        return {(SEND_ONLY, size_bytes)}
    shapes = {(SEND_FIRST, mtu_bytes), (SEND_LAST, size_bytes - (n - 1) * mtu_bytes)}
    if n > 2:
        shapes.add((SEND_MIDDLE, mtu_bytes))
    return shapes


def message_opcodes(packets: int) -> list[int]:
    """The SEND opcodes of a message of ``packets`` packets: ONLY, or FIRST, MIDDLE..., LAST.
    Raises ValueError for fewer than one packet."""
    if packets < 1:
        raise ValueError(f"a message has at least one packet, not {packets}")
    if packets == 1:
        return [SEND_ONLY]
    return [SEND_FIRST] + [SEND_MIDDLE] * (packets - 2) + [SEND_LAST]
