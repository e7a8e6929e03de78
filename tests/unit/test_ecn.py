"""ECN marking policy (pure; groundwork for issue 5, not reachable from scenarios yet)."""
import pytest

from common.errors import ScenarioError
from controller.ecn.policy import CE, ECT0, ECT1, NOT_ECT, EcnProfile, VirtualQueue, ewma, mark, parse_profile

BUF = 100 * 1514


def test_step_marks_at_and_above_k():
    p = parse_profile({"step": {"k_packets": 20}}, BUF, "ecn.leaf")
    assert p == EcnProfile("step", k_bytes=20 * 1514)
    assert p.mark_probability(20 * 1514 - 1) == 0.0 and p.mark_probability(20 * 1514) == 1.0


def test_red_linear_between_kmin_and_kmax_then_all():
    p = parse_profile({"red": {"kmin_bytes": 10_000, "kmax_bytes": 50_000, "pmax": 0.2}}, BUF, "ecn.spine")
    assert p.mark_probability(10_000) == 0.0
    assert p.mark_probability(30_000) == pytest.approx(0.1)      # halfway: Pmax / 2
    assert p.mark_probability(50_000) == pytest.approx(0.2)
    assert p.mark_probability(50_001) == 1.0                     # DCQCN: everything above Kmax
    assert p.weight is None                                      # instantaneous queue by default


@pytest.mark.parametrize("spec, key", [
    ({"red": {"kmin_bytes": 10, "kmax_bytes": 20, "pmax": 1.5}}, "ecn.x.red.pmax"),        # case L2
    ({"red": {"kmin_bytes": 10, "kmax_bytes": 20, "pmax": 0}}, "ecn.x.red.pmax"),
    ({"red": {"kmin_bytes": 20, "kmax_bytes": 20, "pmax": 0.1}}, "ecn.x.red.kmin_bytes"),
    ({"red": {"kmin_bytes": 10, "kmax_bytes": BUF, "pmax": 0.1}}, "ecn.x.red.kmax_bytes"),
    ({"red": {"kmin_bytes": 10, "kmax_bytes": 20, "pmax": 0.1, "weight": 2}}, "ecn.x.red.weight"),
    ({"red": {"kmin_bytes": 10, "kmax_bytes": 20, "pmax": 0.1, "kmin": 3}}, "ecn.x.red.kmin"),
    ({"step": {"k_bytes": BUF}}, "ecn.x.step.k_bytes"),
    ({"step": {"k_bytes": 10, "k_packets": 1}}, "ecn.x.step.k_bytes"),
    ({"step": {"k_packets": 0}}, "ecn.x.step.k_packets"),
    ({"codel": {}}, "ecn.x.codel"),
    ("on", "ecn.x"),
])
def test_bad_profiles_name_the_key(spec, key):
    with pytest.raises(ScenarioError) as e:
        parse_profile(spec, BUF, "ecn.x")
    assert e.value.key == key


def test_only_ect_packets_are_marked():
    assert mark(ECT0, 1.0, 0.5) == CE and mark(ECT1, 1.0, 0.5) == CE
    assert mark(NOT_ECT, 1.0, 0.0) == NOT_ECT and mark(CE, 1.0, 0.0) == CE
    assert mark(ECT0, 0.3, 0.3) == ECT0 and mark(ECT0, 0.3, 0.29) == CE
    assert parse_profile("off", BUF, "k").mark_probability(10 ** 9) == 0.0


def test_virtual_queue_tracks_a_fifo_drained_at_the_rate():
    q = VirtualQueue(rate_bps=8_000_000, buffer_bytes=3000)     # 1 byte per microsecond
    assert q.arrive(1000, 0.0) == (0.0, True)
    assert q.arrive(1000, 0.0) == (1000.0, True)                 # back-to-back: finds the first
    seen, ok = q.arrive(1000, 0.0005)                            # 500 us later: 500 of 2000 B drained
    assert seen == pytest.approx(1500.0) and ok
    seen, ok = q.arrive(1000, 0.0005)                            # 2500 + 1000 > 3000: dropped
    assert seen == pytest.approx(2500.0) and not ok
    assert q.backlog_bytes == pytest.approx(2500.0)              # a dropped packet takes no room
    assert q.arrive(100, 1.0) == (0.0, True)                     # idle long enough: empty
    with pytest.raises(ValueError):
        VirtualQueue(0, 10)
    with pytest.raises(ValueError):
        VirtualQueue(1e6, 10, burst_bytes=-1)


def test_virtual_queue_with_a_token_bucket_gives_the_burst_as_a_head_start():
    q = VirtualQueue(rate_bps=8_000_000, buffer_bytes=10_000, burst_bytes=1500)   # full bucket of 1500 B
    assert q.arrive(1000, 0.0) == (0.0, True)       # served from credit at once: nothing queued
    assert q.backlog_bytes == 0.0 and q.credit_bytes == 500.0
    assert q.arrive(1000, 0.0) == (0.0, True)       # 500 B of credit left: 500 B stay queued
    assert q.backlog_bytes == pytest.approx(500.0)
    seen, _ = q.arrive(1000, 0.0002)                 # 200 us = 200 B served
    assert seen == pytest.approx(300.0)
    # a long constant overload keeps the burst's head start: 2 packets per 1000 us, service 1000 B per 1000 us
    plain, bucket = VirtualQueue(8e6, 10**6), VirtualQueue(8e6, 10**6, burst_bytes=3000)
    for i in range(200):
        a, _ = plain.arrive(1000, i * 0.0005)
        b, _ = bucket.arrive(1000, i * 0.0005)
    assert a - b == pytest.approx(3000.0)


def test_ewma():
    assert ewma(0.0, 100.0, 0.002) == pytest.approx(0.2)
    assert ewma(50.0, 50.0, 0.5) == 50.0
