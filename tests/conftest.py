"""Shared pytest set-up: the repository root is importable; kernel-feature and lane marks;
measured figures; the lane's closing lines.

A test that needs a kernel feature says so with ``@pytest.mark.kernel(...)``:
features are ``ovs_kernel_datapath``, ``ovs_userspace_datapath``,
``qdisc:<kind>`` and ``cc:<name>`` as the environment probe
(experiments/probe.py) finds them. Where a feature is missing the test is skipped
with the reason, and the run ends with the lane's probe summary, so the host
lane and the VM lane (``FABRICLAB_LANE=vm``) each say what they skipped.

A test that belongs to one lane only says so with ``@pytest.mark.lane("host",
reason=...)`` (or ``"vm"``); elsewhere it is skipped with that reason, so a
lane's report names every test it did not run and why (tests/README.md has
the table). A test that asserts on a measured, noisy figure records it with
the ``figure`` fixture: the figure is printed and stored in the JUnit XML, where
``make test-repeat`` collects it over repeated runs for a calibration.
The run ends with the lane's wall time and its fabric bring-ups (from the
fabric log that :class:`experiments.fabric.LiveFabric` appends to when
``FABRICLAB_FABRIC_LOG`` names a file; set here for the whole session, child
processes included).
"""
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LANE = os.environ.get("FABRICLAB_LANE", "host")
LANES = ("host", "vm")
_T0 = time.monotonic()

#: The VM lane runs what depends on the kernel; the unit tests are pure logic (no root, no kernel
#: feature) and run in the host lane only: under the VM lane's emulated CPU they took 138 s of a
#: lane that has to fit in CI's time budget.
collect_ignore = ["unit"] if LANE == "vm" else []
_probe_cache = {}


def kernel_features():
    """(feature set, probe dict) of this machine; probed once per session (root only)."""
    if "f" not in _probe_cache:
        from experiments import probe
        p = probe.probe()
        feats = {f"qdisc:{k}" for k, v in p["qdiscs"].items() if v}
        feats.add("ovs_kernel_datapath" if p["datapath"] == "kernel" else "ovs_userspace_datapath")
        cc = p["tcp_congestion_control"]
        feats |= {f"cc:{c}" for c in cc["available"] + cc["loadable"]}
        _probe_cache["f"] = (feats, p)
    return _probe_cache["f"]


def pytest_configure(config):
    config.addinivalue_line("markers", "kernel(*features): needs these kernel features (see tests/conftest.py)")
    config.addinivalue_line("markers", "lane(name, reason): runs in that lane only (host or vm; tests/README.md)")
    if "FABRICLAB_FABRIC_LOG" not in os.environ:
        fd, path = tempfile.mkstemp(prefix="fabriclab-fabric-log-", suffix=".jsonl")
        os.close(fd)
        os.environ["FABRICLAB_FABRIC_LOG"] = path
        config._fabriclab_own_log = path


def pytest_unconfigure(config):
    path = getattr(config, "_fabriclab_own_log", None)
    if path:
        Path(path).unlink(missing_ok=True)


def fabric_log() -> list[dict]:
    """The fabric log's records so far: an ``up`` and a ``down`` record per LiveFabric of this session,
    CLI runs included (experiments.fabric.FABRIC_LOG_ENV)."""
    try:
        lines = Path(os.environ["FABRICLAB_FABRIC_LOG"]).read_text().splitlines()
    except (KeyError, OSError):
        return []
    return [json.loads(l) for l in lines if l.strip()]


@pytest.fixture
def figure(record_property, request):
    """``figure(name, value)``: record one measured figure of this test (printed, and stored as a
    JUnit property ``name`` of the test case, which ``make test-repeat`` gathers into min / median
    / max over runs). ``value`` is a number (int or float); returns it."""
    def record(name: str, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"figure {name!r}: a number, not {value!r}")
        record_property(name, repr(value))
        print(f"figure {request.node.name} {name} = {value}")
        return value
    return record


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    for mark in item.iter_markers("lane"):
        want = mark.args[0] if mark.args else None
        if want not in LANES or not mark.kwargs.get("reason"):
            raise pytest.UsageError(f"{item.nodeid}: lane mark needs one of {LANES} and a reason")
        if want != LANE:
            pytest.skip(f"{want} lane only: {mark.kwargs['reason']}")
    for mark in item.iter_markers("kernel"):
        if os.geteuid() != 0:
            pytest.skip("kernel-feature tests need root")
        feats, p = kernel_features()
        missing = [f for f in mark.args if f not in feats]
        if missing:
            pytest.skip(f"{LANE} lane: kernel {p['kernel']} lacks {', '.join(missing)}")


def pytest_terminal_summary(terminalreporter):
    log = fabric_log()
    ups = [r for r in log if r["event"] == "up"]
    down_s = sum(r["down_s"] for r in log if r["event"] == "down")
    terminalreporter.write_sep("=", f"fabriclab {LANE} lane")
    terminalreporter.write_line(
        f"lane wall time {time.monotonic() - _T0:.0f} s; fabric bring-ups {len(ups)} "
        f"({sum(r['up_s'] for r in ups):.0f} s bringing up, {down_s:.0f} s tearing down)")
    if "f" not in _probe_cache:
        return
    feats, p = _probe_cache["f"]
    terminalreporter.write_line(
        f"kernel {p['kernel']}; datapath {p['datapath']}; qdiscs: "
        f"{' '.join(sorted(k for k, v in p['qdiscs'].items() if v))}; missing qdiscs: "
        f"{' '.join(sorted(k for k, v in p['qdiscs'].items() if not v)) or 'none'}; "
        f"congestion controls: {' '.join(sorted(set(p['tcp_congestion_control']['available'] + p['tcp_congestion_control']['loadable'])))}")
