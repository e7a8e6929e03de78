"""The run-state record does not take the caller's umask, and a record that root does not own, or
that others can write, is refused: a root run or `make clean` would kill the pids, delete the links
and write the sysctls it lists."""
import json
import os
import stat

import pytest

from common.errors import BusyError, SetupError
from experiments.state import RunState, clean_stale


def mode(p):
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.fixture()
def state_dir(tmp_path, monkeypatch):
    d = tmp_path / "state"
    monkeypatch.setenv("FABRICLAB_STATE_DIR", str(d))
    return d


def test_modes_are_private_whatever_the_umask(state_dir):
    old = os.umask(0)
    try:
        with RunState("umask-000"):
            assert mode(state_dir) == 0o700
            assert mode(state_dir / "state.json") == 0o600
            assert mode(state_dir / "lock") == 0o600
    finally:
        os.umask(old)


@pytest.mark.parametrize("what", ["dir-777", "record-666", "record-of-another-user"])
def test_a_record_others_could_have_written_is_refused(state_dir, what):
    state_dir.mkdir(mode=0o700)
    record = state_dir / "state.json"
    record.write_text(json.dumps({"processes": [{"pid": 1, "start_time": 0}], "interfaces": ["eth0"]}))
    os.chmod(record, 0o600)
    if what == "dir-777":
        os.chmod(state_dir, 0o777)
    elif what == "record-666":
        os.chmod(record, 0o666)
    else:
        if os.geteuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(record, 65534, 65534)
    for enter in (lambda: RunState("x").__enter__(), clean_stale):
        with pytest.raises(SetupError) as e:
            enter()
        assert "refusing the run-state record" in str(e.value)
    assert record.exists()                         # nothing acted on


def test_a_second_run_is_busy(state_dir):
    with RunState("first"):
        with pytest.raises(BusyError):
            RunState("second").__enter__()
        with pytest.raises(BusyError):
            clean_stale()


def test_reaped_agents_leave_the_record_and_running_ones_stay(state_dir):
    """A study's rounds start hundreds of agents: the record keeps only what still runs, so its
    size (and every write of it) does not grow with the rounds."""
    import subprocess
    import sys
    kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) for _ in range(3)]
    try:
        with RunState("agents") as rs:
            rs.add_processes([(k.pid, f"agent {i}") for i, k in enumerate(kids)])
            listed = lambda: [p["pid"] for p in json.loads((state_dir / "state.json").read_text())["processes"]]
            assert listed() == [k.pid for k in kids]
            for k in kids[:2]:
                k.kill()
                k.wait()
            rs.forget_processes([k.pid for k in kids[:2]])
            assert listed() == [kids[2].pid]
        assert kids[2].poll() is not None        # still recorded, so the run's cleanup killed it
    finally:
        for k in kids:
            k.kill()
            k.wait()
