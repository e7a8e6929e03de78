"""Rate-controller plug-ins (traffic.ccplugin): a good file loads and runs a sender QP; every broken
file gives one line naming the file and what is missing; an exception the plug-in raises while a
run uses it is named with the file and its line; the shipped AIMD example works."""
import textwrap
from pathlib import Path

import pytest

from common import roce
from traffic import ccplugin
from traffic.ccplugin import PluginError, failure_in, load_plugin, sample_job
from traffic.ratecontrol import RateController, for_job
from traffic.roce import SenderQp, plugin_failure

REPO = Path(__file__).resolve().parents[2]
AIMD = REPO / "docs" / "examples" / "aimd_cc.py"

GOOD = """
    from traffic.ratecontrol import RateController


    class Halver(RateController):
        name = "halver"

        def __init__(self, rate_bps, floor_bps):
            self.rate, self.floor = rate_bps, floor_bps
            self.params = {"floor_bps": floor_bps}

        @classmethod
        def from_job(cls, job):
            return cls(job["line_rate_mbps"] * 1e6, job["cc_params"].get("floor_mbps", 1) * 1e6)

        def rate_bps(self):
            return self.rate

        def on_cnp(self, now_s):
            self.rate = max(self.floor, self.rate / 2)
"""

#: (what is wrong, the file's text, what the one line says)
BROKEN = [
    ("a syntax error", "from traffic.ratecontrol import RateController\n\nclass A(RateController:\n    pass\n",
     "syntax error at line 3"),
    ("no subclass", "x = 1\n", "defines no subclass of traffic.ratecontrol.RateController"),
    ("two subclasses", GOOD + "\n\n    class Other(Halver):\n        name = 'other'\n",
     "defines 2 subclasses of RateController (Halver, Other)"),
    ("no name", GOOD.replace('name = "halver"', 'pass'), "class Halver has no name"),
    ("a bad name", GOOD.replace('name = "halver"', 'name = "two words"'), "name must be 1-64 letters"),
    ("no rate_bps", GOOD.replace("def rate_bps(self):\n            return self.rate", "def rate(self):\n            return 1"),
     "class Halver has no rate_bps"),
    ("no from_job", GOOD.replace("@classmethod\n        def from_job", "@classmethod\n        def make"),
     "class Halver has no from_job"),
    ("rate_bps zero", GOOD.replace("return self.rate\n", "return 0\n"), "rate_bps() returned 0 for a sample job"),
    ("rate_bps NaN", GOOD.replace("return self.rate\n", "return float('nan')\n"), "rate_bps() returned nan"),
    ("rate_bps text", GOOD.replace("return self.rate\n", "return 'fast'\n"), "rate_bps() returned 'fast'"),
    ("rate_bps None", GOOD.replace("return self.rate\n", "return None\n"), "rate_bps() returned None"),
    ("a cut to zero on a CNP", GOOD.replace("max(self.floor, self.rate / 2)", "0.0"),
     "rate_bps() returned 0.0 for a sample job after an ACK and a CNP"),
    ("an import that fails", "import no_such_module_here\n", "raised ModuleNotFoundError while loading"),
    ("ack_every_packets zero", GOOD.replace('name = "halver"', 'name = "halver"\n        ack_every_packets = 0'),
     "class Halver's ack_every_packets must be None (the responder's count) or an integer from 1 to 65536"),
    ("ack_every_packets text", GOOD.replace('name = "halver"', 'name = "halver"\n        ack_every_packets = "1"'),
     "ack_every_packets must be None"),
    ("from_job that raises", GOOD.replace('job["cc_params"].get("floor_mbps", 1)', 'job["cc_params"]["floor"]'),
     "from_job raised KeyError: 'floor' on a sample job"),
]


def write(tmp_path, text, name="mycc.py"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_a_good_plugin_loads_once_and_drives_a_sender_qp(tmp_path):
    path = write(tmp_path, GOOD)
    cls = load_plugin(path)
    assert issubclass(cls, RateController) and cls.name == "halver"
    assert load_plugin(str(path)) is cls                          # once per file version
    assert not (tmp_path / "__pycache__").exists()                 # nothing written beside it
    job = {"line_rate_mbps": 10, "mtu_bytes": 1024, "mode": "plugin:halver", "cc_plugin": str(path),
           "cc_params": {"floor_mbps": 2}}
    assert isinstance(for_job(job), cls) and for_job(job).params == {"floor_bps": 2e6}
    q = SenderQp({"flow_id": 0, "qpn": 0x11, "udp_sport": 50000,
                  "peer": {"mac": "02:00:00:00:00:02", "ip": "10.0.0.2", "qpn": 0x22}}, job,
                 "02:00:00:00:00:01", "10.0.0.1")
    q.start(0.0, 0.0)
    for t in (0.01, 0.02, 0.03):
        q.on_feedback(roce.Bth(opcode=roce.CNP, becn=True, dqpn=0x11, ackreq=False, psn=0, payload_bytes=0,
                               syndrome=None), t)
    assert q.rate_bps() == 2e6 and q.bucket.rate_bps == 2e6        # 10 -> 5 -> 2.5 -> floor 2
    rec = q.record()
    assert rec["mode"] == "plugin:halver" and rec["cc_params"] == {"floor_bps": 2e6} and rec["cnps_received"] == 3


@pytest.mark.parametrize("what, text, says", BROKEN, ids=[b[0] for b in BROKEN])
def test_each_broken_plugin_is_one_line_naming_the_file_and_the_problem(tmp_path, what, text, says):
    path = write(tmp_path, text, name=f"broken_{abs(hash(what))}.py")
    with pytest.raises(PluginError) as e:
        load_plugin(path)
    msg = str(e.value)
    assert isinstance(e.value, ValueError) and "\n" not in msg
    assert msg.startswith(f"rate-controller plug-in {path}: ") and says in msg, msg


def test_a_missing_file_and_a_directory(tmp_path):
    with pytest.raises(PluginError, match=r"nope\.py: cannot read it: No such file"):
        load_plugin(tmp_path / "nope.py")
    with pytest.raises(PluginError, match="is not a regular file"):
        load_plugin(tmp_path)


def test_the_line_of_a_failure_on_the_sample_job_is_named(tmp_path):
    path = write(tmp_path, GOOD + "\n        def on_ack(self, now_s, rtt_s, acked_bytes):\n"
                                  "            self.rate = self.rate / (rtt_s - rtt_s)\n")
    with pytest.raises(PluginError, match=r"on_ack raised ZeroDivisionError: float division by zero on a sample "
                                          r"job .*\(line 23, in on_ack\)"):
        load_plugin(path)


def test_params_reach_the_sample_job(tmp_path):
    path = write(tmp_path, GOOD.replace('job["cc_params"].get("floor_mbps", 1)', 'job["cc_params"]["floor"]'))
    assert load_plugin(path, {"floor": 3}).name == "halver"
    assert sample_job({"floor": 3}, "x") == {**ccplugin.SAMPLE_JOB, "mode": "plugin:x", "cc_params": {"floor": 3}}


def test_an_exception_at_run_time_names_the_file_the_exception_and_its_line(tmp_path):
    path = write(tmp_path, GOOD + "\n        def on_ack(self, now_s, rtt_s, acked_bytes):\n"
                                  "            if now_s > 1.0:\n"
                                  "                raise RuntimeError('boom')\n")
    job = {"line_rate_mbps": 10, "mtu_bytes": 1024, "cc_plugin": str(path), "cc_params": {}}
    cc = for_job(job)
    cc.on_ack(0.5, 0.004, 1024)                  # fine early on (the sample job passed)
    with pytest.raises(RuntimeError) as e:
        cc.on_ack(2.0, 0.004, 1024)
    err = plugin_failure(e.value, job)
    assert isinstance(err, PluginError) and "\n" not in str(err)
    assert str(err) == (f"rate-controller plug-in {path}: raised RuntimeError: boom (line 24, in on_ack) "
                        "while the run used it")
    assert plugin_failure(e.value, {"mode": "dcqcn"}) is None                 # no plug-in in the job
    assert failure_in(ValueError("elsewhere"), path) is None                   # not raised by its code
    assert failure_in(err, path) is err


def test_the_shipped_aimd_example_adds_per_round_trip_and_halves_on_a_cnp():
    assert len(AIMD.read_text().splitlines()) <= 40
    cls = load_plugin(AIMD, {"step_fraction": 0.01})
    cc = cls.from_job({**sample_job({"step_fraction": 0.01}), "line_rate_mbps": 10})
    cc.start(0.0)
    assert cc.rate_bps() == 10e6
    cc.on_ack(0.005, 0.004, 0)                         # a first round trip: 4 ms
    assert cc.rate_bps() == 10e6
    cc.on_cnp(0.01)
    assert cc.rate_bps() == 5e6
    cc.on_cnp(0.011)                                   # within a round trip of the last cut: no second cut
    assert cc.rate_bps() == 5e6
    # one round trip's worth of bytes at 5 Mbit/s and 4 ms: + 1% of the line
    cc.on_ack(0.02, 0.004, int(5e6 * 0.004 / 8))
    assert cc.rate_bps() == pytest.approx(5.1e6)
    cc.on_ack(0.03, None, int(5.1e6 * 0.004 / 8))      # no sample: the last round trip stands in
    assert cc.rate_bps() == pytest.approx(5.2e6)
    cc.on_cnp(0.05)
    assert cc.rate_bps() == pytest.approx(2.6e6) and cc.record()["cnps_reacted"] == 2


def test_an_agent_builds_a_plugin_that_needs_its_params(tmp_path):
    from traffic.ratecontrol import for_job
    f = tmp_path / "needs.py"
    f.write_text("from traffic.ratecontrol import RateController\n"
                 "class Needs(RateController):\n    name = 'needs'\n"
                 "    def __init__(self, r):\n        self.r = r\n"
                 "    @classmethod\n    def from_job(cls, job):\n        return cls(job['cc_params']['rate_mbps'] * 1e6)\n"
                 "    def rate_bps(self):\n        return self.r\n")
    job = {"cc_plugin": str(f), "cc_params": {"rate_mbps": 5}, "line_rate_mbps": 10, "mode": "plugin:needs"}
    assert for_job(job).rate_bps() == 5e6
