"""Host side of the VM lane: a hung or abandoned guest never stays running.

These boot the cached stock-kernel image (built by `make vm-image`), so they
run only where FABRICLAB_VM_IMAGE_TESTS=1 (`make vm-test` sets it), as root.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = [sys.executable, str(ROOT / "vm" / "run.py")]

pytestmark = pytest.mark.skipif(os.environ.get("FABRICLAB_VM_IMAGE_TESTS") != "1" or os.geteuid() != 0,
                                reason="boots the VM image: run by `sudo make vm-test`")


def qemu_pids() -> set[int]:
    out = subprocess.run(["pgrep", "-x", "qemu-system-x86"], capture_output=True, text=True).stdout
    out += subprocess.run(["pgrep", "-f", "^qemu-system-x86_64 "], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def test_shell_job_runs_on_the_stock_kernel(tmp_path):
    p = subprocess.run(RUN + ["shell", "--results", str(tmp_path), "--", "sh", "-c",
                              "uname -r; lsmod | grep -c openvswitch || modprobe openvswitch"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "status 0" in p.stdout


def test_timeout_kills_a_hung_guest(tmp_path):
    """A guest still running at the runner's timeout is killed, whatever it is doing then (15 s:
    under software emulation the guest may still be booting; 45 s until 2026-12-07, 30 s of the
    VM lane spent waiting)."""
    before = qemu_pids()
    t0 = time.monotonic()
    p = subprocess.run(RUN + ["shell", "--results", str(tmp_path), "--timeout-s", "15", "--", "sleep", "3600"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1
    assert "timed out after 15 s" in p.stderr
    assert time.monotonic() - t0 < 200
    assert qemu_pids() - before == set()


def test_killed_host_side_leaves_no_qemu(tmp_path):
    """SIGKILL of the host-side runner: qemu dies with it (PR_SET_PDEATHSIG)."""
    before = qemu_pids()
    proc = subprocess.Popen(RUN + ["shell", "--results", str(tmp_path), "--", "sleep", "3600"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (qemu_pids() - before):
        time.sleep(0.5)
    assert qemu_pids() - before, "qemu never started"
    time.sleep(3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and qemu_pids() - before:
        time.sleep(0.2)
    assert qemu_pids() - before == set()
