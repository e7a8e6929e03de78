"""RoCEv2 framing (issue 7, case R1): ICRC, templates patched per PSN, CNP and ACK layouts."""

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from common import roce

# A CNP captured from a Mellanox ConnectX-4 Lx NIC (published with scapy's RoCE tests,
# test/contrib/roce.uts): its last four bytes are the ICRC the NIC computed.
CONNECTX4_CNP = bytes.fromhex(
    "e41d 2dab 2bc2 7cfe 9064 3b32 0800 45c2"
    "003c 718c 4000 4011 9161 0a00 1101 0a00"
    "1201 0000 12b7 0028 0000 8100 ffff 4000"
    "0118 0000 0000 0000 0000 0000 0000 0000"
    "0000 0000 0000 82fd 002a")

SRC = roce.Endpoint("02:00:00:00:00:02", "10.0.0.2", 49152, 0x000011)
DST = roce.Endpoint("02:00:00:00:00:01", "10.0.0.1", 49153, 0x000022)


def test_icrc_of_a_frame_captured_from_a_nic():
    assert len(CONNECTX4_CNP) == 74
    assert roce.icrc(CONNECTX4_CNP) == bytes.fromhex("82fd002a")
    # the masked fields do not enter it: another TOS, TTL or FECN/BECN gives the same ICRC
    f = bytearray(CONNECTX4_CNP)
    f[15], f[22], f[42 + 4] = 0x03, 7, 0x80
    assert roce.icrc(f) == bytes.fromhex("82fd002a")
    f[-10] ^= 1                       # a payload bit is covered
    assert roce.icrc(f) != bytes.fromhex("82fd002a")


@pytest.mark.parametrize("opcode,payload", [(roce.SEND_FIRST, 1024), (roce.SEND_MIDDLE, 1024),
                                            (roce.SEND_LAST, 333), (roce.SEND_ONLY, 4)])
def test_patched_template_equals_scapys_own_frame(opcode, payload):
    """Every patched frame is the frame scapy builds for that PSN, ICRC included (scapy computes it)."""
    t = roce.FrameTemplate(SRC, DST, tos=(26 << 2) | roce.ECT0)
    for psn, ackreq in [(0, False), (1, True), (0xABCDE, False), (roce.PSN_MASK, True), (1 << 24 | 5, False)]:
        f = t.frame(opcode, psn, ackreq, payload)
        pad = (-payload) % 4
        ref = bytes(Ether(src=SRC.mac, dst=DST.mac) / IP(src=SRC.ip, dst=DST.ip, tos=(26 << 2) | 2, id=0,
                                                         flags="DF", ttl=64) /
                    UDP(sport=SRC.udp_sport, dport=4791, chksum=0) /
                    BTH(opcode=opcode, padcount=pad, dqpn=DST.qpn, psn=psn & roce.PSN_MASK, ackreq=int(ackreq)) /
                    (b"\x00" * (payload + pad)))
        assert f == ref
        assert len(f) == payload + pad + roce.OVERHEAD_BYTES
        p = Ether(f)
        assert p[IP].tos & 3 == roce.ECT0 and p[IP].tos >> 2 == 26           # case T4
        assert p[UDP].dport == 4791 and p[BTH].psn == psn & roce.PSN_MASK and p[BTH].dqpn == 0x22
        assert roce.icrc(f) == f[-4:]


def test_cnp_layout_case_r1():
    f = roce.cnp_frame(DST, SRC, tos=48 << 2)
    p = Ether(f)
    assert p[IP].len == 60 and p[UDP].len == 40
    assert p[BTH].opcode == 0x81 and p[BTH].becn == 1 and p[BTH].fecn == 0
    assert p[BTH].dqpn == SRC.qpn and p[BTH].psn == 0 and p[IP].tos == 48 << 2
    assert roce.icrc(f) == f[-4:]
    b = roce.parse_bth(f[roce.BTH_OFFSET:])
    assert b.opcode == roce.CNP and b.becn and b.dqpn == SRC.qpn and b.payload_bytes == 16


def test_ack_and_nak_carry_an_aeth():
    ack = roce.parse_bth(roce.ack_frame(DST, SRC, 0, 41)[roce.BTH_OFFSET:])
    nak = roce.parse_bth(roce.ack_frame(DST, SRC, 0, 42, nak=True)[roce.BTH_OFFSET:])
    assert (ack.opcode, ack.psn, ack.syndrome, ack.payload_bytes) == (roce.ACKNOWLEDGE, 41, roce.AETH_ACK, 0)
    assert (nak.opcode, nak.psn, nak.syndrome) == (roce.ACKNOWLEDGE, 42, roce.AETH_NAK_SEQ)


def test_parse_data_packet_and_bad_input():
    t = roce.FrameTemplate(SRC, DST, tos=2)
    b = roce.parse_bth(t.frame(roce.SEND_LAST, 7, True, 333)[roce.BTH_OFFSET:])
    assert (b.opcode, b.psn, b.ackreq, b.payload_bytes, b.becn) == (roce.SEND_LAST, 7, True, 333, False)
    with pytest.raises(ValueError, match="shorter"):
        roce.parse_bth(b"\x00" * 10)
    with pytest.raises(ValueError, match="not an IPv4"):
        roce.icrc(bytes(80))
    with pytest.raises(ValueError, match="payload_bytes"):
        t.frame(roce.SEND_ONLY, 0, False, 5000)


def test_psn_serial_arithmetic_and_message_opcodes():
    assert roce.psn_diff(0, roce.PSN_MASK) == 1 and roce.psn_diff(roce.PSN_MASK, 0) == -1
    assert roce.psn_diff(100, 40) == 60
    assert roce.message_opcodes(1) == [roce.SEND_ONLY]
    assert roce.message_opcodes(3) == [roce.SEND_FIRST, roce.SEND_MIDDLE, roce.SEND_LAST]
    with pytest.raises(ValueError):
        roce.message_opcodes(0)


def test_ack_template_patched_per_psn_equals_scapys_ack():
    t = roce.FrameTemplate(DST, SRC, tos=48 << 2)
    for psn, nak in [(0, False), (5, True), (roce.PSN_MASK, False)]:
        f = bytes(t.patch(roce.ACKNOWLEDGE, psn, False, roce.AETH_BYTES, roce.aeth(nak)))
        assert f == roce.ack_frame(DST, SRC, 48 << 2, psn, nak=nak)


def test_message_shapes():
    assert roce.message_shapes(100, 1024) == {(roce.SEND_ONLY, 100)}
    assert roce.message_shapes(2048, 1024) == {(roce.SEND_FIRST, 1024), (roce.SEND_LAST, 1024)}
    assert roce.message_shapes(3000, 1024) == {(roce.SEND_FIRST, 1024), (roce.SEND_MIDDLE, 1024),
                                               (roce.SEND_LAST, 952)}


@pytest.mark.parametrize("size", [1024, 333, 4])
def test_template_carries_real_payload_with_a_correct_icrc(size):
    """A data payload patched in is the frame scapy builds with that payload (ICRC over it), and the
    receiver finds it right after the BTH of the UDP payload."""
    t = roce.FrameTemplate(SRC, DST, tos=(26 << 2) | roce.ECT0)
    data = bytes((7 * i + size) % 251 for i in range(size))
    f = bytes(t.patch(roce.SEND_ONLY, 77, True, size, payload=memoryview(data)))
    pad = (-size) % 4
    ref = bytes(Ether(src=SRC.mac, dst=DST.mac) / IP(src=SRC.ip, dst=DST.ip, tos=(26 << 2) | 2, id=0,
                                                     flags="DF", ttl=64) /
                UDP(sport=SRC.udp_sport, dport=4791, chksum=0) /
                BTH(opcode=roce.SEND_ONLY, padcount=pad, dqpn=DST.qpn, psn=77, ackreq=1) / (data + b"\x00" * pad))
    assert f == ref and roce.icrc(f) == f[-4:]
    udp_payload = f[roce.BTH_OFFSET:]
    b = roce.parse_bth(udp_payload)
    assert b.payload_bytes == size and udp_payload[roce.BTH_BYTES:roce.BTH_BYTES + size] == data
    assert t.frame(roce.SEND_ONLY, 77, True, size) == f                 # without payload: the last one stays
    with pytest.raises(ValueError, match="payload of 3 B"):
        t.patch(roce.SEND_ONLY, 1, False, size, payload=b"abc")


@pytest.mark.parametrize("opcode,payload,aeth,becn,ackreq", [
    (roce.SEND_ONLY, 0, b"", False, False), (roce.SEND_FIRST, 1024, b"", False, True),
    (roce.SEND_LAST, 1, b"", False, False), (roce.SEND_MIDDLE, 4093, b"", False, True),
    (roce.ACKNOWLEDGE, 0, bytes.fromhex("1f00002a"), False, False),
    (roce.ACKNOWLEDGE, 0, bytes.fromhex("60abcdef"), False, False), (roce.CNP, 16, b"", True, False)])
@pytest.mark.parametrize("tos", [0, (26 << 2) | roce.ECT0, (48 << 2), 0xFF])
def test_packed_frames_are_scapys_byte_for_byte(opcode, payload, aeth, becn, ackreq, tos):
    far = roce.Endpoint("0a:1b:2c:3d:4e:5f", "192.168.254.1", 65535, 0xFEDCBA)
    for src, dst in ((SRC, DST), (DST, far), (far, SRC)):
        for psn in (0, 7, roce.PSN_MASK, 1 << 24 | 9):
            args = (src, dst, tos, opcode, psn, bytes(range(payload % 256)) * (payload // 256) + bytes(payload % 256))
            assert roce.build_frame(*args, ackreq=ackreq, becn=becn, aeth=aeth) == \
                roce.scapy_frame(*args, ackreq=ackreq, becn=becn, aeth=aeth)


def test_an_agent_builds_its_frames_without_importing_scapy():
    import subprocess
    import sys
    code = ("import sys; from common import roce; from traffic import roce as agent; "
            "t = roce.FrameTemplate(roce.Endpoint('02:00:00:00:00:02', '10.0.0.2', 49152, 17), "
            "roce.Endpoint('02:00:00:00:00:01', '10.0.0.1', 49153, 34), 106); t.frame(roce.SEND_ONLY, 1, True, 1024); "
            "roce.cnp_frame(t.dst, t.src, 192); roce.ack_frame(t.dst, t.src, 192, 5); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scapy'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
