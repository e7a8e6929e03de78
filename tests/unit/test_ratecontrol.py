"""RoCE rate controllers (traffic.ratecontrol): the registry the scenario's roce.mode reads, the
registered algorithms, and a new algorithm plugged in without touching the sender QP."""
import pytest

from common import roce
from common.dcqcn import DcqcnParams, ReactionPoint
from common.swift import SwiftParams, SwiftState
from common.timely import TimelyParams, TimelyState
from common.errors import ScenarioError
from experiments.scenario import validate
from traffic import ratecontrol
from common.patched_timely import PatchedTimelyParams, PatchedTimelyState
from traffic.ratecontrol import (RATE_CONTROLLERS, Dcqcn, FixedRate, PatchedTimely, RateController, Swift, Timely,
                                  for_job)
from traffic.roce import SenderQp

JOB = {"line_rate_mbps": 10, "mtu_bytes": 256}


def test_the_scenario_accepts_exactly_the_registered_modes():
    for mode in RATE_CONTROLLERS:
        assert validate({"name": "t", "roce": {"mode": mode}}).roce.mode == mode
    assert {"dcqcn", "timely", "patched_timely", "swift", "none"} <= set(RATE_CONTROLLERS)   # a new one only adds
    with pytest.raises(ScenarioError, match="roce.mode"):
        validate({"name": "t", "roce": {"mode": "fast"}})
    with pytest.raises(ValueError, match="no RoCE rate controller 'fast'"):
        for_job({**JOB, "mode": "fast"})


def test_a_fixed_rate_ignores_cnps():
    cc = for_job({**JOB, "mode": "none", "rate_mbps": 4})
    assert isinstance(cc, FixedRate)
    cc.start(0.0)
    cc.on_cnp(0.1)
    cc.advance(1.0)
    assert cc.rate_bps() == cc.target_bps() == 4e6 and cc.record()["target_rate_bps"] == 4e6
    assert for_job({**JOB, "mode": "none"}).rate_bps() == 10e6      # default: the line rate


def test_dcqcn_is_the_reaction_point_of_common_dcqcn():
    cc = for_job({**JOB, "mode": "dcqcn"})
    assert isinstance(cc, Dcqcn) and cc.params == DcqcnParams.scaled(10e6)
    rp = ReactionPoint(cc.params, now_s=0.0, record=False)
    cc.start(0.0)
    for t in (0.01, 0.02):
        cc.on_cnp(t)
        rp.on_cnp(t)
    cc.advance(0.5)
    rp.advance(0.5)
    assert (cc.rate_bps(), cc.target_bps()) == (rp.rate_bps, rp.target_bps) < (10e6, 10e6)
    assert cc.record() == {"target_rate_bps": None, "cnps_reacted": 2, "alpha": rp.alpha}


@pytest.mark.parametrize("mode, cls, params, state", [("timely", Timely, TimelyParams, TimelyState),
                                                       ("patched_timely", PatchedTimely, PatchedTimelyParams,
                                                        PatchedTimelyState),
                                                       ("swift", Swift, SwiftParams, SwiftState)])
def test_delay_based_controllers_are_their_models_fed_by_ack_samples(mode, cls, params, state):
    cc = for_job({**JOB, "mode": mode})
    assert isinstance(cc, cls) and cc.params == params.scaled(10e6)
    own = for_job({**JOB, "mode": mode, mode: {**params.scaled(10e6).as_dict(), "beta": 0.5}})
    assert own.params.beta == 0.5                              # the job's section wins
    ref = state(cc.params)
    cc.start(0.0)
    cc.on_cnp(0.001)                                           # delay is their only signal
    cc.on_sent(1082, 0.001)
    samples = [(0.01, 0.004), (0.02, None), (0.03, 0.030), (0.08, 0.060), (0.2, 0.005)]
    for t, rtt in samples:
        cc.on_ack(t, rtt, 16384)
        if rtt is not None:                                    # an ACK without a sample changes nothing
            ref.on_ack(t, rtt, 16384) if mode == "swift" else ref.on_rtt(rtt, t)
        assert cc.rate_bps() == ref.rate_bps
    assert cc.rate_bps() < 10e6
    rec = cc.record()
    assert rec["cnps_reacted"] == 0 and rec["rtt_samples_used"] == 4 and rec["rate_decreases"] >= 1


class Halving(RateController):
    """A toy algorithm for the test: halve on every CNP, never recover."""
    name = "halving"

    def __init__(self, rate_bps):
        self.rate = rate_bps

    @classmethod
    def from_job(cls, job):
        return cls(job["line_rate_mbps"] * 1e6)

    def rate_bps(self):
        return self.rate

    def on_cnp(self, now_s):
        self.rate /= 2


def test_a_new_algorithm_is_one_class_and_one_registry_entry(monkeypatch):
    monkeypatch.setitem(ratecontrol.RATE_CONTROLLERS, "halving", Halving)
    peer = {"mac": "02:00:00:00:00:02", "ip": "10.0.0.2", "qpn": 0x22}
    q = SenderQp({"flow_id": 0, "qpn": 0x11, "udp_sport": 50000, "peer": peer,
                  "messages": [{"at_s": 0.0, "bytes": 4096}]},
                 {**JOB, "mode": "halving"}, "02:00:00:00:00:01", "10.0.0.1")
    q.start(0.0, 0.0)
    assert q.rate_bps() == 10e6 and q.params is None
    q.on_feedback(roce.Bth(opcode=roce.CNP, becn=True, dqpn=0x11, ackreq=False, psn=0, payload_bytes=0, syndrome=None), 0.01)
    q.on_feedback(roce.Bth(opcode=roce.CNP, becn=True, dqpn=0x11, ackreq=False, psn=0, payload_bytes=0, syndrome=None), 0.02)
    assert q.rate_bps() == 2.5e6 and q.bucket.rate_bps == 2.5e6
    assert q.record()["cnps_received"] == 2 and q.record()["mode"] == "halving"


def test_a_controller_registered_with_keys_but_no_parameter_set_is_refused(monkeypatch):
    class Half(RateController):
        name = "half"
        PARAMS = {"gain": ratecontrol.F((int, float), None, lo=0, hi=1)}
    monkeypatch.setitem(RATE_CONTROLLERS, "half", Half)
    with pytest.raises(TypeError, match="rate controller half: PARAMS and params_cls must be given together"):
        ratecontrol._check_registry()
