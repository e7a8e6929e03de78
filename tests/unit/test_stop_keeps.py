"""Stopping a run keeps what it measured. The run loop on a fake platform (component tier): a
signal during a round's traffic stops the round (experiments.live.ROUND_STOP), the round is saved,
analysed and marked ``stopped``, no later round runs, the fabric goes down, the run's closing files
are written and the run ends with the signal's code; further signals are said and ignored; the
stop is bounded by experiments.live.STOP_LIMIT_S. Then real agents over loopback (no root): a TCP
and a UDP round stopped by SIGTERM as the run loop stops it (senders, then receivers) keep every
finished flow with its completion time and the UDP receiver's counts in flows.csv; a stopped
incast in blocks keeps its finished blocks."""
import csv
import json
import signal
import time

import pytest

from experiments import live, runner
from experiments.rounds import analyze
from experiments.analysis import collect_flows
from experiments.live import ROUND_STOP, SIGNAL_STOP
from experiments.scenario import load_scenario
from experiments.sections import SECTIONS
from experiments.tables import FLOW_COLUMNS, write_csv
from tests.unit.test_agent_stop import _tcp_port
from tests.unit.test_run_loop import SCENARIOS, fake_platform, recording_feature, recording_workload
from tests.unit.test_udp_agent import _agent, _free_port, _ready_then_release


def signalling_workload(log: list, at_round: int, signals: list, hang_s: float = 0.0, then=None):
    """The recording workload, whose round ``at_round`` sends the process ``signals`` (the first
    one, then the rest once the round is stopping) and waits for :data:`ROUND_STOP` as
    Agents.wait does; ``hang_s``: it then keeps working that long (a stop that overruns)."""
    base = recording_workload(log)

    class Signalling(base):
        def run_round(self, lf, state, rec):
            raw = super().run_round(lf, state, rec)
            if rec.index != at_round:
                return raw
            signal.raise_signal(signals[0])
            end = time.monotonic() + 5
            while not ROUND_STOP.is_set() and time.monotonic() < end:
                time.sleep(0.01)
            for sig in signals[1:]:
                signal.raise_signal(sig)
            log.append(f"stopped: {ROUND_STOP.reason}")
            end = time.monotonic() + hang_s
            while time.monotonic() < end:
                time.sleep(0.01)
            return raw
    return Signalling


def run_signalled(tmp_path, workload, log):
    sc = load_scenario(SCENARIOS / "incast.yaml")
    return runner.run(sc, tmp_path / "results", quiet=True, platform=fake_platform(log, []),
                      features={"recorder": recording_feature(log)}, workloads={"writer": workload})


@pytest.mark.parametrize("sig, exc, code", [(signal.SIGTERM, SystemExit, 143), (signal.SIGHUP, SystemExit, 129),
                                            (signal.SIGINT, KeyboardInterrupt, None)])
def test_a_signal_during_a_round_keeps_it_marked_stopped_and_ends_the_run_after_it(tmp_path, capfd, sig, exc, code):
    log = []
    before = signal.getsignal(sig)
    with pytest.raises(exc) as e:
        run_signalled(tmp_path, signalling_workload(log, 1, [sig]), log)
    if code is not None:
        assert e.value.code == code
    name = live.SIGNAL_NAMES[sig]
    assert f"stopped: {name}" in log
    # the stopped round ran its after-round hooks and was analysed; no later round began
    assert log[log.index(f"stopped: {name}") + 1:] == ["after 1", "workload summary 1", "feature summary 1", "plots 1",
                                                   "after_rounds", "fabric down", "unlock", "finish [0, 1]"]
    (out,) = (tmp_path / "results").iterdir()
    rounds = sorted((out / "rounds").iterdir())
    assert [d.name for d in rounds] == ["01-drop-tail", "02-ecn-k20"]
    first, stopped = (json.loads((d / "summary.json").read_text()) for d in rounds)
    assert first["stopped"] is None and stopped["stopped"] == name
    assert json.loads((rounds[1] / "round.json").read_text())["stopped"] == name
    assert f"stopped ({name}): the round's traffic was cut short" in (rounds[1] / "summary.txt").read_text()
    # the run's closing files, for the rounds that ran
    assert set(json.loads((out / "timings.json").read_text())["rounds"]) == {"drop-tail", "ecn-k20"}
    assert "stopped (" + name in (out / "report.html").read_text()
    err = capfd.readouterr().err
    assert f"fabriclab: {name}: stopping the round's traffic" in err
    assert f"the stopped round's results are kept in {rounds[1]}" in err and "2 of 4 round(s) ran" in err
    assert signal.getsignal(sig) is before
    # analyze rebuilds the same summary, still marked stopped
    want = (rounds[1] / "summary.json").read_text()
    for d in rounds:
        (d / "summary.json").unlink()
    analyze(out, quiet=True, features={"recorder": recording_feature([])},
                   workloads={"writer": recording_workload([])})
    assert (rounds[1] / "summary.json").read_text() == want


def test_a_second_and_third_ctrl_c_while_the_round_is_kept_are_said_and_ignored(tmp_path, capfd):
    log = []
    with pytest.raises(KeyboardInterrupt):
        run_signalled(tmp_path, signalling_workload(log, 0, [signal.SIGINT, signal.SIGINT, signal.SIGTERM]), log)
    assert log[-3:] == ["fabric down", "unlock", "finish [0]"]
    (out,) = (tmp_path / "results").iterdir()
    assert json.loads((out / "rounds" / "01-drop-tail" / "summary.json").read_text())["stopped"] == "SIGINT"
    err = capfd.readouterr().err
    assert err.count("ignored: still writing what the stopped round measured") == 2, err
    assert "SIGTERM ignored" in err


def test_a_stop_that_overruns_its_limit_unwinds_at_the_limit(tmp_path, monkeypatch, capfd, figure):
    """The workload keeps working 30 s after the signal: at STOP_LIMIT_S (here 1 s) the run unwinds
    as a signal outside a round does: the fabric goes down, the round is not analysed."""
    monkeypatch.setattr(SIGNAL_STOP, "limit_s", 1.0)
    log = []
    t0 = time.monotonic()
    with pytest.raises(SystemExit) as e:
        run_signalled(tmp_path, signalling_workload(log, 0, [signal.SIGTERM], hang_s=30), log)
    took = figure("signal_to_unwind_s", time.monotonic() - t0)
    # 10 runs beside a fabric run (2026-12-06): 1.025 / 1.036 / 1.058 s (min / median / max)
    assert e.value.code == 143 and took < 2.0, took
    assert log[-2:] == ["fabric down", "unlock"] and "workload summary 0" not in log
    assert "took more than 1 s: stopping without it" in capfd.readouterr().err


def test_a_signal_outside_a_round_unwinds_at_once(tmp_path):
    """Between rounds (a feature's before-round step) nothing is running to keep: the run unwinds
    where it is, as before."""
    log = []

    class Feature(recording_feature(log)):
        def before_round(self, lf, rnd):
            if rnd.index == 1:
                signal.raise_signal(signal.SIGTERM)
            return super().before_round(lf, rnd)
    sc = load_scenario(SCENARIOS / "incast.yaml")
    with pytest.raises(SystemExit) as e:
        runner.run(sc, tmp_path / "results", quiet=True, platform=fake_platform(log, []),
                   features={"recorder": Feature}, workloads={"writer": recording_workload(log)})
    assert e.value.code == 143 and log[-2:] == ["fabric down", "unlock"] and "before 1" not in log
    assert not SIGNAL_STOP.stopped


# --- real agents over loopback, stopped as experiments.live.Agents stops a round ---

def _stop(*procs):
    """SIGTERM each agent in turn (senders first, as Agents._stop_the_rest) and wait for it."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        assert p.wait(live.STOP_GRACE_S + 3) == 0, p.stderr.read()


def _flows_csv(tmp_path, plan):
    rows = collect_flows(tmp_path, plan, {}, sections=SECTIONS)
    write_csv(tmp_path / "flows.csv", FLOW_COLUMNS, rows)
    with open(tmp_path / "flows.csv") as f:
        return list(csv.DictReader(f))


def test_a_stopped_tcp_round_keeps_its_finished_flow_and_its_completion_time(tmp_path):
    port = _tcp_port()
    deadline = time.time() + 60
    rx = _agent({"role": "receiver", "port": port, "expect_flows": 2, "deadline_unix_s": deadline,
                 "out": str(tmp_path / "h1.rx.json")})
    tx = _agent({"role": "sender", "deadline_unix_s": deadline, "out": str(tmp_path / "h2.tx.json"),
                 "flows": [{"dst_ip": "127.0.0.1", "port": port, "bytes": 100_000, "flow_id": 0},
                           {"dst_ip": "127.0.0.1", "port": port, "duration_s": 50, "flow_id": 1}]})
    _ready_then_release(rx, tx)
    time.sleep(1.0)
    _stop(tx, rx)
    plan = [{"flow_id": i, "src": "h2", "dst": "h1", "src_ip": "127.0.0.1"} for i in (0, 1)]
    done, cut = _flows_csv(tmp_path, plan)
    assert done["complete"] == "True" and int(done["bytes_received"]) == 100_000 and float(done["fct_s"]) > 0, done
    assert done["error"] == ""
    assert cut["complete"] == "False" and int(cut["bytes_received"]) > 0, cut
    assert cut["error"] == "stopped by the runner while sending", cut


def test_a_stopped_udp_round_keeps_the_receivers_counts(tmp_path):
    """One UDP flow has ended (its end marker came), the other is cut short: the receiver, which
    was still waiting for the second, writes both flows' counts when it is stopped."""
    port = _free_port()
    deadline = time.time() + 60
    rx = _agent({"role": "udp-receiver", "port": port, "expect_flows": 2, "deadline_unix_s": deadline,
                 "out": str(tmp_path / "h1.rx.json")})
    short = _agent({"role": "udp-sender", "deadline_unix_s": deadline, "out": str(tmp_path / "h2.tx.json"),
                    "flows": [{"dst_ip": "127.0.0.1", "port": port, "bytes": 50_000, "flow_id": 0}]})
    long = _agent({"role": "udp-sender", "deadline_unix_s": deadline, "out": str(tmp_path / "h3.tx.json"),
                   "flows": [{"dst_ip": "127.0.0.1", "port": port, "duration_s": 50, "flow_id": 1}]})
    _ready_then_release(rx, short, long)
    assert short.wait(10) == 0, short.stderr.read()
    time.sleep(0.5)
    _stop(long, rx)
    plan = [{"flow_id": 0, "src": "h2", "dst": "h1", "src_ip": "127.0.0.1"},
            {"flow_id": 1, "src": "h3", "dst": "h1", "src_ip": "127.0.0.1"}]
    done, cut = _flows_csv(tmp_path, plan)
    assert done["complete"] == "True" and int(done["bytes_received"]) == 50_000, done
    assert int(done["datagrams_received"]) == int(done["datagrams_sent"]) and done["fct_s"] != "", done
    assert cut["complete"] == "False" and cut["error"] == "stopped by the runner while sending", cut
    assert 0 < int(cut["datagrams_received"]) <= int(cut["datagrams_sent"]), cut


def test_a_stopped_incast_in_blocks_keeps_its_finished_blocks(tmp_path):
    """The blocks client and servers end on SIGTERM as at their deadline: the client's record has
    the blocks that finished and says it was stopped; every server writes its record."""
    deadline = time.time() + 60
    ports = [_tcp_port() for _ in range(2)]
    servers = [_agent({"role": "blocks-server", "port": p, "bind_ip": "127.0.0.1", "deadline_unix_s": deadline,
                       "out": str(tmp_path / f"s{i}.json")}) for i, p in enumerate(ports)]
    for p in servers:
        assert p.stdout.readline().strip() == "READY"
    client = _agent({"role": "blocks-client", "block_bytes": 100_000, "blocks": None, "duration_s": 50,
                     "deadline_unix_s": deadline, "out": str(tmp_path / "c.json"),
                     "servers": [{"host": f"s{i}", "ip": "127.0.0.1", "port": p} for i, p in enumerate(ports)]})
    assert client.stdout.readline().strip() == "READY", client.stderr.read()
    start = time.time() + 0.2
    for p in [client, *servers]:
        p.stdin.write(f"{start}\n")
        p.stdin.flush()
    time.sleep(1.0)
    _stop(client, *servers)
    got = json.loads((tmp_path / "c.json").read_text())
    assert got["stopped_by"] == "stopped" and sum(b["complete"] for b in got["blocks"]) > 0, got["stopped_by"]
    assert all(json.loads((tmp_path / f"s{i}.json").read_text())["role"] == "blocks-server" for i in range(2))


def test_a_round_that_cannot_be_kept_still_ends_with_the_signals_code(tmp_path, capfd):
    """A workload that fails on what its stopped agents left (say, a record it needs is missing):
    the run says so and unwinds with the signal's exit (143), not as a failed run (1)."""
    log = []
    base = signalling_workload(log, 0, [signal.SIGTERM])

    class Failing(base):
        def summarize(self, rec):
            raise KeyError("h1.rx")
    with pytest.raises(SystemExit) as e:
        run_signalled(tmp_path, Failing, log)
    assert e.value.code == 143 and log[-2:] == ["fabric down", "unlock"]
    assert "the stopped round could not be kept (KeyError: 'h1.rx'); stopping without it" in capfd.readouterr().err
