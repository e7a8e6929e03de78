"""The troubleshooter's reasoning (experiments.troubleshooter), on pure fabrics with a scripted data
plane: a probe loses datagrams exactly when it crosses the hidden faulty element. The planner
must find that element, blame nothing else, in about ceil(log2(suspects)) rounds, for Fat-Trees
up to k=16 and the Spine-Leaf; the verdict rules on scripted counters; the random hidden fault."""
import math

import pytest

from experiments import troubleshooter as D
from topologies import FatTree, SpineLeaf


def flows_for(model: D.PathModel):
    def through(e):
        for s, d, p in model.through(e):
            yield D.Flow(s, d, 0, tuple(p))

    def between(s, d):
        for p in model.paths(s, d)[:1]:
            yield D.Flow(s, d, 0, tuple(p))
    return through, between


def scripted(faulty: D.Element, slow_host: str | None = None, log=None):
    """A data plane whose one faulty element loses 5% of every probe that crosses it."""
    def run(flows):
        if log is not None:
            log.append(flows)
        out = []
        for f in flows:
            lost = 50 if faulty is not None and faulty in f.elements else 0
            achieved = 4.0 if f.src == slow_host else 9.0
            out.append(D.Outcome(f, 9.0, 1000, 1000 - lost, achieved))
        return out
    return run


def localise(fmap, faulty, budget=10_000.0, **kw):
    model = D.PathModel(fmap)
    through, between = flows_for(model)
    log = []
    loc = D.localise(fmap, scripted(faulty, log=log, **kw), through, between, 9.0, budget)
    return loc, log


@pytest.mark.parametrize("k", [4, 6, 8])
def test_the_faulty_link_is_found_and_nothing_healthy_is_blamed(k):
    fmap = FatTree(k=k).build().to_map()
    links = [D.link(l["a"], l["b"]) for l in fmap["links"]] + [D.link(l["b"], l["a"]) for l in fmap["links"]]
    for faulty in links[:: max(1, len(links) // 12)]:
        loc, _ = localise(fmap, faulty)
        assert loc.suspects == {faulty}, (faulty, loc.suspects)
        bisect = [s for s in loc.steps if s.step == "bisect"]
        assert len(bisect) <= D.rounds_bound(D.directed_links(fmap)), (faulty, len(bisect))


def test_a_k16_fat_tree_is_bisected_in_log2_rounds_from_the_survey():
    fmap = FatTree(k=16).build().to_map()
    last = fmap["links"][-1]
    faulty = D.link(last["b"], last["a"])
    loc, log = localise(fmap, faulty, budget=1e9)
    assert loc.suspects == {faulty}
    after_survey = [s.suspects_after for s in loc.steps if s.step == "survey"][-1]
    bisect = [s for s in loc.steps if s.step == "bisect"]
    print(f"k=16: {D.directed_links(fmap)} directed links, {after_survey} suspects after the survey, "
          f"{len(bisect)} bisection rounds (bound {D.rounds_bound(after_survey)})")
    assert len(bisect) <= D.rounds_bound(after_survey) + 2


def test_halves_follow_the_fabrics_zones():
    fmap = FatTree(k=4).build().to_map()
    suspects = [e for e in D.all_elements(fmap) if e[0] == "link"]
    first, second = D.split(suspects, D.zone_key(fmap))
    pods = lambda half: {n[:2] for e in half for n in e[1:] if n.startswith("p")}     # noqa: E731
    assert pods(first) == {"p0", "p1"} and pods(second) >= {"p2", "p3"}, (pods(first), pods(second))
    # within a pod the hosts' links come before the aggregation's, which come before the core's
    key = D.zone_key(fmap)
    assert key(D.link("h1", "p0e1")) < key(D.link("p0e1", "p0a1")) < key(D.link("p0a1", "c1"))


def test_a_round_holds_link_disjoint_flows_within_the_forwarding_budget():
    a = D.Flow("h1", "h5", 0, (("h1", "e1"), ("e1", "a1"), ("a1", "e2"), ("e2", "h5")))
    b = D.Flow("h2", "h6", 0, (("h2", "e1"), ("e1", "a1"), ("a1", "e2"), ("e2", "h6")))   # shares e1->a1
    c = D.Flow("h3", "h7", 0, (("h3", "e3"), ("e3", "h7")))
    assert D.pack([a, b, c], 5.0, 1000) == [[a, c], [b]]
    assert D.pack([a, c], 5.0, 15.0) == [[a], [c]]          # 3 switches x 5 Mbit/s each: one per round


def test_a_switch_that_drops_on_every_port_is_the_culprit():
    fmap = FatTree(k=4).build().to_map()
    loc, _ = localise(fmap, ("switch", "p1a2"))
    assert loc.suspects == {("switch", "p1a2")}


def test_a_flapping_cable_is_found_from_both_directions():
    fmap = SpineLeaf().build().to_map()
    l = fmap["links"][-1]
    loc, _ = localise(fmap, D.cable(l["a"], l["b"]))
    assert loc.suspects == {D.cable(l["a"], l["b"])}


def test_a_healthy_fabric_ends_after_the_survey():
    fmap = FatTree(k=4).build().to_map()
    loc, log = localise(fmap, None)
    assert loc.network_ok and loc.suspects == set() and all(s.step == "survey" for s in loc.steps)
    assert {f.src for r in log for f in r} == {h["name"] for h in fmap["hosts"]}     # every host probed
    v = D.verdict(loc.suspects, loc.outcomes, ports_rows(fmap), {s["name"] for s in fmap["switches"]})
    assert (v.culprit, v.kind) == (None, None) and v.why == ("every element some probe crossed was cleared by a "
                                                             "healthy probe",)


def test_a_slow_host_shows_only_on_its_own_probes():
    fmap = FatTree(k=4).build().to_map()
    loc, _ = localise(fmap, None, slow_host="h7")
    assert not loc.network_ok and loc.suspects == set()
    v = D.verdict(loc.suspects, loc.outcomes, ports_rows(fmap), {s["name"] for s in fmap["switches"]})
    assert (v.culprit, v.kind, v.layer) == ("h7", "slow_host", "host"), v


def ports_rows(fmap, **changes):
    rows = []
    for s in fmap["switches"]:
        for p in s["ports"]:
            r = {"switch": s["name"], "port": p["port"], "intf": p["intf"], "peer": p["peer"], "rx_errors": 0,
                 "tx_dropped": 0, "rate_mbps": 10.0, "nominal_mbps": 10.0, "state": "up", "carrier_changes": 0}
            r.update(changes.get(p["intf"], {}))
            rows.append(r)
    return rows


@pytest.mark.parametrize("changes, kind, culprit, layer", [
    ({"c1-eth1": {"rx_errors": 40}}, "corrupt", "p0a1->c1", "physical"),
    ({"p0a1-eth3": {"rate_mbps": 3.0, "tx_dropped": 200}, "c1-eth1": {"rate_mbps": 3.0}}, "degrade", "p0a1->c1",
     "physical"),
    ({"p0a1-eth3": {"carrier_changes": 4}}, "flap", "p0a1<->c1", "physical"),
    ({}, "drop", "c1", "switch"),
])
def test_the_counters_name_the_layer(changes, kind, culprit, layer):
    fmap = FatTree(k=4).build().to_map()
    f = D.Flow("h1", "h5", 0, (("h1", "p0e1"), ("p0e1", "p0a1"), ("p0a1", "c1"), ("c1", "p1a1"), ("p1a1", "p1e1"),
                               ("p1e1", "h5")))
    lossy = [D.Outcome(f, 9.0, 1000, 950, 9.0)]
    v = D.verdict({D.link("p0a1", "c1")}, lossy, ports_rows(fmap, **changes), {s["name"] for s in fmap["switches"]})
    assert (v.kind, v.culprit, v.layer) == (kind, culprit, layer), v
    assert v.why and all(isinstance(w, str) for w in v.why)


def test_a_degraded_host_link_is_told_from_a_slow_host_by_the_ports_rate():
    fmap = FatTree(k=4).build().to_map()
    loc, _ = localise(fmap, None, slow_host="h2")
    rows = ports_rows(fmap, **{"p0e1-eth2": {"rate_mbps": 4.0}})
    v = D.verdict(loc.suspects, loc.outcomes, rows, {s["name"] for s in fmap["switches"]})
    assert (v.kind, v.culprit) == ("degrade", "h2->p0e1"), v


def test_verdicts_are_checked_against_the_truth():
    v = D.Verdict("p0a1<->c1", "flap", "physical")
    assert D.matches(v, {"kind": "flap", "link": "c1<->p0a1"})
    assert not D.matches(v, {"kind": "degrade", "link": "p0a1<->c1"})
    assert D.matches(D.Verdict("p0a1->c1", "corrupt", "physical"), {"kind": "corrupt", "link": "p0a1->c1"})
    assert not D.matches(D.Verdict("c1->p0a1", "corrupt", "physical"), {"kind": "corrupt", "link": "p0a1->c1"})
    assert D.matches(D.Verdict("c1", "drop", "switch"), {"kind": "drop", "switch": "c1"})


def test_random_faults_cover_every_kind_with_detectable_sizes():
    fmap = FatTree(k=4).build().to_map()
    faults = [D.random_fault(fmap, s) for s in range(10)]
    assert {f["kind"] for f in faults[:5]} == {"corrupt", "degrade", "drop", "flap", "slow_host"}
    assert faults == [D.random_fault(fmap, s) for s in range(10)]           # seeded
    for f in faults:
        size = f.get("frame_fraction") or f.get("rate_fraction")
        if size is not None:
            lo, hi = D.RANDOM_SIZES[f["kind"]]
            assert lo <= size <= hi
    assert math.ceil(math.log2(96)) == D.rounds_bound(96) == 7


def test_diagnose_refuses_a_fabric_without_a_fault_to_find(tmp_path, capsys):
    from experiments.cli import main
    p = tmp_path / "healthy.yaml"
    p.write_text("name: healthy\ntopology: {kind: fattree, k: 4}\n")
    assert main(["diagnose", str(p)]) == 2
    assert "has no faults: give it a faults section, or --inject random" in capsys.readouterr().err
    assert main(["diagnose", str(p), "--rate-fraction", "1.5"]) == 2
    assert "--rate-fraction must be within" in capsys.readouterr().err


def test_a_students_answer_is_read_as_a_verdict():
    from experiments.diagnose import parse_answer
    v = parse_answer("corrupt p0a1->c1\n")
    assert (v.kind, v.culprit, v.layer) == ("corrupt", "p0a1->c1", "physical")
    assert D.matches(parse_answer("slow_host h7"), {"kind": "slow_host", "host": "h7"})
    for bad, why in (("corrupt", "expected KIND PLACE"), ("broken p0a1->c1", "unknown kind 'broken'")):
        with pytest.raises(ValueError, match=why):
            parse_answer(bad)


def test_a_spine_that_probes_cannot_tell_from_its_links_is_judged_by_the_counters():
    fmap = SpineLeaf(spines=2, leaves=2, hosts_per_leaf=2).build().to_map()
    loc, _ = localise(fmap, ("switch", "spine2"))
    assert loc.suspects == {("switch", "spine2"), D.cable("leaf1", "spine2"), D.cable("leaf2", "spine2")}
    sw = {s["name"] for s in fmap["switches"]}
    clean = ports_rows(fmap)
    assert (D.verdict(loc.suspects, loc.outcomes, clean, sw).kind,
            D.verdict(loc.suspects, loc.outcomes, clean, sw).culprit) == ("drop", "spine2")
    port = next(r["intf"] for r in clean if r["switch"] == "spine2" and r["peer"] == "leaf1")
    v = D.verdict(loc.suspects, loc.outcomes, ports_rows(fmap, **{port: {"rx_errors": 30}}), sw)
    assert (v.kind, v.culprit) == ("corrupt", "leaf1->spine2"), v


def test_the_hidden_faults_are_those_of_the_first_round_that_has_any():
    from pathlib import Path

    from experiments.diagnose import build_fabric, hidden_faults
    from experiments.scenario import read_yaml_file, validate
    root = Path(__file__).resolve().parents[2]
    sc = validate(read_yaml_file(root / "experiments/scenarios/lossy-incast.yaml"))
    assert not sc.rounds[0].faults          # healthy first, then the lossy round
    fmap = build_fabric(sc).to_map()
    (f,) = hidden_faults(sc, fmap, None, 0)
    assert (f["kind"], f["link"]) == ("corrupt", "leaf1->h1")
    healthy = validate({"name": "healthy", "topology": {"kind": "fattree", "k": 4}})
    assert hidden_faults(healthy, fmap, None, 0) == []


def test_every_fault_kind_declares_how_it_is_made_and_what_the_probes_see():
    from controller.faults import FAULTS
    for name, cls in FAULTS.items():
        assert cls.MECHANISM and cls.SYMPTOMS and set(cls.SYMPTOMS) <= {"loss", "slow"}, name
    orders = [c.DIAGNOSIS_ORDER for c in FAULTS.values()]
    assert len(orders) == len(set(orders)), "two kinds asked at the same rank"


def test_a_new_fault_kind_is_recognised_from_its_own_declaration(monkeypatch):
    """The troubleshooter names no kind: a new injector that says what it looks like (here: a
    queue that drops although its link is up and at its rate) is found by that, before the
    kinds ranked after it."""
    from controller.faults import FAULTS
    from controller.faults.base import Injector

    class TailDrop(Injector):
        NAME, TITLE, TARGET, LAYER = "taildrop", "a queue that drops", "link", "physical"
        MECHANISM, DIAGNOSIS_ORDER = "a FIFO limit of one frame", 35

        @classmethod
        def recognise(cls, ev):
            if ev.element == "link" and ev.tx is not None and ev.tx["tx_dropped"]:
                return f"{ev.a}->{ev.b}", (f"{ev.tx['switch']} dropped {ev.tx['tx_dropped']} frames at full rate",)
            return None
    monkeypatch.setitem(FAULTS, "taildrop", TailDrop)
    fmap = FatTree(k=4).build().to_map()
    f = D.Flow("h1", "h5", 0, (("p0a1", "c1"),))
    lossy = [D.Outcome(f, 9.0, 1000, 950, 9.0)]
    sw = {s["name"] for s in fmap["switches"]}
    v = D.verdict({D.link("p0a1", "c1")}, lossy, ports_rows(fmap, **{"p0a1-eth3": {"tx_dropped": 12}}), sw)
    assert (v.kind, v.culprit, v.layer) == ("taildrop", "p0a1->c1", "physical"), v
    assert v.why[-1] == "p0a1 dropped 12 frames at full rate"
    monkeypatch.delitem(FAULTS, "taildrop")
    assert D.verdict({D.link("p0a1", "c1")}, lossy, ports_rows(fmap, **{"p0a1-eth3": {"tx_dropped": 12}}),
                     sw).kind == "drop"
