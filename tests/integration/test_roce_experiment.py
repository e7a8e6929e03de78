"""Issue 7 through the CLI: an 8:1 RoCEv2 incast on a Spine-Leaf fabric in every combination of
ECN (DCQCN's RED profile) and PFC on one fabric, DCQCN senders; and the shipped roce-incast
scenario (Poisson responses at a load, DCQCN against open loop). Every byte is delivered exactly
once in every round (go-back-N recovers whatever the fabric drops); ECN brings CNPs; PFC drops
nothing. Real frames, real fabric."""
import csv
import json
import os

import pytest
import yaml

from tests.chromium import check_report_folder

from .conftest import ROCE_RESPONSES, assert_clean, cpu_bound_fidelity_failures, run_cli

LANE = os.environ.get("FABRICLAB_LANE", "host")

# Eight Python senders under the VM lane's emulated CPU cannot offer the incast's load (at 2 Mbit/s
# links the open-loop round overflowed nothing there: 0 drops); the VM lane runs the two-sender
# DCQCN tests of test_roce.py, and these run here
pytestmark = pytest.mark.lane("host", reason="the emulated CPU cannot drive an 8-sender RoCE incast")


def _summaries(results):
    out = next(results.iterdir())
    dirs = sorted((out / "rounds").iterdir())
    return out, dirs, [json.loads((d / "summary.json").read_text()) for d in dirs]


def _ports_with_drops(round_dir):
    with open(round_dir / "ports.csv") as fh:
        return [(r["switch"], r["intf"], int(r["drops"]), r["peak_backlog_packets"]) for r in csv.DictReader(fh)
                if int(r["drops"] or 0)]


def test_roce_incast_every_byte_once_with_and_without_ecn_and_pfc(tmp_path, figure):
    sc = {"name": "roce-ecn-pfc", "seed": 3,
          "topology": {"spines": 2, "leaves": 3, "hosts_per_leaf": 4, "host_rate_mbps": 10, "uplink_rate_mbps": 10},
          "queues": {"buffer_packets": 100},
          "ecn": {"marker": "auto", "profile": {"red": {"kmin_bytes": 3028, "kmax_bytes": 60560, "pmax": 0.2}}},
          "priorities": {"dscp": {26: 3, 0: 0}}, "pfc": {"lossless": [3], "xoff_packets": 40, "xon_packets": 36},
          "rounds": [{"name": "plain", "ecn": {"profile": "off"}, "pfc": {"enabled": False}},
                     {"name": "ecn", "pfc": {"enabled": False}},
                     {"name": "pfc", "ecn": {"profile": "off"}, "pfc": {"enabled": True}},
                     {"name": "ecn-pfc", "pfc": {"enabled": True}}],
          "traffic": {"pattern": "incast", "transport": "roce", "receiver": "h1",
                      "sender_hosts": ["h5", "h6", "h7", "h8", "h9", "h10", "h11", "h12"],
                      "response_bytes": 100_000, "timeout_s": 120}}
    path = tmp_path / "roce-ecn-pfc.yaml"
    path.write_text(yaml.safe_dump(sc))
    results = tmp_path / "results"
    # --accept-unfaithful: this test is about delivery; a port's rate shortfall on a busy host is
    # allowed and printed, any other failed self-check fails it (cpu_bound_fidelity_failures)
    p = run_cli("run", str(path), "--results", str(results), "--accept-unfaithful", timeout=1500)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out, dirs, (plain, ecn, pfc, both) = _summaries(results)
    print("accepted self-check failures:", cpu_bound_fidelity_failures(out))
    for name, s in zip(("plain", "ecn", "pfc", "ecn-pfc"), (plain, ecn, pfc, both)):
        r = s["roce"]
        print(f"{name}: drops {s['total_drops']}, CNPs {r['cnps_received']}, retransmitted "
              f"{r['retransmitted_packets']} (NAKs {r['naks']}, timeouts {r['timeouts']}), message FCT "
              f"{r['message_fct_s']}, pauses {(s.get('pfc') or {}).get('pauses')}")
        assert r["delivered_exactly_once"] and s["flows"]["all_complete"], (name, r)
        assert r["messages_complete"] == r["messages"] == 8 and r["mode"] == "dcqcn"
        assert s["flows"]["bytes_received"] == s["flows"]["bytes_sent"] == 8 * sc["traffic"]["response_bytes"]
        assert not r["pacing_warnings"], r["pacing_warnings"]
    # without ECN nothing is marked, so DCQCN never slows: the port overflows and go-back-N recovers
    assert plain["roce"]["cnps_received"] == 0 and plain["total_drops"] > 0
    assert plain["roce"]["retransmitted_packets"] > 0
    # ECN: CE marks become CNPs and the senders slow down
    assert ecn["roce"]["cnps_received"] > 0 and ecn["roce"]["ce_packets"] > 0
    # PFC: nothing dropped anywhere, the pause did the work. Go-back-N may still resend on its
    # timeout while a paused sender's frames wait in its NIC queue (166 packets once, 0 in other
    # runs): a resend, not a loss. A NAK means a PSN gap: on the userspace datapath 2 NAKs came once
    # (one flow, 0 counted drops anywhere, no receive-buffer error at the hosts) in ~6 runs: frames
    # lost outside every counter, the limit test_pfc_watchdog.py also allows for (at most 5 frames)
    for name, s, d in (("pfc", pfc, dirs[2]), ("ecn-pfc", both, dirs[3])):
        p_ = s["pfc"]
        why = (name, {k: p_.get(k) for k in ("cap_drops", "pauses", "reaction_s", "slowest_reactions", "lost_events", "errors")},
               _ports_with_drops(d), s["roce"].get("host_udp_drops"))
        assert s["total_drops"] == 0 and p_["cap_drops"] == 0 and p_["pauses"] > 0, why
        assert figure(f"{name}_naks", s["roce"]["naks"]) <= (2 if s["datapath"] == "user" else 0), (s["roce"], why)
        assert not any((s["roce"].get("host_udp_drops") or {}).values()), why
    assert both["roce"]["cnps_received"] > 0
    for d in dirs:
        for name in ("roce_messages.csv", "roce_rates.csv", "roce_flows.csv", "roce_rates.png", "flows.csv"):
            assert (d / name).stat().st_size > 0, (d, name)
        assert str(d) in p.stdout
    assert "RoCE dcqcn: 8/8 messages" in p.stdout
    assert_clean(str(out))


#: Responses per sender in the shipped scenario's test.
RESPONSES = ROCE_RESPONSES


def test_shipped_roce_incast_scenario_dcqcn_against_open_loop_over_three_seeds(tmp_path, shipped_roce_run):
    # the shipped scenario with a third of its responses per sender (conftest.shipped_roce_run)
    p, out = shipped_roce_run
    dirs = sorted((out / "rounds").iterdir())
    summaries = [json.loads((d / "summary.json").read_text()) for d in dirs]
    print("accepted self-check failures:", cpu_bound_fidelity_failures(out))
    dcs, nones = summaries[:3], summaries[3:]
    for s, mode in [(x, "dcqcn") for x in dcs] + [(x, "none") for x in nones]:
        r = s["roce"]
        print(f"{mode} seed {r['seed']}: message FCT {r['message_fct_s']}, drops {s['total_drops']}, "
              f"CNPs {r['cnps_received']}, retransmitted {r['retransmitted_packets']}")
        assert r["mode"] == mode and r["delivered_exactly_once"] and r["messages_complete"] == r["messages"] == 8 * RESPONSES
        assert r["message_fct_s"]["median"] > 0 and r["message_fct_s"]["p99"] >= r["message_fct_s"]["median"]
        lo, hi = r["message_fct_s"]["median_ci95"]
        assert lo <= r["message_fct_s"]["median"] <= hi
    assert [s["roce"]["seed"] for s in summaries] == [1, 2, 3, 1, 2, 3]
    # every agent ended by itself, the last ones of every round when the runner said all were
    # done (an agent done early and idle for its linger of 3 x RTO ends then, as before)
    ended = [sorted({json.loads(a.read_text())["loop"]["ended_by"] for a in (d / "agents").glob("*.roce.json")})
             for d in dirs]
    assert all(e in (["end barrier"], ["end barrier", "linger"]) for e in ended), ended
    assert all(s["roce"]["cnps_received"] > 0 and s["roce"]["dcqcn"]["time_scale"] > 0 for s in dcs)
    assert all(s["roce"]["dcqcn"] is None and s["roce"]["cnps_sent"] > 0 for s in nones)   # notified, ignored
    # the seeds draw different Poisson arrivals (the same three for both modes), spread over the run
    posted = []
    for d in dirs[:3]:
        with open(d / "roce_messages.csv") as fh:
            posted.append(sorted(float(r["posted_s"]) for r in csv.DictReader(fh)))
    assert posted[0] != posted[1] != posted[2] and all(p[0] > 0 and p[-1] > 1.0 for p in posted)
    across = json.loads((out / "rounds.json").read_text())["roce_across_seeds"]
    assert across["dcqcn"]["seeds"] == across["none"]["seeds"] == [1, 2, 3]
    print(f"across seeds: {across}")
    check_report_folder(out, "roce-incast", tmp_path)             # report.html, rendered
    assert_clean(str(out))
