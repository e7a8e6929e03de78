"""The RoCE agent's pure parts (traffic.roce): the token bucket and the DCQCN feedback warning."""
from types import SimpleNamespace

from common.dcqcn import DcqcnParams
from traffic.roce import TokenBucket, feedback_warning


def test_token_bucket_paces_and_counts_only_busy_time():
    b = TokenBucket(8000.0, 2000, now_s=0.0)       # 1000 B/s, 2000 B saved up
    assert b.ready_wait_s(True, 0.0) == 0.0
    b.take(3000)                                   # 1000 B of debt
    assert abs(b.wait_s(0.0) - 1.0) < 1e-9
    b.set_busy(False, 1.0)                         # busy for 1 s: 1000 B allowed
    b.set_busy(True, 5.0)                          # idle 4 s: nothing allowed, bucket capped at 2000
    assert abs(b.allowed_bytes - 1000) < 1e-9 and b.tokens == 2000
    b.set_rate(16000.0, 6.0)
    assert abs(b.allowed_bytes - 2000) < 1e-9 and b.rate_bps == 16000.0


def test_feedback_warning_when_wakeups_are_late_against_dcqcns_timer():
    p = DcqcnParams.scaled(10e6, time_scale=100)   # T = 5.5 ms
    q = SimpleNamespace(params=p, flow_id=3)
    assert abs(p.timer_s - 0.0055) < 1e-12
    assert feedback_warning(q, 0.0007) is None                # this host: p99 0.7 ms
    w = feedback_warning(q, 0.006)                             # the VM lane at time_scale 100
    assert w and "flow 3" in w and "6.0 ms" in w and "5.5 ms" in w and "time_scale" in w
    assert feedback_warning(SimpleNamespace(params=DcqcnParams.scaled(5e6, time_scale=200), flow_id=0), 0.006) is None
    assert feedback_warning(SimpleNamespace(params=None, flow_id=0), 1.0) is None   # mode none: no loop
    assert feedback_warning(q, None) is None                   # no pacer wake-up measured
