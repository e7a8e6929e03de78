"""Live: what the set-up and a run leave running keeps none of its caller's descriptors above 2
(`flock LOCK make setup` once left Open vSwitch holding LOCK for as long as it ran) and leads a
session of its own. A marker file held open on a descriptor above 2 is given to the set-up (with
Open vSwitch stopped first, so that the set-up really starts it) and to a run; afterwards (during the
run's traffic) no process but the caller holds it. The starters themselves are unit-tested in
tests/unit/test_detached_start.py."""
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.unit.test_detached_start import held  # noqa: F401 (the fixture: a marker file on an inheritable fd)

from .conftest import ROOT, assert_clean, ovs_bridges, small_scenario, start_run

OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"
PIDFILES = {name: Path(f"/var/run/openvswitch/{name}.pid") for name in ("ovsdb-server", "ovs-vswitchd")}



def holders(path: str) -> list[int]:
    """Pids of every process on the machine with a descriptor open on ``path``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == path:
                    found.append(int(pid))
                    break
            except OSError:
                pass
    return found


def ovs_pids() -> dict:
    """Open vSwitch's daemons: name -> pid (from their pid files), absent when not running."""
    out = {}
    for name, f in PIDFILES.items():
        try:
            pid = int(f.read_text())
            os.kill(pid, 0)
            out[name] = pid
        except (OSError, ValueError):
            pass
    return out


@pytest.mark.lane("host", reason="the VM's guest starts Open vSwitch itself, before any caller could hand it "
                                 "a descriptor; the set-up script runs on the host")
def test_setup_starts_open_vswitch_without_the_callers_descriptors(held, figure):
    """Open vSwitch stopped, then scripts/setup.sh (what `make setup` runs) with a marker held open
    on a descriptor above 2: it starts ovsdb-server and ovs-vswitchd anew, and afterwards no process
    but this one holds the marker. Open vSwitch is left running."""
    fd, path = held
    assert ovs_bridges() == [], "a fabric is up: stopping Open vSwitch would break it"
    # stopped as the set-up would start it (systemd would take an ovs-ctl stop for a service still up)
    stop = (["systemctl", "stop", "openvswitch-switch"] if Path("/run/systemd/system").is_dir()
            else [OVS_CTL, "stop"])
    subprocess.run(stop, check=True, capture_output=True, timeout=60)
    assert ovs_pids() == {}
    t0 = time.monotonic()
    p = subprocess.run(["bash", "scripts/setup.sh"], cwd=ROOT, pass_fds=(fd,), capture_output=True, text=True,
                       timeout=600)
    figure("setup_s", round(time.monotonic() - t0, 2))
    assert p.returncode == 0 and "starting Open vSwitch" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
    started = ovs_pids()
    assert set(started) == set(PIDFILES), started
    assert holders(path) == [os.getpid()], [(pid, Path(f"/proc/{pid}/cmdline").read_bytes()[:120])
                                            for pid in holders(path)]
    for pid in started.values():          # each daemon and its --monitor parent: a session apart from ours
        for q in (pid, int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])):
            assert os.getsid(q) != os.getsid(0), (q, os.getsid(q))


@pytest.mark.lane("host", reason="which descriptors a started process keeps does not depend on the kernel")
def test_a_runs_processes_keep_none_of_the_callers_descriptors(tmp_path, held, figure):
    """A run started with the marker on a descriptor above 2: during its traffic no process but the
    run's own (and this one) holds the marker, and every process the run started (the controller,
    the queue sampler, the agents, Mininet's host shells) leads its own session. SIGTERM ends it."""
    fd, path = held
    t0 = time.monotonic()
    proc, results, lines = start_run(tmp_path, small_scenario(tmp_path, traffic={"response_bytes": 5_000_000}),
                                     pass_fds=(fd,))
    try:
        assert sorted(holders(path)) == sorted([os.getpid(), proc.pid]), holders(path)
        children = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == proc.pid]
        names = {c: _cmdline(c) for c in children}
        assert any("controller.main" in n for n in names.values()), names
        assert any("controller.qstats" in n for n in names.values()), names
        assert sum("traffic.agent" in n for n in names.values()) >= 3, names     # 2 senders, 1 receiver
        long_lived = [c for c, n in names.items()
                      if any(k in n for k in ("controller.main", "controller.qstats", "traffic.agent", "mininet:"))]
        assert all(os.getsid(c) == c for c in long_lived), {c: (os.getsid(c), names[c]) for c in long_lived}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    figure("run_s", round(time.monotonic() - t0, 1))
    assert_clean(str(results))


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
