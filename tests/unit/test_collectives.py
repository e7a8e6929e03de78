"""Issue 8: the collectives' schedules, bandwidth factors and alpha-beta model (pure logic)."""
import numpy as np
import pytest

from common import collectives as C


def test_textbook_example_four_ranks_chunks_of_three():
    # rank g starts with g*12 + i, i = 0..11; every rank ends with 72 + 4i after 24 chunk transfers
    inputs = [np.array([g * 12 + i for i in range(12)], dtype=np.float32) for g in range(4)]
    out, count = C.simulate(inputs, "allreduce")
    assert count == 24
    for a in out:
        assert a.tolist() == [72 + 4 * i for i in range(12)]
    assert C.chunk_bounds(12, 4) == [0, 3, 6, 9, 12]


def test_textbook_example_reduce_scatter_step_by_step():
    # after the reduce-scatter (3 steps) rank r holds chunk (r + 1) % 4 fully reduced
    inputs = [np.array([g * 12 + i for i in range(12)], dtype=np.float32) for g in range(4)]
    out, count = C.simulate(inputs, "reduce_scatter")
    assert count == 12
    for r, a in enumerate(out):
        c = C.owned_chunk_after_reduce_scatter(r, 4)
        assert a[3 * c:3 * c + 3].tolist() == [72 + 4 * i for i in range(3 * c, 3 * c + 3)]


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 16, 31, 64])
def test_ring_schedule_every_step_is_a_ring_shift_and_every_chunk_travels_right(n):
    steps = C.ring_schedule(n, "allreduce")
    assert len(steps) == 2 * (n - 1) and sum(len(s) for s in steps) == 2 * n * (n - 1)
    for k, step in enumerate(steps):
        assert sorted(t.src for t in step) == list(range(n))
        assert all(t.dst == (t.src + 1) % n and t.step == k for t in step)
        # every chunk moves exactly once per step
        assert sorted(t.chunk for t in step) == list(range(n))
        # what a rank sends at step k+1 is what it received at step k (the pipeline)
        if k + 1 < len(steps):      # across the phase boundary too: the owned chunk came last
            got = {t.dst: t.chunk for t in step}
            nxt = {t.src: t.chunk for t in steps[k + 1]}
            assert got == nxt
    # rank r's reduce-scatter sends: (r - s) % n; the reduced chunk it owns then starts the all-gather
    for r in range(n):
        assert [steps[s][r].chunk for s in range(n - 1)] == [(r - s) % n for s in range(n - 1)]
        assert steps[n - 1][r].chunk == C.owned_chunk_after_reduce_scatter(r, n)
    assert all(t.reduce for s in steps[:n - 1] for t in s) and not any(t.reduce for s in steps[n - 1:] for t in s)


@pytest.mark.parametrize("n", [2, 3, 4, 7, 8, 16, 64])
def test_simulated_allreduce_equals_numpy_sum_with_uneven_chunks(n):
    rng = np.random.default_rng(n)
    length = 10 * n + 3                                # chunks of uneven size
    inputs = [rng.integers(-1000, 1000, length).astype(np.float32) for _ in range(n)]
    kept = [a.copy() for a in inputs]
    out, count = C.simulate(inputs, "allreduce")
    want = np.sum(inputs, axis=0)
    assert count == 2 * n * (n - 1)
    assert all(np.array_equal(a, want) for a in out)
    assert all(np.array_equal(a, b) for a, b in zip(inputs, kept))      # the inputs are left alone


@pytest.mark.parametrize("n", [2, 4, 5, 16])
def test_all_gather_and_all_to_all(n):
    length = 3 * n
    b = C.chunk_bounds(length, n)
    inputs = [np.arange(length, dtype=np.float32) + 1000 * r for r in range(n)]
    gathered, count = C.simulate(inputs, "all_gather")
    assert count == n * (n - 1)
    for a in gathered:
        for c in range(n):
            assert np.array_equal(a[b[c]:b[c + 1]], inputs[c][b[c]:b[c + 1]])
    exchanged, count = C.simulate(inputs, "all_to_all")
    assert count == n * (n - 1) and len(C.ring_schedule(n, "all_to_all")) == n - 1
    for r, a in enumerate(exchanged):
        for c in range(n):
            assert np.array_equal(a[b[c]:b[c + 1]], inputs[c][b[r]:b[r + 1]])
    for s, step in enumerate(C.ring_schedule(n, "all_to_all"), start=1):
        assert sorted(t.dst for t in step) == list(range(n)) and all(t.dst == (t.src + s) % n for t in step)


def test_busbw_factors_match_nccl_tests():
    assert C.busbw_factor("allreduce", 16) == pytest.approx(2 * 15 / 16)
    assert C.busbw_factor("allreduce", 2) == 1.0
    for kind in ("reduce_scatter", "all_gather", "all_to_all"):
        assert C.busbw_factor(kind, 8) == pytest.approx(7 / 8)
    bw = C.bandwidths("allreduce", 4, 1_000_000, 2.0)
    assert bw["algbw_bps"] == 4e6 and bw["busbw_bps"] == pytest.approx(4e6 * 1.5)


def test_alpha_beta_model():
    # 2(N-1)(alpha + D/(N B)): N = 4, D = 1 MB, B = 10 Mbit/s, alpha = 1 ms -> 6 x (1 ms + 0.2 s)
    assert C.model_time_s("allreduce", 4, 1_000_000, 0.001, 10e6) == pytest.approx(6 * (0.001 + 0.2))
    assert C.model_time_s("all_gather", 4, 1_000_000, 0.0, 10e6) == pytest.approx(3 * 0.2)
    # busbw of the model's time with alpha 0 equals the link rate, whatever N
    for n in (2, 4, 16, 64):
        t = C.model_time_s("allreduce", n, 8_000_000, 0.0, 10e6)
        assert C.bandwidths("allreduce", n, 8_000_000, t)["busbw_bps"] == pytest.approx(10e6)


@pytest.mark.parametrize("call, match", [
    (lambda: C.ring_schedule(1), "ranks"),
    (lambda: C.ring_schedule(4, "broadcast"), "broadcast"),
    (lambda: C.chunk_bounds(3, 4), "3 elements"),
    (lambda: C.busbw_factor("gather", 4), "gather"),
    (lambda: C.model_time_s("allreduce", 4, 1, 0.0, 0), "rate_bps"),
    (lambda: C.bandwidths("allreduce", 4, 1, 0), "time_s"),
    (lambda: C.simulate([np.zeros(4), np.zeros(5)]), "one length"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_ring_bottleneck_from_the_fluid_model():
    # Spine-Leaf 2 spines x 2 leaves x 4 hosts, 10 Mbit/s everywhere (4 hosts down, 2 uplinks up: 2:1)
    from experiments.workloads.collective import plan as coll_plan
    from topologies.spineleaf import SpineLeaf
    fab = SpineLeaf(spines=2, leaves=2, hosts_per_leaf=4, host_rate_mbps=10, uplink_rate_mbps=10).build()
    fmap = fab.to_map()
    local = coll_plan.place_ranks(fab, 8, "local")        # h1..h4 on leaf1, h5..h8 on leaf2
    spread = coll_plan.place_ranks(fab, 8, "spread")      # alternating leaves
    assert local == [f"h{i}" for i in range(1, 9)]
    assert [fab.node(h).leaf for h in spread] == ["leaf1", "leaf2"] * 4
    # rack-local ring: 2 of its 8 transfers cross the 2 x 10 Mbit/s uplinks, one each way: the
    # host links bound it at 10 Mbit/s; spread: all 8 cross, 4 each way over 20 Mbit/s: 5 Mbit/s
    assert coll_plan.bottleneck_rate_bps(fmap, local, "allreduce") == pytest.approx(10e6)
    assert coll_plan.bottleneck_rate_bps(fmap, spread, "allreduce") == pytest.approx(5e6)
    with pytest.raises(ValueError, match="one server"):
        coll_plan.bottleneck_rate_bps(fmap, ["h1", "h1"], "allreduce")
    # hash ECMP (each TCP connection pinned to one uplink): the 4 spread transfers of a direction
    # fall 2+2 on the 2 uplinks with probability 6/16, 3+1 with 8/16, 4+0 with 2/16, both
    # directions independently, so the slowest transfer's median is 10/3 Mbit/s; rack-local
    # stays at 10 (one crossing transfer per direction cannot collide)
    assert coll_plan.bottleneck_rate_bps(fmap, local, "allreduce", "hash") == pytest.approx(10e6)
    assert coll_plan.bottleneck_rate_bps(fmap, spread, "allreduce", "hash") == pytest.approx(10e6 / 3)
    with pytest.raises(ValueError, match="routing"):
        coll_plan.bottleneck_rate_bps(fmap, local, "allreduce", "random")
    # alpha from a measured time: T = 14 x (alpha + D / (N B))
    t = C.model_time_s("allreduce", 8, 80_000, 0.002, 10e6)
    assert coll_plan.alpha_from_run(t, "allreduce", 8, 80_000, 10e6) == pytest.approx(0.002)


def test_hash_ecmp_slowest_flow_distribution():
    # two flows leaf1 -> leaf2 over 2 uplinks: they share one with probability 1/2 (then 5 Mbit/s
    # each), else 10; p10 and p90 bracket both outcomes
    from experiments.fluid import hash_ecmp_min_rate
    from topologies.spineleaf import SpineLeaf
    fmap = SpineLeaf(spines=2, leaves=2, hosts_per_leaf=2, host_rate_mbps=10, uplink_rate_mbps=10).build().to_map()
    r = hash_ecmp_min_rate(fmap, [("h1", "h3"), ("h2", "h4")], trials=400)
    assert r["p10"] == pytest.approx(5.0) and r["p90"] == pytest.approx(10.0) and r["trials"] == 400
    assert hash_ecmp_min_rate(fmap, [("h1", "h3")], trials=20)["median"] == pytest.approx(10.0)
    with pytest.raises(ValueError, match="pair"):
        hash_ecmp_min_rate(fmap, [], trials=5)


def test_traced_paths_give_this_runs_bottleneck():
    # a scripted tracer stands in for ovs-appctl: leaf1 sends port 40000 up spine1 (port 3),
    # everything else up spine2 (port 4); a 4-rank spread ring h1 h3 h2 h4 (leaf1 leaf2 leaf1 leaf2)
    from experiments import paths
    from experiments.workloads.collective import plan as coll_plan
    from topologies.spineleaf import SpineLeaf
    fmap = SpineLeaf(spines=2, leaves=2, hosts_per_leaf=2, host_rate_mbps=10, uplink_rate_mbps=10).build().to_map()
    calls = []

    def trace(bridge, flow):
        f = dict(kv.split("=") for kv in flow.split(",") if "=" in kv)
        calls.append((bridge, f["in_port"], flow))
        dst = next(h for h in fmap["hosts"] if h["ip"] == f["nw_dst"])
        if bridge == dst["switch"]:
            return dst["switch_port"]
        if bridge.startswith("spine"):
            return next(p["port"] for s in fmap["switches"] if s["name"] == bridge for p in s["ports"]
                        if p["peer"] == dst["switch"])
        sport = f.get("tcp_src") or f["udp_src"]
        return 3 if sport in ("40000", "40001") else 4
    path = paths.traced_path(fmap, "h1", "h3", 40000, 17000, trace=trace)
    assert path == {("h1", "leaf1"): 1.0, ("leaf1", "spine1"): 1.0, ("spine1", "leaf2"): 1.0, ("leaf2", "h3"): 1.0}
    assert calls[0][:2] == ("leaf1", "1") and [c[0] for c in calls] == ["leaf1", "spine1", "leaf2"]
    hosts = ["h1", "h3", "h2", "h4"]
    # each leaf's two transfers on one spine (leaf1's on spine1, leaf2's on spine2): shared uplinks
    conns = {0: 40000, 1: 40002, 2: 40001, 3: 40003}
    recs = [{"connections": [{"dst_rank": (r + 1) % 4, "src_port": conns[r], "dst_port": 17000 + (r + 1) % 4}]}
            for r in range(4)]
    assert coll_plan.traced_rate_bps(fmap, recs, hosts, "allreduce", trace=trace) == pytest.approx(5e6)
    conns[2], conns[3] = 40005, 40001                   # now one on each spine per leaf: nothing shared
    recs = [{"connections": [{"dst_rank": (r + 1) % 4, "src_port": conns[r], "dst_port": 17000 + (r + 1) % 4}]}
            for r in range(4)]
    assert coll_plan.traced_rate_bps(fmap, recs, hosts, "allreduce", trace=trace) == pytest.approx(10e6)
    assert coll_plan.traced_rate_bps(fmap, [None] * 4, hosts, "allreduce", trace=trace) is None
    for c in (c for r in recs for c in r["connections"]):      # RoCE queue pairs: UDP to 4791
        c.update(proto="udp", dst_port=4791)
    assert coll_plan.traced_rate_bps(fmap, recs, hosts, "allreduce", trace=trace) == pytest.approx(10e6)
    assert "udp,nw_src" in calls[-1][2] and "udp_dst=4791" in calls[-1][2]
    with pytest.raises(ValueError, match="does not forward"):
        paths.traced_path(fmap, "h1", "h3", 40000, 17000, trace=lambda b, f: None)


def test_trace_each_keeps_the_order_and_raises_what_a_trace_raised():
    # the traces of a round overlap (threads), their results come back in the order asked
    import threading
    import time
    from experiments import paths
    seen = set()

    def slow_first(x):
        seen.add(threading.get_ident())
        time.sleep(0.01 * (6 - x))
        return x * 10
    assert paths.trace_each(slow_first, range(6)) == [0, 10, 20, 30, 40, 50]
    assert 1 < len(seen) <= paths.TRACERS

    def drops(x):
        if x == 3:
            raise ValueError("leaf2 does not forward it")
        return x
    with pytest.raises(ValueError, match="does not forward"):
        paths.trace_each(drops, range(6))


def test_plots_of_a_collective(tmp_path):
    from experiments import plot
    rows = []
    for step in C.ring_schedule(4, "allreduce"):
        for t in step:
            rows.append({"rank": t.src, "step": t.step, "phase": t.phase, "chunk": t.chunk,
                         "start_s": 0.1 * t.step, "end_s": 0.1 * t.step + 0.09})
    p = plot.plot_collective_timeline(rows, tmp_path / "timeline.png")
    assert p.stat().st_size > 10_000
    sizes = [{"size_bytes": s, "busbw_bps": 8e6 * s / (s + 65536), "model_busbw_bps": 9e6 * s / (s + 32768),
              "label": lab} for s in (65536, 1 << 20, 4 << 20) for lab in ("local", "spread")]
    p = plot.plot_busbw_vs_size(sizes, tmp_path / "busbw.png", link_rate_bps=10e6)
    assert p.stat().st_size > 10_000
    with pytest.raises(ValueError):
        plot.plot_collective_timeline([], tmp_path / "x.png")


def test_collective_scenario_section_is_validated():
    from common.errors import ScenarioError
    from experiments.scenario import validate
    base = {"name": "c", "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 4}}
    sc = validate({**base, "collective": {"kind": "allreduce", "ranks": 4},
                   "rounds": [{"name": "a", "collective": {"placement": "spread"}}, {"name": "b"}]})
    assert [r.collective.placement for r in sc.rounds] == ["spread", "local"]
    sc = validate({**base, "collective": {"kind": "all_to_all", "hosts": ["h1", "h1", "h2"]}})
    assert sc.collective.ranks == 3 and sc.collective.transport == "tcp"
    sc = validate({**base, "collective": {"kind": "allreduce", "ranks": 4, "transport": "roce"},
                   "rounds": [{"name": "r"}, {"name": "t", "collective": {"transport": "tcp"}}]})
    assert [r.collective.transport for r in sc.rounds] == ["roce", "tcp"]
    for bad, key in [({"collective": {"kind": "broadcast"}}, "collective.kind"),
                     ({"collective": {"kind": "allreduce", "ranks": 9}}, "collective.ranks"),
                     ({"collective": {"kind": "allreduce", "hosts": ["h1", "h99"]}}, "collective.hosts[1]"),
                     ({"collective": {"kind": "allreduce", "ranks": 8, "size_bytes": 16}}, "collective.size_bytes"),
                     ({"collective": {"kind": "allreduce", "sizes_bytes": [65536, 65538]}},
                      "collective.sizes_bytes[1]"),
                     ({"collective": {"kind": "allreduce", "size_bytes": 65537}}, "collective.size_bytes"),
                     ({"collective": {"kind": "allreduce", "rnaks": 4}}, "collective.rnaks"),
                     ({"collective": {"kind": "allreduce", "transport": "udp"}}, "collective.transport"),
                     ({"collective": {"kind": "allreduce", "transport": "roce"}, "roce": {"pcap_hosts": ["h1"]}},
                      "roce.pcap_hosts"),
                     ({"rounds": [{"name": "a", "collective": {"placement": "local"}}]}, "rounds[0].collective"),
                     ({"collective": {"kind": "allreduce"}, "rounds": [{"name": "a", "collective": {"repeat": 2}}]},
                      "rounds[0].collective")]:
        with pytest.raises(ScenarioError) as e:
            validate({**base, **bad})
        assert e.value.key == key, (e.value.key, key)


def test_step_count_is_the_schedule_length():
    for kind in C.KINDS:
        for n in (2, 5, 16):
            assert C.step_count(kind, n) == len(C.ring_schedule(n, kind))


def test_roce_queue_pairs_and_payload_share():
    from experiments.workloads.collective import plan as coll_plan
    qps = coll_plan.roce_qps(4, "allreduce")              # the ring: r -> r + 1
    assert [(q["src_rank"], q["dst_rank"]) for q in qps] == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert len({q["send_qpn"] for q in qps} | {q["recv_qpn"] for q in qps}) == 8
    assert len({q["udp_sport"] for q in qps}) == 4 and all(q["send_qpn"] < 1 << 24 for q in qps)
    assert len(coll_plan.roce_qps(16, "all_to_all")) == 16 * 15
    assert coll_plan.payload_fraction("tcp") == 1448 / 1514
    assert coll_plan.payload_fraction("roce", 1024) == 1024 / 1082     # Eth 14, IP 20, UDP 8, BTH 12, ICRC 4
