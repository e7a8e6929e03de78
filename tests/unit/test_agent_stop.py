"""A round stopped early (the watcher saw its emulation break): the TCP agents end on SIGTERM
and still write what they measured, each unfinished flow marked "stopped by the runner"; the
run loop escalates to SIGKILL for an agent that does not end (experiments.live.Agents). Real
sockets over loopback, no root."""
import json
import signal
import subprocess
import sys
import time

from experiments.live import ROUND_STOP, STOP_GRACE_S, Agents
from tests.unit.test_udp_agent import REPO, _agent, _ready_then_release


def _tcp_port() -> int:
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _pair(tmp_path):
    port = _tcp_port()
    deadline = time.time() + 60
    rx = _agent({"role": "receiver", "port": port, "expect_flows": 1, "deadline_unix_s": deadline,
                 "out": str(tmp_path / "rx.json")})
    tx = _agent({"role": "sender", "deadline_unix_s": deadline, "out": str(tmp_path / "tx.json"),
                 "flows": [{"dst_ip": "127.0.0.1", "port": port, "duration_s": 50, "flow_id": 0}]})
    _ready_then_release(rx, tx)
    time.sleep(1.0)
    return rx, tx


def test_a_tcp_sender_stopped_by_sigterm_writes_what_it_sent(tmp_path):
    rx, tx = _pair(tmp_path)
    t0 = time.monotonic()
    tx.send_signal(signal.SIGTERM)
    assert tx.wait(5) == 0, tx.stderr.read()
    assert time.monotonic() - t0 < 1.0
    (sent,) = json.loads((tmp_path / "tx.json").read_text())["flows"]
    assert sent["bytes_sent"] > 0 and sent["error"] == "stopped by the runner while sending", sent
    assert rx.wait(5) == 0, rx.stderr.read()       # the sender's exit closed the flow: the receiver ends


def test_a_tcp_receiver_stopped_by_sigterm_writes_what_it_received(tmp_path):
    rx, tx = _pair(tmp_path)
    try:
        t0 = time.monotonic()
        rx.send_signal(signal.SIGTERM)
        assert rx.wait(5) == 0, rx.stderr.read()
        assert time.monotonic() - t0 < 1.0
        got = json.loads((tmp_path / "rx.json").read_text())
        assert not got["complete"] and got["flows"][0]["bytes"] > 0, got
    finally:
        tx.kill()
        tx.wait()


def test_a_stopped_round_kills_an_agent_that_ignores_sigterm_after_the_grace():
    agents = Agents(lf=None, state=None)
    p = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                          "signal.SIG_IGN); print('ok', flush=True); time.sleep(30)"],
                         cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ok"
    agents.procs.append(("h1.tx", p))
    ROUND_STOP.clear()
    ROUND_STOP.request("h1-eth0: replaced")
    try:
        t0 = time.monotonic()
        codes = agents.wait(time.time() + 30)
        took = time.monotonic() - t0
        assert codes["h1.tx"] == -signal.SIGKILL and STOP_GRACE_S - 0.1 <= took < STOP_GRACE_S + 1.5, (codes, took)
    finally:
        ROUND_STOP.clear()
        if p.poll() is None:
            p.kill()


def test_waiting_gives_up_on_the_rest_once_one_agent_has_failed_for_all():
    """A plug-in that raised in one agent: the others are killed at once, not waited for until
    the round's deadline."""
    agents = Agents(lf=None, state=None)
    quick = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"], cwd=REPO)
    slow = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], cwd=REPO) for _ in range(2)]
    agents.procs += [("h5.roce", quick), ("h1.roce", slow[0]), ("h6.roce", slow[1])]
    asked = []
    try:
        # the failed agent has ended before the wait starts, so give_up is asked once, while a slow
        # agent runs (a quick one still starting up under a loaded CPU made it ask twice)
        quick.wait(30)
        t0 = time.monotonic()
        codes = agents.wait(time.time() + 30, give_up=lambda: asked.append(1) or quick.poll() is not None)
        assert time.monotonic() - t0 < 5 and len(asked) == 1
        assert codes == {"h5.roce": 1, "h1.roce": -signal.SIGKILL, "h6.roce": -signal.SIGKILL}
    finally:
        for p in slow:
            if p.poll() is None:
                p.kill()


def test_agents_are_waited_for_on_descriptors_past_1024():
    # a k=8 Fat-Tree's 128 hosts' agents hold three pipes each: their descriptors pass 1024, where
    # select() raises "filedescriptor out of range"; the wait for READY must not care
    import os
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        import pytest
        pytest.skip(f"the hard descriptor limit ({hard}) is below 1200")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    filler = []
    try:
        while not filler or filler[-1] < 1030:
            filler.append(os.open(os.devnull, os.O_RDONLY))
        agents = Agents(lf=None, state=None)
        p = subprocess.Popen([sys.executable, "-c", "print('READY', flush=True)"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        agents.procs.append(("h1.rx", p))
        assert p.stdout.fileno() > 1024
        agents.wait_ready(timeout_s=20)
        p.wait(10)
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
