"""ECN scenario section, rounds, the plan and its encodings (no root)."""

import pytest

from common.ecn import EcnProfile, describe, parse_profile, port_profiles, profile_spec, resolve_ecn, settings_spec
from common.errors import ScenarioError
from experiments.scenario import FRAME_BYTES, switch_layers, validate
from common import redparams
from controller.dataplane import tcqdisc
from controller.ecn.marker import CFG, ST, decode_st, encode_cfg
from experiments import analysis
from experiments.features.ecn import report as ecn_report, summary as ecn_summary
from tests import marking
from experiments.plan import check_against_fabric
from controller.messages import EcnPlan
from experiments.features.ecn.plan import check_red_weights, choose_marker, ecn_plan
from topologies import TOPOLOGIES
from topologies.spineleaf import SpineLeaf

BUF = 100 * FRAME_BYTES


def test_switch_layers_match_the_topologies():
    # one source now: the scenario's ECN layers are the registered topology's switch layers
    for kind, cls in TOPOLOGIES.items():
        assert switch_layers(kind) == tuple(l for l in cls.LAYERS if l != "host")
        assert {s.layer for s in cls().build().switches} == set(switch_layers(kind))


def test_profile_spec_round_trips():
    for spec in ("off", {"step": {"k_packets": 20}}, {"red": {"kmin_packets": 5, "kmax_packets": 50, "pmax": 0.1}},
                 {"red": {"kmin_bytes": 5000, "kmax_bytes": 9000, "pmax": 1, "weight": 0.5}}):
        p = parse_profile(spec, BUF, "k")
        assert parse_profile(profile_spec(p), BUF, "k") == p
    assert describe(EcnProfile("off")) == "drop-tail"
    assert "K=30280 B" in describe(parse_profile({"step": {"k_packets": 20}}, BUF, "k"))


def test_bare_yaml_off_is_drop_tail():
    import yaml
    sc = validate(yaml.safe_load("name: x\necn: {profile: off, layers: {spine: off}}\n"))
    assert profile_spec(sc.ecn.profile) == "off" and settings_spec(sc.ecn)["layers"] == {"spine": "off"}


def test_check_against_fabric_names_a_missing_port():
    for data, key in (({"ecn": {"ports": {"leaf9-eth1": "off"}}}, "ecn.ports.leaf9-eth1"),
                      ({"rounds": [{"name": "a", "ecn": {"ports": {"leaf9-eth1": "off"}}}]},
                       "rounds[0].ecn.ports.leaf9-eth1")):
        with pytest.raises(ScenarioError) as e:
            check_against_fabric(validate({"name": "x", **data}))
        assert e.value.key == key
    fabric, fmap, plan, rounds, profiles = check_against_fabric(validate({"name": "x"}))
    assert len(plan) == 8 and len(rounds) == 1 and len(profiles[0]) == sum(len(s["ports"]) for s in fmap["switches"])


def test_queue_window_starts_after_the_first_burst_has_drained(tmp_path):
    rows = ["t_s,intf,backlog_bytes,backlog_packets,drops_total,tx_bytes_total,tx_packets_total"]
    # a burst to 100 kB at 0.1 s, then a standing queue of 20 kB; 10 Mbit/s drains 100 kB in 80 ms
    for i in range(-10, 300):
        t = i * 0.005
        b = 0 if t < 0 else min(100_000, t * 1e6) if t <= 0.1 else (100_000 if t < 0.12 else 20_000)
        rows.append(f"{t:.3f},p1,{int(b)},{int(b) // 1514},0,0,0")
    (tmp_path / "queues.csv").write_text("\n".join(rows) + "\n")
    q = analysis.queue_after_first_rtt(tmp_path / "queues.csv", "p1", 0.001, 1.4, 10e6, 151400)
    assert q["from_s"] == pytest.approx(0.1 + 0.08, abs=0.006)
    assert q["median_bytes"] == 20_000 and q["p99_bytes"] == pytest.approx(20_000)


def test_error_names_the_key_the_user_wrote():
    with pytest.raises(ScenarioError) as e:
        parse_profile({"step": {"k_packets": 200}}, BUF, "ecn.profile")
    assert e.value.key == "ecn.profile.step.k_packets"


@pytest.mark.parametrize("section,key", [
    ({"marker": "tc"}, "ecn.marker"),
    ({"profil": "off"}, "ecn.profil"),
    ({"layers": {"core": "off"}}, "ecn.layers.core"),
    ({"ports": {"not a port": "off"}}, "ecn.ports.not a port"),
    ({"profile": {"red": {"kmin_packets": 5, "kmax_packets": 10, "pmax": 1.5}}}, "ecn.profile.red.pmax"),
])
def test_bad_ecn_sections_name_the_key(section, key):
    with pytest.raises(ScenarioError) as e:
        resolve_ecn(section, "spineleaf", SpineLeaf.LAYERS[:-1], BUF)
    assert e.value.key == key


def test_port_profiles_layers_and_ports_override():
    fmap = SpineLeaf(spines=2, leaves=2, hosts_per_leaf=2).build().to_map()
    ecn = resolve_ecn({"profile": {"step": {"k_packets": 20}}, "layers": {"spine": "off"},
                       "ports": {"leaf1-eth1": {"step": {"k_packets": 5}}}}, "spineleaf", SpineLeaf.LAYERS[:-1], BUF)
    prof = port_profiles(ecn, fmap)
    assert prof["spine1-eth1"].kind == "off"
    assert prof["leaf1-eth1"].k_bytes == 5 * FRAME_BYTES
    assert prof["leaf2-eth1"].k_bytes == 20 * FRAME_BYTES
    with pytest.raises(ScenarioError) as e:
        port_profiles(resolve_ecn({"ports": {"leaf9-eth1": "off"}}, "spineleaf", SpineLeaf.LAYERS[:-1], BUF), fmap)
    assert e.value.key == "ecn.ports.leaf9-eth1"


def test_rounds_inherit_and_override():
    sc = validate({"name": "x", "hosts": {"tcp_ecn": 1}, "ecn": {"profile": {"step": {"k_packets": 20}}},
                   "rounds": [{"name": "dt", "ecn": {"profile": "off"}}, {"name": "k", "hosts": {"tcp_ecn": 2}}]})
    r = sc.rounds
    assert [x.name for x in r] == ["dt", "k"]
    assert profile_spec(r[0].ecn.profile) == "off" and r[0].hosts.tcp_ecn == 1
    assert profile_spec(r[1].ecn.profile) == {"step": {"k_bytes": 20 * FRAME_BYTES}} and r[1].hosts.tcp_ecn == 2
    one = validate({"name": "solo"}).rounds
    assert len(one) == 1 and one[0].name == "solo" and profile_spec(one[0].ecn.profile) == "off"


@pytest.mark.parametrize("rounds,key", [
    ([], "rounds"),
    ([{"name": "a"}, {"name": "a"}], "rounds[1].name"),
    ([{"nam": "a"}], "rounds[0].nam"),
    ([{"name": "a", "ecn": {"marker": "bpf"}}], "rounds[0].ecn.marker"),
    ([{"name": "a", "hosts": {"tcp_ecn": 7}}], "rounds[0].hosts.tcp_ecn"),
    ([{"name": "a", "ecn": {"profile": {"step": {"k_packets": 500}}}}], "rounds[0].ecn.profile.step.k_packets"),
])
def test_bad_rounds_name_the_key(rounds, key):
    with pytest.raises(ScenarioError) as e:
        validate({"name": "x", "rounds": rounds})
    assert e.value.key == key


def test_marker_choice_follows_the_kernel_and_refuses_what_is_missing(monkeypatch):
    from common.errors import CapabilityError
    sc = validate({"name": "x", "ecn": {"profile": {"step": {"k_packets": 20}}}})
    assert choose_marker(sc, {"qdiscs": {"red": True}}, True)[0] == "red"
    assert choose_marker(sc, {"qdiscs": {"red": True}}, False)[0] == "none"
    sc_red = validate({"name": "x", "ecn": {"marker": "red", "profile": {"step": {"k_packets": 20}}}})
    with pytest.raises(CapabilityError, match="ecn.marker: red"):
        choose_marker(sc_red, {"qdiscs": {"red": False, "clsact": True}}, True)


def test_plan_carries_every_switch_port():
    sc = validate({"name": "x", "topology": {"spines": 1, "leaves": 2, "hosts_per_leaf": 2},
                   "traffic": {"senders": 2}, "ecn": {"profile": {"step": {"k_packets": 20}}}})
    fmap = SpineLeaf(spines=1, leaves=2, hosts_per_leaf=2).build().to_map()
    plan = ecn_plan(sc, fmap, "bpf", port_profiles(sc.ecn, fmap), slack_s=100e-6)
    assert set(plan.ports) == {p["intf"] for s in fmap["switches"] for p in s["ports"]}
    p = plan.ports["leaf1-eth1"]
    assert p.rate_bps == 10e6 and p.buffer_bytes == 100 * FRAME_BYTES
    assert p.burst_bytes == FRAME_BYTES // 10        # 10 Mbit/s x 100 us is 125 B: a tenth of a frame, the floor
    slow = ecn_plan(sc, fmap, "bpf", port_profiles(sc.ecn, fmap), slack_s=500e-6)   # timers 0.5 ms late
    assert slow.ports["leaf1-eth1"].burst_bytes == 625
    assert p.fifo.to_json() == {"kind": "pfifo", "limit": 100}
    assert EcnPlan.from_json(plan.to_json()) == plan     # the start request's JSON gives the same plan back
    red = {"red": {"kmin_packets": 5, "kmax_packets": 50, "pmax": 0.1, "weight": 0.3}}
    sc2 = validate({"name": "x", "ecn": {"layers": {"leaf": red}}})
    with pytest.raises(ScenarioError) as e:
        check_red_weights(sc2, sc2.rounds)
    assert e.value.key == "ecn.layers.leaf.red.weight"
    sc3 = validate({"name": "x", "rounds": [{"name": "a"}, {"name": "b", "ecn": {"profile": red}}]})
    with pytest.raises(ScenarioError) as e:
        check_red_weights(sc3, sc3.rounds)
    assert e.value.key == "rounds[1].ecn.profile.red.weight"
    ok = dict(red["red"], weight=0.5)
    sc4 = validate({"name": "x", "ecn": {"profile": {"red": ok}}})
    check_red_weights(sc4, sc4.rounds)


def test_bpf_map_encodings():
    raw = encode_cfg(EcnProfile("step", k_bytes=30280), 10e6, 151400, 3028)
    assert len(raw) == CFG.size == 72
    kind, w, rate, buf, drain_ns, k, kmin, kmax, pmax, burst = CFG.unpack(raw)
    assert (kind, rate, buf, k, burst) == (1, 1_250_000, 151400, 30280, 3028 * 10**9)
    assert drain_ns == pytest.approx(151400 / 1.25e6 * 1e9, abs=2)
    red = CFG.unpack(encode_cfg(EcnProfile("red", kmin_bytes=1, kmax_bytes=2, pmax=0.25, weight=0.5), 8e6, 10, 0))
    assert red[0] == 2 and red[1] == 32768 and red[8] == 2**30
    assert ST.size == 96     # sizeof(struct fl_ecn_st) in the C source
    st = decode_st(ST.pack(0, 0, 3 * 10**9 + 5, 0, 0, 10, 8, 2, 0, 4, 1, 9000, 0))
    assert st == {"packets": 10, "ect": 8, "not_ect": 2, "ce_in": 0, "marked": 4, "vq_drops": 1,
                  "max_backlog_bytes": 9000, "backlog_bytes": 3}
    with pytest.raises(ValueError):
        encode_cfg(EcnProfile("off"), 0, 10, 0)


#: TCA_OPTIONS of the RED requests iproute2 6.1 sent, read with ``strace -xx -e trace=sendmsg tc qdisc
#: replace dev X parent 1:1 handle 20: red limit L min A max B avpkt 1514 burst N bandwidth Rbit
#: probability P ecn nodrop`` (the kernel here has no RED: the request is sent all the same), for the
#: parameters the former tc path gave each profile: [(rate bit/s, limit bytes, profile, hex)].
TC_RED_OPTIONS = [
    (10e6, 151400, {"step": {"k_packets": 20}}, (
        "14000100684f0200487600004976000001010b0004010200000000000000000000000000000001010101010101010101"
        "010101020202020202020202020202020303030303030303030303030303040404040404040404040404040505050505"
        "050505050505050506060606060606060606060606060707070707070707070707070708080808080808080808080808"
        "09090909090909090909090909090a0a0a0a0a0a0a0a0a0a0a0a0a0b0b0b0b0b0b0b0b0b0b0b0b0b0c0c0c0c0c0c0c0c"
        "0c0c0c0c0c0c0d0d0d0d0d0d0d0d0d0d0d0d0d0e0e0e0e0e0e0e0e0e0e0e0e0e0f0f0f0f0f0f0f0f0f0f0f0f0f0f1010"
        "1010101010101010101010111111111111111111111111111212121212121212121212121212131f0800030000000000"
        "0c000400090000000f000000")),
    (10e6, 151400, {"red": {"kmin_packets": 10, "kmax_packets": 60, "pmax": 0.2}}, (
        "14000100684f0200243b0000d862010001140b0004010200000000000000000000000000000001010101010101010101"
        "010101020202020202020202020202020303030303030303030303030303040404040404040404040404040505050505"
        "050505050505050506060606060606060606060606060707070707070707070707070708080808080808080808080808"
        "09090909090909090909090909090a0a0a0a0a0a0a0a0a0a0a0a0a0b0b0b0b0b0b0b0b0b0b0b0b0b0c0c0c0c0c0c0c0c"
        "0c0c0c0c0c0c0d0d0d0d0d0d0d0d0d0d0d0d0d0e0e0e0e0e0e0e0e0e0e0e0e0e0f0f0f0f0f0f0f0f0f0f0f0f0f0f1010"
        "1010101010101010101010111111111111111111111111111212121212121212121212121212131f080003001cc7711c"
        "0c000400090000000f000000")),
    (1e9, 1514000, {"red": {"kmin_packets": 50, "kmax_packets": 300, "pmax": 0.5, "weight": 2 ** -9}}, (
        "14000100101a1700b427010038ee060009150d0004010200000000000000000000000000010101010101010101010101"
        "020202020202020202020202030303030303030303030304040404040404040404040405050505050505050505050506"
        "0606060606060606060607070707070707070707070708080808080808080808080809090909090909090909090a0a0a"
        "0a0a0a0a0a0a0a0a0a0b0b0b0b0b0b0b0b0b0b0b0b0c0c0c0c0c0c0c0c0c0c0c0d0d0d0d0d0d0d0d0d0d0d0d0e0e0e0e"
        "0e0e0e0e0e0e0e0e0f0f0f0f0f0f0f0f0f0f0f1010101010101010101010101111111111111111111111111212121212"
        "1212121212121313131313131313131313131414141414141414141414141515151515151515151f0800030055555555"
        "0c000400090000000f000000")),
]


def _options(msg) -> bytes:
    """The TCA_OPTIONS payload of an encoded tc request (after its nlmsghdr and tcmsg)."""
    from controller.dataplane.netlink import TCA_OPTIONS, nl_attrs
    msg["header"]["type"], msg["header"]["flags"] = 36, 0x505
    msg.encode()
    data = bytes(msg.data)
    return nl_attrs(data, 36, len(data))[TCA_OPTIONS]


def test_red_is_requested_as_tc_requests_it():
    """RED goes over netlink: the request's options are the bytes tc 6.1 sends for the same
    parameters (thresholds, Wlog from the burst, Plog, Scell_log and the idle-damping table,
    max_P, the ecn|nodrop flags as a bitfield), under 1:1 with handle 20:."""
    from pyroute2.netlink.rtnl.tcmsg.common import tick_in_usec
    if tick_in_usec != 15.625:
        pytest.skip(f"this kernel's psched ticks ({tick_in_usec} per us) are not those the bytes were read with")
    for rate, limit, spec, hexed in TC_RED_OPTIONS:
        prof = parse_profile(spec, limit, "k")
        msg = tcqdisc.red_message(7, rate, limit, prof)
        assert (msg["index"], msg["handle"], msg["parent"]) == (7, 0x200000, 0x10001)
        assert msg.get_attr("TCA_KIND") == "red"
        assert _options(msg).hex() == hexed, spec


def test_red_parameters_for_each_profile():
    params = tcqdisc.red_parameters(10e6, 151400, parse_profile({"step": {"k_packets": 20}}, BUF, "k"))
    assert params["min"] == 30280 and params["max"] == 30281 and params["probability"] == 1.0
    assert params["ecn"] and params["nodrop"] and params["limit"] == 151400 and params["bandwidth"] == 10_000_000
    # tc derives Wlog from burst (iproute2 tc_red_eval_ewma): the chosen burst gives the asked Wlog
    assert redparams.red_wlog(None) == 1 and redparams.red_wlog(2 ** -9) == 9
    for bad in (0.3, 1.0):
        with pytest.raises(ValueError):
            redparams.red_wlog(bad)
    b = redparams.red_burst_for_wlog(15140, 1514, 5)
    assert b >= 10 and redparams.red_eval_ewma(15140, b, 1514) == 5
    # the kernel's parameters as tc computes them (tc_red_eval_P, tc_red_eval_idle_damping, max_P)
    assert redparams.red_eval_plog(30280, 30281, 1.0) == 1 and redparams.red_eval_plog(5, 5, 0.5) == -1
    clog, stab = redparams.red_idle_damping(1, 1514, 1_250_000, 15.625)
    assert clog == 11 and len(stab) == 256 and stab[0] == 0 and stab[255] == 31 and list(stab) == sorted(stab)
    assert redparams.red_max_p(1.0) == 0 and redparams.red_max_p(0.5) == 2 ** 31
    opts = tcqdisc.RedPlugin.get_parameters(params)["attrs"]
    assert [a[0] for a in opts] == ["TCA_RED_PARMS", "TCA_RED_STAB", "TCA_RED_MAX_P", "TCA_RED_FLAGS"]
    parms = opts[0][1]
    assert (parms["qth_min"], parms["qth_max"], parms["Wlog"], parms["Plog"], parms["Scell_log"], parms["flags"]) \
        == (30280, 30281, 1, 1, 11, 0)
    assert opts[3][1] == {"flags": tcqdisc.TC_RED_ECN | tcqdisc.TC_RED_NODROP, "selector": 0x0F}
    with pytest.raises(ValueError, match="EWMA"):
        tcqdisc.RedPlugin.get_parameters(dict(params, burst=1))
    # what iproute2 6.1 prints (the VM lane) and what older ones print
    shown = {"limit": 151400, "min": 30280, "max": 30281, "ecn": True, "harddrop": False, "adaptive": False,
             "nodrop": True, "ewma": 1, "probability": 0.5, "Scell_log": 11}
    assert tcqdisc.red_flags_ok(shown) and tcqdisc.red_flags_ok({"flags": "ecn nodrop"})
    assert not tcqdisc.red_flags_ok(dict(shown, nodrop=False)) and not tcqdisc.red_flags_ok({"flags": "ecn"})


def _kernel_red_dump(flags_attr: bool):
    """A RED qdisc as the kernel dumps it (net/sched/sch_red.c red_dump, red_dump_stats): the
    parameters with max_P derived from Plog, the flags in the bitfield (or, from a kernel before
    5.8, in the parameters), RED's statistics in TCA_STATS2 and TCA_XSTATS."""
    from pyroute2.netlink.rtnl.tcmsg import tcmsg
    opts = [["TCA_RED_PARMS", {"limit": 151400, "qth_min": 30280, "qth_max": 30281, "Wlog": 1, "Plog": 1,
                               "Scell_log": 11, "flags": 0 if flags_attr else tcqdisc.TC_RED_ECN}],
            ["TCA_RED_MAX_P", 2 ** 31]]
    if flags_attr:
        opts.append(["TCA_RED_FLAGS", {"flags": tcqdisc.TC_RED_ECN | tcqdisc.TC_RED_NODROP, "selector": 0x0F}])
    xstats = {"early": 3, "pdrop": 2, "other": 0, "marked": 41}
    m = tcmsg()
    m["index"], m["handle"], m["parent"] = 7, 0x200000, 0x10001
    m["attrs"] = [["TCA_KIND", "red"], ["TCA_OPTIONS", {"attrs": opts}],
                  ["TCA_STATS2", {"attrs": [["TCA_STATS_BASIC", {"bytes": 151400, "packets": 100}],
                                            ["TCA_STATS_QUEUE", {"qlen": 0, "backlog": 0, "drops": 5, "requeues": 0,
                                                                 "overlimits": 0}],
                                            ["TCA_STATS_APP", xstats]]}],
                  ["TCA_XSTATS", xstats]]
    m["header"]["type"] = 36
    m.encode()
    back = tcmsg(bytes(m.data))
    back.decode()
    return back


def test_red_reads_back_its_flags_and_counters_as_tc_shows_them():
    m = _kernel_red_dump(flags_attr=True)
    shown = tcqdisc.red_shown(m)
    assert shown == {"limit": 151400, "min": 30280, "max": 30281, "ecn": True, "harddrop": False, "adaptive": False,
                     "nodrop": True, "ewma": 1, "probability": 0.5, "Scell_log": 11}
    assert tcqdisc.red_flags_ok(shown)
    assert tcqdisc.red_stats(m) == {"marked": 41, "early": 3, "pdrop": 2, "other": 0, "drops": 5, "packets": 100}
    # a kernel without TCA_RED_FLAGS has no nodrop: the read-back refuses it
    old = tcqdisc.red_shown(_kernel_red_dump(flags_attr=False))
    assert old["ecn"] and not old["nodrop"] and not tcqdisc.red_flags_ok(old)


def test_linux_red_probability_compensation():
    """Linux RED marks at 2p/(1+p) per packet (uniform gaps); P' = Pmax/(2-Pmax) gives Pmax at Kmax."""
    for pmax in (0.01, 0.2, 0.5, 1.0):
        p = redparams.red_tc_probability(pmax)
        assert 2 * p / (1 + p) == pytest.approx(pmax)
    assert redparams.red_line_deviation(0.2) < 0.006
    assert 0.03 < redparams.red_line_deviation(0.5) < 0.04
    params = tcqdisc.red_parameters(10e6, 151400, parse_profile(
        {"red": {"kmin_packets": 10, "kmax_packets": 60, "pmax": 0.2}}, BUF, "k"))
    assert params["probability"] == pytest.approx(0.2 / 1.8)


def _simulate_linux_red_rate(p, n=200000, seed=3):
    """Per-packet marking rate of include/net/red.h's count scheme at a constant probability p."""
    import random
    rnd = random.Random(seed)
    count, marks, qr = 0, 0, rnd.random()
    for _ in range(n):
        count += 1
        if p * count >= qr:
            marks += 1
            count, qr = 0, rnd.random()
    return marks / n


def test_linux_red_count_scheme_rate():
    for p in (0.05, 0.1, 0.2):
        assert _simulate_linux_red_rate(p) == pytest.approx(2 * p / (1 + p), rel=0.03)


def test_counter_deltas_and_ss_parsing():
    d = ecn_summary.counter_deltas({"a": {"marked": 5, "max_backlog_bytes": 100}},
                                {"a": {"marked": 9, "max_backlog_bytes": 300}, "b": {"marked": 1}})
    assert d == {"a": {"marked": 4, "max_backlog_bytes": 300}, "b": {"marked": 1}}
    text = ("Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n"
            "0 5792 10.2.0.1:5 10.1.0.1:5001\n"
            "\t ts sack ecn dctcp wscale:9,9 rto:204 delivered_ce:31 busy:200ms\n"
            "0 5792 10.2.0.1:6 10.1.0.1:5001\n"
            "\t cubic wscale:9,9 delivered_ce:0\n")
    assert ecn_summary.parse_ss_tin(text, ["cubic", "dctcp", "reno"]) == {
        "connections": 2, "congestion_control": ["cubic", "dctcp"], "ecn_flows": 1, "delivered_ce_flows": 1}
    bare = text.replace("ts sack ecn ", "")      # iproute2 6.1 on a 6.18 kernel prints no option flags
    assert ecn_summary.parse_ss_tin(bare, ["cubic", "dctcp"])["ecn_flows"] is None


def _rows(qs, marks, rate_bps=8e6):
    """Synthetic probe rows: a packet that found q bytes waited q x 8 / rate longer."""
    return [[0, i, 0, int(1e6 + q * 8 / rate_bps * 1e9), 3 if m else 2, 1514] for i, (q, m) in enumerate(zip(qs, marks))]


def test_step_check_against_the_delay_reckoning():
    qs = [0, 1000, 5000, 9000, 10000, 11000, 20000, 30000]
    res = marking.step_check(_rows(qs, [q >= 10000 for q in qs]), 8e6, 10000, 1500)
    assert (res["above"], res["above_ce"], res["below"], res["below_ce"], res["band"]) == (2, 2, 3, 0, 3)
    assert res["frac_above_ce"] == 1.0
    bad = marking.step_check(_rows(qs, [True] * len(qs)), 8e6, 10000, 1500)
    assert bad["below_ce"] == 3


def test_red_buckets_expected_line():
    qs = [1000 + 100 * i for i in range(100)]                 # 1000..10900 B, Kmin 1000, Kmax 11000
    rows = _rows([0] + qs, [False] + [i % 2 == 0 for i in range(100)])
    b = marking.red_buckets(rows, 8e6, 1000, 11000, 0.5, buckets=2)
    assert [x["packets"] for x in b] == [50, 50]
    assert b[0]["expected"] == pytest.approx(0.5 * 2450 / 10000) and b[0]["measured"] == 0.5


def test_ecn_line_in_the_terminal_summary():
    assert ecn_report.format_line({"marker": "none"}) == "ECN: no marking (drop-tail everywhere)"
    line = ecn_report.format_line({"marker": "bpf", "bottleneck_profile": "step K=30280 B (20 pkt)",
                               "bottleneck_counters": {"marked": 12}, "ce_received": {"packets": 11},
                               "queue_after_first_rtt": {"median_packets": 18.0, "p99_packets": 40.0}})
    assert line.startswith("ECN: bpf marker; bottleneck step K=30280 B") and "12 CE marked" in line


def _fifo(arrivals_ns, rate_bps, stall=None, way_there_ns=50_000, way_on_ns=30_000, length=1514):
    """Rows of packets sent at ``arrivals_ns`` (flow = index % 2) through one FIFO at ``rate_bps``
    whose dequeue stands still over ``stall`` (start, end ns), with the true backlog each found."""
    service = length * 8 / rate_bps * 1e9
    rows, backlog, free_at, departures = [], [], 0.0, []
    for i, t in enumerate(arrivals_ns):
        at = t + way_there_ns
        backlog.append(sum(length for d in departures if d > at))
        start = max(at, free_at)
        if stall and start < stall[1] and start + service > stall[0]:
            start = max(start, stall[1])
        free_at = start + service
        departures.append(free_at)
        rows.append([i % 2, i, int(t), int(free_at + way_on_ns), 2, length])
    return rows, backlog


def test_queue_ahead_counts_what_a_stall_lengthens():
    rate = 10e6
    service = 1514 * 8 / rate * 1e9
    sends = [0.0, 3 * service] + [6 * service + i * service / 1.2 for i in range(200)]   # idle, then 1.2x
    rows, truth = _fifo(sends, rate, stall=(100 * service, 106 * service))     # at about 16 queued
    counted = marking.queue_ahead_bytes(rows, rate)
    assert counted == pytest.approx(truth, abs=1)
    timed = marking.queue_seen_bytes(rows, rate)
    worst = max(t - b for t, b in zip(timed, truth))
    assert worst > 5 * 1514          # the stall's six frame times read as six more frames queued
    ks = [b >= 20 * 1514 for b in truth]
    exact = [r[:4] + [3 if k else 2] + r[5:] for r, k in zip(rows, ks)]    # a marker exact at K = 20
    res = marking.step_check(exact, rate, 20 * 1514, 1514, reckon=marking.queue_ahead_bytes)
    assert res["frac_above_ce"] == 1.0 and res["below_ce"] == 0 and res["above"] > 20
    # timed, the stall puts packets that found less than K above it, unmarked
    assert marking.step_check(exact, rate, 20 * 1514, 1514)["frac_above_ce"] < 1.0
