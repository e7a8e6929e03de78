"""The agents' end barrier: an agent that is done says FINISHED; once every agent has said so or
ended, the runner tells each one still running END (experiments.live.Agents.wait and
EndBarrier); the agent's side reads it (traffic.roce.EndBarrier). Real processes and pipes, no
root."""
import io
import os
import subprocess
import sys
import time

from experiments.live import ROUND_STOP, Agents
from traffic.roce import EndBarrier

#: A stand-in agent: READY, the start line, then (after ``DELAY`` s) FINISHED, then it waits for
#: END on stdin (exit 0) or gives up after 30 s (exit 3): how a RoCE agent behaves at its end.
FINISHER = ("import sys, time; print('READY', flush=True); sys.stdin.readline(); time.sleep(float(sys.argv[1])); "
            "print('FINISHED', flush=True); t = time.monotonic(); line = sys.stdin.readline(); "
            "raise SystemExit(0 if line.strip() == 'END' and time.monotonic() - t < 30 else 3)")


class _State:
    """The run's record of processes, as far as Agents.kill uses it."""

    def forget_processes(self, pids):
        pass


def _start(agents: Agents, name: str, argv: list[str]) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    agents.procs.append((name, p))
    return p


def _run(agents: Agents) -> tuple[dict, float]:
    ROUND_STOP.clear()                      # as the runner does at every round's start
    try:
        agents.wait_ready(timeout_s=20)
        agents.release(time.time())
        t0 = time.monotonic()
        codes = agents.wait(time.time() + 40)
        return codes, time.monotonic() - t0
    finally:
        agents.kill()


def test_every_agent_finished_gets_end_at_once():
    agents = Agents(lf=None, state=_State())
    for i, delay in enumerate((0.2, 0.6, 1.0)):
        _start(agents, f"h{i}.roce", [FINISHER, str(delay)])
    codes, took = _run(agents)
    assert codes == {"h0.roce": 0, "h1.roce": 0, "h2.roce": 0}, codes
    assert took < 10, took                  # the last says FINISHED after 1 s; without END, 30 s


def test_end_waits_for_an_agent_that_never_says_finished_to_end():
    # an agent outside the barrier (a TCP agent) holds it until it has ended; then END goes out
    agents = Agents(lf=None, state=_State())
    _start(agents, "h0.roce", [FINISHER, "0.1"])
    other = _start(agents, "h1.rx", ["import sys, time; print('READY', flush=True); sys.stdin.readline(); "
                                     "time.sleep(2); print('a line of its own', flush=True)"])
    codes, took = _run(agents)
    assert codes == {"h0.roce": 0, "h1.rx": 0}, codes
    assert other.returncode == 0 and 1.5 < took < 10, took


def test_no_end_while_one_agent_is_still_busy():
    # one agent finished at once, one that keeps working: the finished one hears no END while the
    # other runs, so both are still running at the deadline, 3 s on, and are killed there
    agents = Agents(lf=None, state=_State())
    done = _start(agents, "h0.roce", [FINISHER, "0"])
    _start(agents, "h1.roce", ["import sys, time; print('READY', flush=True); sys.stdin.readline(); time.sleep(30)"])
    agents.wait_ready(timeout_s=20)
    agents.release(time.time())
    ROUND_STOP.clear()
    try:
        codes = agents.wait(time.time() + 3)
        assert codes["h0.roce"] != 0 and codes["h1.roce"] != 0, codes     # both killed at the deadline
    finally:
        agents.kill()
    assert done.returncode is not None


def test_the_agent_side_says_finished_once_and_reads_end():
    r, w = os.pipe()
    out = io.StringIO()
    b = EndBarrier(out, r)
    assert not b.watching()
    b.arrive()
    b.arrive()
    assert out.getvalue() == "FINISHED\n" and b.watching()
    os.write(w, b"EN")
    assert not b.read()
    os.write(w, b"D\n")
    assert b.read() and b.ended and not b.watching()
    os.close(w)
    os.close(r)


def test_the_agent_side_stops_watching_when_the_runner_is_gone():
    r, w = os.pipe()
    b = EndBarrier(io.StringIO(), r)
    b.arrive()
    os.close(w)
    assert not b.read() and b.closed and not b.ended and not b.watching()
    os.close(r)
