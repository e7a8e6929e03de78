"""The run loop (experiments.runner) driven without root: a fake platform (no fabric, no lock, no
probe), a recording feature and a recording workload. Checks the round bookkeeping the fabric
tests used to be the only check of: hooks in order, one summary.json per round written once with
every feature's section, per-round environment records, the run's timings, a run interrupted by a
failing round keeping the rounds before it, and the fabric context left on every path."""
import contextlib
import json
from pathlib import Path

import pytest

from common.errors import UnfaithfulRun
from experiments import runner
from experiments import rounds
from controller.datapaths.ovs.datapath import OvsDatapath
from experiments.features.base import Feature
from experiments.scenario import load_scenario
from experiments.workloads.base import Workload

SCENARIOS = Path(__file__).resolve().parents[2] / "experiments" / "scenarios"


class FakeFabric:
    """What the run loop reads of a live fabric: set-up timings; records its own exit."""

    def __init__(self, log):
        self.log = log
        self.timings_s = {"mininet_build_s": 0.5}
        self.rest_url = "http://127.0.0.1:1"

    def __enter__(self):
        self.log.append("fabric up")
        return self

    def __exit__(self, *exc):
        self.log.append("fabric down")
        return False


class FakeState:
    stale_report = None

    def __init__(self, run_id, log):
        self.log = log

    def __enter__(self):
        self.log.append("lock")
        return self

    def __exit__(self, *exc):
        self.log.append("unlock")
        return False


def fake_platform(log: list, fabric_args: list) -> runner.Platform:
    def live_fabric(fabric, out, state, **kw):
        fabric_args.append(kw)
        return FakeFabric(log)
    return runner.Platform(
        probe=lambda: {"datapath": "user", "kernel": "fake", "qdiscs": {}, "shaper": {"slack_s": 100e-6}},
        run_state=lambda run_id: FakeState(run_id, log),
        live_fabric=live_fabric,
        warm_up_s=lambda lf: 0.25,
        rtt_s=lambda lf, src, dst, payload_bytes=56: 0.001,
        datapath_hold=lambda *a: contextlib.nullcontext())


def recording_feature(log: list, queues: int = 0):
    class Recorder(Feature):
        name = "recorder"

        def plan(self, queues_per_port):
            log.append(f"plan {queues_per_port}")
            self.ctx.env["recorder"] = {"planned": True}
            return queues

        def fabric_args(self):
            return {"recorder_plan": {"rounds": len(self.ctx.rounds)}}

        def headline(self):
            return "recorder=on"

        def after_fabric(self, lf):
            log.append("after_fabric")

        def describe_round(self, rnd):
            return f"rec{rnd.index}"

        def round_options(self, rnd):
            return {"seen_by_workload": rnd.index}

        def before_round(self, lf, rnd):
            log.append(f"before {rnd.index}")
            return {"recorder_round": rnd.index, "round": {"extra": True}}

        def after_round(self, lf, rnd):
            log.append(f"after {rnd.index}")
            return {"counted": 10 * rnd.index}

        def after_rounds(self, lf):
            log.append("after_rounds")
            return {"recorder": {"after_rounds": True}}

        def summarize(self, rnd, summary):
            log.append(f"feature summary {rnd.index}")
            summary["recorder"] = rnd.features["recorder"]

        def warnings(self, summary):
            return [f"round {summary['index']} warned"]
    return Recorder


def recording_workload(log: list, fail_at: int | None = None):
    class Writer(Workload):
        name = "writer"

        @staticmethod
        def wants(sc, rnd):
            return True

        def run_round(self, lf, state, rec):
            log.append(f"run {rec.index} options {rec.options['seen_by_workload']}")
            if rec.index == fail_at:
                raise RuntimeError("the round's agents failed")
            return {"codes": {"h1.rx": 0}}

        def summarize(self, rec):
            log.append(f"workload summary {rec.index}")
            assert not (rec.dir / "summary.json").exists()
            return {"index": rec.index, "raw": rec.raw, "traffic_s": rec.timings_s["traffic_s"]}

        def after_summary(self, rec, summary):
            log.append(f"plots {rec.index}")
            assert json.loads((rec.dir / "summary.json").read_text()) == summary

        def format_round(self, summary, rdir):
            return f"round {summary['index']} in {rdir}"

        def finish_run(self, done):
            log.append(f"finish {[rec.index for rec, _ in done]}")
    return Writer


@pytest.fixture()
def summary_writes(monkeypatch):
    """Every write to a file named summary.json, by path."""
    writes = []
    real = Path.write_text

    def counting(self, data, *a, **kw):
        if self.name == "summary.json":
            writes.append(self)
        return real(self, data, *a, **kw)
    monkeypatch.setattr(Path, "write_text", counting)
    return writes


def run_fake(tmp_path, scenario: str | Path, log, fabric_args, fail_at=None, queues=0):
    sc = load_scenario(SCENARIOS / scenario)
    return runner.run(sc, tmp_path / "results", quiet=True, platform=fake_platform(log, fabric_args),
                      features={"recorder": recording_feature(log, queues)},
                      workloads={"writer": recording_workload(log, fail_at)})


def test_rounds_run_in_order_and_each_summary_is_written_once(tmp_path, summary_writes, capsys):
    log, fabric_args = [], []
    out = run_fake(tmp_path, "incast.yaml", log, fabric_args)
    names = ["drop-tail", "ecn-k20", "pfc", "ecn-pfc"]
    expected = ["plan 1", "lock", "fabric up", "after_fabric"]
    for i in range(4):
        expected += [f"before {i}", f"run {i} options {i}", f"after {i}", f"workload summary {i}",
                     f"feature summary {i}", f"plots {i}"]
    expected += ["after_rounds", "fabric down", "unlock", "finish [0, 1, 2, 3]"]
    assert log == expected
    assert fabric_args == [{"switch_queue": fabric_args[0]["switch_queue"], "host_queue": fabric_args[0]["host_queue"],
                            "datapath": OvsDatapath("user"), "routing": "ecmp", "recorder_plan": {"rounds": 4}}]
    dirs = [out / "rounds" / f"{i + 1:02d}-{n}" for i, n in enumerate(names)]
    assert sorted(summary_writes) == sorted(d / "summary.json" for d in dirs)     # once per round
    for i, d in enumerate(dirs):
        s = json.loads((d / "summary.json").read_text())
        assert s["index"] == i and s["recorder"] == {"counted": 10 * i} and s["raw"] == {"codes": {"h1.rx": 0}}
        renv = json.loads((d / "environment.json").read_text())
        assert renv["round"] == {"index": i, "name": names[i], "of": 4, "extra": True}
        assert renv["recorder_round"] == i and renv["recorder"] == {"planned": True}
    env = json.loads((out / "environment.json").read_text())
    assert env["recorder_round_per_round"] == dict(zip(names, range(4)))
    assert env["recorder"] == {"planned": True, "after_rounds": True}      # merged one level deep
    assert env["scale"]["measured_rtt_s"] == 0.001
    timings = json.loads((out / "timings.json").read_text())
    assert timings["reachability_s"] == 0.25 and timings["mininet_build_s"] == 0.5
    assert set(timings["rounds"]) == set(names) and timings["total_s"] >= timings["teardown_s"] >= 0
    assert (out / "topology.png").exists() and (out / "scenario.yaml").exists()
    assert capsys.readouterr().err.count("WARNING: round") == 4


def test_a_scenario_without_rounds_is_one_round_in_the_run_folder(tmp_path, summary_writes):
    log, fabric_args = [], []
    one = tmp_path / "one.yaml"
    one.write_text("name: one\n")
    out = run_fake(tmp_path, one, log, fabric_args)
    assert summary_writes == [out / "summary.json"]
    assert not (out / "rounds").exists()
    assert "finish [0]" not in " ".join(log)              # side by side only with rounds
    env = json.loads((out / "environment.json").read_text())
    assert env["recorder_round"] == 0 and "round" not in {k for k in env if k.endswith("_per_round")}


def test_a_failing_round_keeps_the_rounds_before_it_and_tears_down(tmp_path, summary_writes):
    log, fabric_args = [], []
    with pytest.raises(RuntimeError, match="agents failed"):
        run_fake(tmp_path, "incast.yaml", log, fabric_args, fail_at=2)
    assert [p.parent.name for p in summary_writes] == ["01-drop-tail", "02-ecn-k20"]
    assert log[-2:] == ["fabric down", "unlock"]
    assert "after 2" not in log


def test_queues_a_feature_adds_reach_the_features_after_it(tmp_path):
    log, fabric_args = [], []
    sc = load_scenario(SCENARIOS / "incast.yaml")
    first, second = recording_feature(log, queues=1), recording_feature(log)
    runner.run(sc, tmp_path, quiet=True, platform=fake_platform(log, fabric_args),
               features={"a": first, "b": second}, workloads={"writer": recording_workload(log)})
    assert log[:2] == ["plan 1", "plan 2"]


def test_each_round_gets_the_first_workload_that_wants_it(tmp_path):
    log, fabric_args = [], []
    sc = load_scenario(SCENARIOS / "incast.yaml")
    picky = recording_workload(log)

    class Odd(picky):
        name = "odd"

        @staticmethod
        def wants(sc, rnd):
            return rnd.name in ("ecn-k20", "ecn-pfc")
    runner.run(sc, tmp_path, quiet=True, platform=fake_platform(log, fabric_args),
               features={"recorder": recording_feature(log)}, workloads={"odd": Odd, "writer": picky})
    assert "finish [1, 3]" in log and "finish [0, 2]" in log


def test_analyze_rebuilds_every_round_from_its_raw_record(tmp_path, summary_writes):
    log, fabric_args = [], []
    out = run_fake(tmp_path, "incast.yaml", log, fabric_args)
    before = {p: p.read_text() for p in out.rglob("summary.json")}
    for p in before:
        p.unlink()
    (out / "report.html").unlink()
    log.clear()
    dirs = rounds.analyze(out, quiet=True, features={"recorder": recording_feature(log)},
                          workloads={"writer": recording_workload(log)})
    assert len(dirs) == 4 and {p: p.read_text() for p in out.rglob("summary.json")} == before
    assert "<h2>Round 4: ecn-pfc</h2>" in (out / "report.html").read_text()     # analyze wrote it again
    assert not any(x.startswith(("before", "after", "run ", "plan")) for x in log)   # nothing ran again
    assert log[-1] == "finish [0, 1, 2, 3]"


def test_a_run_stopped_after_its_rounds_keeps_them_and_analyze_finishes_it(tmp_path, monkeypatch):
    """A fault after the last round (as a Ctrl-C during teardown): every round is analysed already;
    analyze writes what only the end of the run writes (the rounds side by side)."""
    log, fabric_args = [], []
    monkeypatch.setenv("FABRICLAB_INJECT_FAULT", "after_rounds")
    with pytest.raises(RuntimeError, match="after_rounds"):
        run_fake(tmp_path, "incast.yaml", log, fabric_args)
    (out,) = (tmp_path / "results").iterdir()
    assert len(list(out.glob("rounds/*/summary.json"))) == 4 and "finish [0, 1, 2, 3]" not in log
    assert log[-2:] == ["fabric down", "unlock"]
    monkeypatch.delenv("FABRICLAB_INJECT_FAULT")
    for p in out.glob("rounds/*/summary.json"):
        p.unlink()
    rounds.analyze(out, quiet=True, features={"recorder": recording_feature(log)},
                   workloads={"writer": recording_workload(log)})
    assert log[-1] == "finish [0, 1, 2, 3]"


def test_analyze_refuses_a_folder_without_round_records(tmp_path):
    log, fabric_args = [], []
    out = run_fake(tmp_path, "incast.yaml", log, fabric_args)
    for p in out.rglob("round.json"):
        p.unlink()
    with pytest.raises(FileNotFoundError, match="no round has its raw record"):
        rounds.analyze(out, quiet=True, features={"recorder": recording_feature(log)},
                       workloads={"writer": recording_workload(log)})


def failing_feature(fail_round: int):
    class Checker(Feature):
        name = "checker"

        def round_options(self, rnd):
            return {"seen_by_workload": rnd.index}

        def failures(self, summary):
            return [f"port x-eth1: round {summary['index']} too slow"] if summary["index"] == fail_round else []

        def report(self, summary):
            return f"checker: {'FAILED' if summary['fidelity']['failures'] else 'ok'}"
    return Checker


@pytest.mark.parametrize("accept", [False, True])
def test_a_failed_fidelity_check_writes_every_round_then_fails_the_run_unless_accepted(tmp_path, accept, capsys):
    log, fabric_args = [], []
    sc = load_scenario(SCENARIOS / "incast.yaml")
    kw = dict(quiet=False, platform=fake_platform(log, fabric_args), features={"checker": failing_feature(1)},
              workloads={"writer": recording_workload(log)}, accept_unfaithful=accept)
    if accept:
        out = runner.run(sc, tmp_path / "results", **kw)
    else:
        with pytest.raises(UnfaithfulRun) as e:
            runner.run(sc, tmp_path / "results", **kw)
        out = e.value.out
        assert e.value.failures == [("ecn-k20", "port x-eth1: round 1 too slow")]
        assert "ecn-k20: port x-eth1: round 1 too slow" in str(e.value)
    assert log[-3:] == ["fabric down", "unlock", "finish [0, 1, 2, 3]"]      # all done before it is raised
    round_dirs = sorted((out / "rounds").iterdir())
    assert len(round_dirs) == 4                                                # every round ran and was written
    fid = [json.loads((d / "summary.json").read_text())["fidelity"] for d in round_dirs]
    assert [f["ok"] for f in fid] == [True, False, True, True]
    assert fid[1]["failures"] == ["port x-eth1: round 1 too slow"] and fid[1]["accepted_unfaithful"] is accept
    assert json.loads((out / "environment.json").read_text())["accept_unfaithful"] is accept
    o = capsys.readouterr()
    assert "FIDELITY CHECK FAILED: port x-eth1: round 1 too slow" in o.err
    assert o.out.count("checker: ok") == 3 and o.out.count("checker: FAILED") == 1
    # report.html is written before the run fails, and says which round failed and why
    assert (round_dirs[1] / "summary.txt").read_text() == f"round 1 in {round_dirs[1]}\nchecker: FAILED\n"
    page = (out / "report.html").read_text()
    assert "Unfaithful: 1 of 4 round(s) failed a fidelity check (ecn-k20)" in page
    assert "port x-eth1: round 1 too slow" in page and ("the run accepted them" in page) is accept
