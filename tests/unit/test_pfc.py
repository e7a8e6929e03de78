"""PFC logic without a fabric: quanta (case R2), frame layout (R2), headroom (R3), the pause
state machine with injected time (hysteresis, watchdog), configuration checks."""
import pytest

from common import pfc
from common.errors import ScenarioError


@pytest.mark.parametrize("quanta,rate_bps,seconds", [
    (0, 10e6, 0.0),                 # 0 resumes at once
    (1, 10e6, 51.2e-6),             # one quantum = 512 bit times
    (0xFFFF, 10e6, 0xFFFF * 512 / 10e6),   # the longest pause at 10 Mbit/s: 3.355 s
    (0xFFFF, 100e9, 335.5392e-6),   # ... and at 100 Gbit/s
])
def test_quanta_are_512_bit_times_at_the_link_rate(quanta, rate_bps, seconds):
    assert pfc.quanta_to_s(quanta, rate_bps) == pytest.approx(seconds, rel=1e-12, abs=1e-15)


def test_seconds_to_quanta_rounds_up_and_caps():
    assert pfc.s_to_quanta(51.2e-6, 10e6) == 1
    assert pfc.s_to_quanta(51.3e-6, 10e6) == 2
    assert pfc.s_to_quanta(0.0, 10e6) == 0
    assert pfc.s_to_quanta(10.0, 10e6) == 0xFFFF
    for bad in ((-1, 10e6), (1, 0)):
        with pytest.raises(ValueError):
            pfc.s_to_quanta(*bad)
    for bad in ((-1, 10e6), (0x10000, 10e6), (1.5, 10e6), (1, -5)):
        with pytest.raises(ValueError):
            pfc.quanta_to_s(*bad)


def test_pfc_frame_layout_case_r2():
    """01:80:c2:00:00:01, EtherType 0x8808, opcode 0x0101, class-enable vector, eight 2-byte times."""
    f = pfc.pfc_frame("02:00:00:00:00:07", {3: 0xFFFF, 5: 0})
    assert len(f) == pfc.PFC_FRAME_BYTES == 60
    assert f[0:6] == bytes.fromhex("0180c2000001")
    assert f[6:12] == bytes.fromhex("020000000007")
    assert f[12:14] == b"\x88\x08"
    assert f[14:16] == b"\x01\x01"
    assert f[16:18] == (1 << 3 | 1 << 5).to_bytes(2, "big")
    times = [int.from_bytes(f[18 + 2 * i:20 + 2 * i], "big") for i in range(8)]
    assert times == [0, 0, 0, 0xFFFF, 0, 0, 0, 0]
    assert f[34:] == bytes(26)                         # padding to the 60-byte minimum
    assert pfc.parse_pfc_frame(f) == {3: 0xFFFF, 5: 0}


def test_pfc_frame_refuses_bad_input_and_parse_refuses_other_frames():
    with pytest.raises(ValueError):
        pfc.pfc_frame("02:00:00:00:00:07", {8: 1})
    with pytest.raises(ValueError):
        pfc.pfc_frame("02:00:00:00:00:07", {3: 0x10000})
    f = bytearray(pfc.pfc_frame("02:00:00:00:00:07", {3: 1}))
    pause = bytearray(f)
    pause[14:16] = b"\x00\x01"                          # 802.3x PAUSE, not PFC
    with pytest.raises(ValueError, match="opcode"):
        pfc.parse_pfc_frame(bytes(pause))
    other = bytearray(f)
    other[12:14] = b"\x08\x00"
    with pytest.raises(ValueError, match="EtherType"):
        pfc.parse_pfc_frame(bytes(other))
    with pytest.raises(ValueError, match="destination"):
        pfc.parse_pfc_frame(bytes(6) + bytes(f[6:]))


def test_headroom_is_rate_times_reaction_and_link_delay_plus_one_mtu():
    # 10 Mbit/s, 2 ms reaction, 0.1 ms link round trip: 10e6 * 2.1e-3 / 8 = 2625 B, + 1514
    assert pfc.headroom_bytes(10e6, 2e-3, 0.1e-3) == 2625 + 1514
    assert pfc.headroom_bytes(10e6, 0, 0, mtu_bytes=9000) == 9000
    # a 100 Gbit/s link with 1 us reaction and 1 us of cable round trip: 25000 B + MTU
    assert pfc.headroom_bytes(100e9, 1e-6, 1e-6, mtu_bytes=1514) == 25000 + 1514
    with pytest.raises(ValueError, match="reaction_s"):
        pfc.headroom_bytes(10e6, -1, 0)


def test_buffer_warning_names_the_numbers():
    assert pfc.buffer_warning(100000, 50000, 4139, "leaf1-eth1") is None
    w = pfc.buffer_warning(52000, 50000, 4139, "leaf1-eth1")
    assert "leaf1-eth1" in w and "52000" in w and "50000" in w and "4139" in w and "54139" in w


def test_pause_hysteresis_with_injected_time():
    s = pfc.PauseState(xoff_bytes=30000, xon_bytes=27000)
    assert s.update(29999, 0.0) == []
    ev = s.update(30000, 0.001)
    assert [(e.kind, e.t_s) for e in ev] == [("xoff", 0.001)] and s.paused
    assert s.update(28000, 0.002) == []                 # between XON and XOFF: stays paused
    assert s.update(31000, 0.003) == []                 # already paused: no second XOFF
    ev = s.update(27000, 0.010)
    assert [(e.kind, e.t_s) for e in ev] == [("xon", 0.010)] and not s.paused
    assert s.update(28000, 0.011) == []                 # between the two: stays resumed
    assert s.intervals == [(0.001, 0.010, False)]
    s.update(40000, 0.020)
    assert s.paused_time_s(0.025) == pytest.approx(0.009 + 0.005)


def test_watchdog_reports_a_storm_once_per_pause_and_drop_action():
    s = pfc.PauseState(xoff_bytes=100, xon_bytes=50, watchdog_s=0.2, action="drop")
    s.update(100, 1.0)
    assert s.update(120, 1.19) == [] and not s.dropping
    ev = s.update(120, 1.2)
    assert [e.kind for e in ev] == ["storm"] and s.dropping
    assert s.update(120, 5.0) == []                     # reported once
    ev = s.update(10, 5.1)
    assert [e.kind for e in ev] == ["storm_end", "xon"] and not s.dropping
    assert s.intervals == [(1.0, 5.1, True)]
    keep = pfc.PauseState(xoff_bytes=100, xon_bytes=50, watchdog_s=0.2)
    keep.update(100, 0.0)
    assert [e.kind for e in keep.update(100, 0.3)] == ["storm"] and keep.storm and not keep.dropping


@pytest.mark.parametrize("kw", [dict(xoff_bytes=100, xon_bytes=100), dict(xoff_bytes=0, xon_bytes=0),
                                dict(xoff_bytes=100, xon_bytes=50, watchdog_s=0),
                                dict(xoff_bytes=100, xon_bytes=50, action="forward")])
def test_pause_state_refuses_bad_thresholds(kw):
    with pytest.raises(ValueError):
        pfc.PauseState(**kw)


def test_config_defaults_roce_lossless_tcp_lossy():
    c = pfc.parse_pfc(None, {}, buffer_bytes=151400)
    assert c.enabled and c.lossless == (3,) and c.priority_of(26) == 3 and c.priority_of(0) == 0
    assert c.priority_of(46) == 0 and c.priorities() == [0, 3] and c.scheduling == "strict"
    assert c.xoff_bytes == 75700 and c.xon_bytes == 75700 - 2 * 1514
    off = pfc.parse_pfc(None, None, buffer_bytes=151400)
    assert not off.enabled and off.xoff_bytes == 75700     # resolved: a round may turn PFC on


@pytest.mark.parametrize("prio,pfc_sec", [
    (None, {}), (None, None),
    ({"dscp": {26: 3, 10: 1}, "scheduling": {"weighted": {0: 1, 1: 1, 3: 2}}},
     {"xoff_packets": 40, "xon_packets": 35, "watchdog": {"timeout_s": 0.5, "action": "drop"}}),
])
def test_resolved_sections_parse_back_to_the_same_config(prio, pfc_sec):
    c = pfc.parse_pfc(prio, pfc_sec, buffer_bytes=151400)
    again = pfc.parse_pfc(*pfc.config_sections(c), buffer_bytes=151400)
    assert again == c


def test_config_in_packets_and_weighted():
    c = pfc.parse_pfc({"dscp": {26: 3, 10: 1}, "scheduling": {"weighted": {0: 1, 1: 1, 3: 2}}},
                      {"xoff_packets": 40, "xon_packets": 35, "watchdog": {"timeout_s": 0.5, "action": "drop"}},
                      buffer_bytes=100 * 1514)
    assert c.xoff_bytes == 40 * 1514 and c.xon_bytes == 35 * 1514 and c.weights == {0: 1, 1: 1, 3: 2}
    assert c.watchdog_s == 0.5 and c.watchdog_action == "drop"


@pytest.mark.parametrize("prio,pfc_sec,key", [
    ({"colour": 1}, {}, "priorities.colour"),
    ({"dscp": {64: 3}}, {}, "priorities.dscp.64"),
    ({"dscp": {26: 8}}, {}, "priorities.dscp.26"),
    ({"scheduling": "fair"}, {}, "priorities.scheduling"),
    ({"scheduling": {"weighted": {0: 1}}}, {}, "priorities.scheduling.weighted"),
    ({"scheduling": {"weighted": {0: 1, 3: 0}}}, {}, "priorities.scheduling.weighted.3"),
    (None, {"xof_bytes": 3}, "pfc.xof_bytes"),
    (None, {"xoff_bytes": 151400}, "pfc.xoff_bytes"),
    (None, {"xoff_bytes": 30000, "xon_bytes": 30000}, "pfc.xon_bytes"),
    (None, {"xoff_packets": 200}, "pfc.xoff_packets"),             # the key the user wrote
    (None, {"xoff_packets": 20, "xon_packets": 20}, "pfc.xon_packets"),
    (None, {"xoff_bytes": 30000, "xoff_packets": 20}, "pfc.xoff_bytes"),
    (None, {"lossless": [9]}, "pfc.lossless"),
    (None, {"enabled": "yes"}, "pfc.enabled"),
    (None, {"watchdog": {"timeout_s": 0}}, "pfc.watchdog.timeout_s"),
    (None, {"watchdog": {"timeout_s": 1, "action": "forward"}}, "pfc.watchdog.action"),
])
def test_config_errors_name_the_key(prio, pfc_sec, key):
    with pytest.raises(ScenarioError) as e:
        pfc.parse_pfc(prio, pfc_sec, buffer_bytes=151400)
    assert e.value.key == key
