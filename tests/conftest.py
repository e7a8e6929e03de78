"""Shared pytest set-up: the repository root is importable; kernel-feature marks.

A test that needs a kernel feature says so with ``@pytest.mark.kernel(...)``:
features are ``ovs_kernel_datapath``, ``ovs_userspace_datapath``,
``qdisc:<kind>`` and ``cc:<name>`` as the environment probe
(common/probe.py) finds them. Where a feature is missing the test is skipped
with the reason, and the run ends with the lane's probe summary, so the host
lane and the VM lane (``FABRICLAB_LANE=vm``) each say what they skipped.
"""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LANE = os.environ.get("FABRICLAB_LANE", "host")

#: The VM lane runs what depends on the kernel; the unit tests are pure logic (no root, no kernel
#: feature) and run in the host lane only: under the VM lane's emulated CPU they took 138 s of a
#: lane that has to fit in CI's time budget.
collect_ignore = ["unit"] if LANE == "vm" else []
_probe_cache = {}


def kernel_features():
    """(feature set, probe dict) of this machine; probed once per session (root only)."""
    if "f" not in _probe_cache:
        from common import probe
        p = probe.probe()
        feats = {f"qdisc:{k}" for k, v in p["qdiscs"].items() if v}
        feats.add("ovs_kernel_datapath" if p["datapath"] == "kernel" else "ovs_userspace_datapath")
        cc = p["tcp_congestion_control"]
        feats |= {f"cc:{c}" for c in cc["available"] + cc["loadable"]}
        _probe_cache["f"] = (feats, p)
    return _probe_cache["f"]


def pytest_configure(config):
    config.addinivalue_line("markers", "kernel(*features): needs these kernel features (see tests/conftest.py)")


def pytest_runtest_setup(item):
    for mark in item.iter_markers("kernel"):
        if os.geteuid() != 0:
            pytest.skip("kernel-feature tests need root")
        feats, p = kernel_features()
        missing = [f for f in mark.args if f not in feats]
        if missing:
            pytest.skip(f"{LANE} lane: kernel {p['kernel']} lacks {', '.join(missing)}")


def pytest_terminal_summary(terminalreporter):
    if "f" not in _probe_cache:
        return
    feats, p = _probe_cache["f"]
    terminalreporter.write_sep("=", f"fabriclab {LANE} lane")
    terminalreporter.write_line(
        f"kernel {p['kernel']}; datapath {p['datapath']}; qdiscs: "
        f"{' '.join(sorted(k for k, v in p['qdiscs'].items() if v))}; missing qdiscs: "
        f"{' '.join(sorted(k for k, v in p['qdiscs'].items() if not v)) or 'none'}; "
        f"congestion controls: {' '.join(sorted(set(p['tcp_congestion_control']['available'] + p['tcp_congestion_control']['loadable'])))}")
