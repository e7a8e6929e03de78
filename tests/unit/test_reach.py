"""The ICMP pieces of experiments.reach (pure)."""
import struct

from experiments.reach import Reachability, echo_request, icmp_checksum


def test_checksum_rfc1071_example():
    # RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to ddf2 (one's complement), checksum 220d
    assert icmp_checksum(bytes.fromhex("0001f203f4f5f6f7")) == 0x220D


def test_echo_request_verifies_and_carries_id_seq():
    pkt = echo_request(0x1234, 77)
    assert icmp_checksum(pkt) == 0          # a correct checksum makes the whole sum zero
    typ, code, _, ident, seq = struct.unpack_from("!BBHHH", pkt)
    assert (typ, code, ident, seq) == (8, 0, 0x1234, 77)
    assert icmp_checksum(echo_request(1, 2, b"odd") + b"\0") == 0   # odd length: padded as RFC 1071 says


def test_loss_fraction():
    assert Reachability(pairs=12).loss == 0.0 and Reachability(pairs=12).reached == 12
    r = Reachability(pairs=12, missing=[("h1", "h2")] * 3)
    assert r.loss == 0.25 and r.reached == 9
