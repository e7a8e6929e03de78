"""Processes fabriclab leaves running (Open vSwitch from the set-up; the controller, the queue
sampler and the agents of a run) keep none of their caller's descriptors above 2 and lead a session
of their own: the two starters, scripts/detached.sh and experiments.procs, checked here with a marker
file held open on a descriptor above 2. The live checks: the set-up's real Open vSwitch in
tests/integration/test_detached_daemons.py, a real run's processes in test_experiment.py's SIGKILL test."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.procs import host_spawn, spawn

REPO = Path(__file__).resolve().parents[2]

#: Prints the started process's descriptors (as paths) and whether it leads its own session.
REPORT = ("import json, os\n"
          "fds = {}\n"
          "for f in os.listdir('/proc/self/fd'):\n"
          "    try:\n"
          "        fds[f] = os.readlink(f'/proc/self/fd/{f}')\n"
          "    except OSError:\n"
          "        pass\n"
          "print(json.dumps({'fds': fds, 'leader': os.getsid(0) == os.getpid()}), flush=True)\n")


@pytest.fixture
def held(tmp_path):
    """A marker file open on a descriptor above 2, inheritable (as flock LOCK CMD leaves its lock)."""
    path = tmp_path / "held.lock"
    fd = os.open(path, os.O_CREAT | os.O_RDWR)
    os.set_inheritable(fd, True)
    yield fd, str(path)
    os.close(fd)


def test_detached_sh_closes_the_callers_descriptors_and_starts_a_session(held):
    """`detached CMD` in bash: CMD sees the marker on no descriptor and leads a session, while the
    calling shell does hold it (so the test would see a leak); CMD's exit status comes back."""
    fd, path = held
    script = (f"source scripts/detached.sh; readlink /proc/$$/fd/{fd}; "
              f"detached {sys.executable} -c \"$REPORT\"; detached false; echo status=$?")
    out = subprocess.run(["bash", "-c", script], cwd=REPO, pass_fds=(fd,), capture_output=True, text=True,
                         env={**os.environ, "REPORT": REPORT}, timeout=30)
    lines = out.stdout.splitlines()
    assert lines[0] == path, out                         # the shell itself inherited the marker
    got = json.loads(lines[1])
    assert path not in got["fds"].values() and set(got["fds"]) <= {"0", "1", "2", "3"}, got   # 3: listdir's own
    assert got["leader"], got
    assert lines[2] == "status=1", out


def test_setup_starts_open_vswitch_through_detached():
    """Every start of Open vSwitch in scripts/setup.sh goes through `detached`."""
    text = (REPO / "scripts" / "setup.sh").read_text()
    starts = [l for l in text.splitlines() if ("ovs-ctl start" in l or "systemctl start" in l)
              and not l.lstrip().startswith(("#", "echo"))]
    assert len(starts) == 2 and all("detached " in l for l in starts), starts
    assert "source scripts/detached.sh" in text


def test_spawn_closes_the_callers_descriptors_and_starts_a_session(held):
    """experiments.procs.spawn: the marker is on no descriptor of the child, which leads its session."""
    fd, path = held
    p = spawn([sys.executable, "-c", REPORT], stdout=subprocess.PIPE, text=True)
    got = json.loads(p.communicate(timeout=30)[0])
    assert path not in got["fds"].values() and got["leader"], got


@pytest.mark.parametrize("kw", [{"pass_fds": (5,)}, {"close_fds": False}, {"start_new_session": False}])
def test_spawn_refuses_to_keep_descriptors_or_the_session(kw):
    """Asking spawn to pass descriptors on or stay in the caller's session is a programming error."""
    with pytest.raises(ValueError):
        spawn(["true"], **kw)


class FakeHost:
    """A Mininet host's popen as Mininet has it: the keyword arguments go to subprocess.Popen."""

    def __init__(self):
        self.calls = []

    def popen(self, argv, **kw):
        self.calls.append((argv, kw))
        return "started"


def test_host_spawn_asks_popen_to_close_descriptors():
    """host_spawn passes close_fds=True to the host's popen (mnexec -d gives the session), and
    refuses a new session (mnexec, then a group leader, would fork) or kept descriptors."""
    h = FakeHost()
    assert host_spawn(h, ["x"], cwd="/", close_fds=True) == "started"
    assert h.calls == [(["x"], {"close_fds": True, "cwd": "/"})]
    for kw in ({"start_new_session": True}, {"pass_fds": (4,)}, {"close_fds": False}):
        with pytest.raises(ValueError):
            host_spawn(h, ["x"], **kw)


def test_the_runs_long_lived_processes_start_through_experiments_procs():
    """The controller, the sampler, the agents and the diagnosis probes start through experiments.procs:
    no bare Popen or host popen of a long-lived process is left in those modules."""
    for rel, starts in (("experiments/fabric.py", ["spawn("]), ("experiments/live.py", ["host_spawn(", "spawn("]),
                        ("experiments/diagnose.py", ["host_spawn("])):
        text = (REPO / rel).read_text()
        assert "subprocess.Popen(" not in text, rel
        assert all(s in text for s in starts), rel
    live = (REPO / "experiments" / "live.py").read_text()
    assert live.count(".popen(") == 1 and '.popen(["ping"' in live     # ping: a few packets, waited for
