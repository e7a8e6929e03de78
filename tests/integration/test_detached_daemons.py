"""Live: what the set-up and a run leave running keeps none of its caller's descriptors above 2
(`flock LOCK make setup` once left Open vSwitch holding LOCK for as long as it ran) and leads a
session of its own. A marker file held open on a descriptor above 2 is given to the set-up (with
Open vSwitch stopped first, so that the set-up really starts it); afterwards no process but the
caller holds it. A run's side is checked on a run another test starts anyway (during the traffic of
test_experiment.py's SIGKILL test: conftest's :func:`assert_run_detached`), which saves a fabric.
The starters themselves are unit-tested in tests/unit/test_detached_start.py."""
import os
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import ROOT, holders, ovs_bridges

OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"
PIDFILES = {name: Path(f"/var/run/openvswitch/{name}.pid") for name in ("ovsdb-server", "ovs-vswitchd")}


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
