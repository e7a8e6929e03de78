"""Mininet's own command line with fabriclab's topologies, switch and controller.

    controller (python -m controller.main --topo SPEC, or osken-manager controller/app.py with
    [fabriclab] options)  +  mn --custom topologies/mn_custom.py --topo SPEC --switch fabriclab
    --controller fabriclab --test pingall

`mn`, when it meets an error or Ctrl-C, runs Mininet's clean-up, which kills processes by name
(killall ... ping, controllers, ...): not acceptable on a shared machine. So the host-lane tests
load the `mn` program without running its ``__main__`` block (:func:`run_mn`) and call its
``MininetRunner`` inside their own ``try``/``finally``; what they create is recorded as it is
created (experiments.state.RunState: the topology's bridge and interface names, the controller's
pid, every Mininet node's shell pid) and removed by those names and ids, even after an error.
The VM lane also runs the `mn` program itself, where its clean-up is harmless (a throwaway VM).
Each test checks that nothing is left: no bridge, no `-eth` link, none of its processes, and no
``fabriclab-map-*.json`` temporary file.
"""
import glob
import json
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from mininet.log import setLogLevel

from experiments.fabric import port_listening
from experiments.state import RunState, proc_start_time
from topologies.spec import build

from .conftest import PY, ROOT, assert_clean, chosen_datapath

OF_PORT = 6653
MN_CUSTOM = str(ROOT / "topologies" / "mn_custom.py")
#: One Spine-Leaf: the Fat-Tree and the 4x8 Spine-Leaf build their Topo from the same fabric model,
#: which tests/unit/test_mn_custom.py checks for every spec.
SPEC = "spineleaf,2,2,2"


def map_files(folder) -> set[str]:
    """The controller's former temporary map files in ``folder``."""
    return set(glob.glob(os.path.join(str(folder), "fabriclab-map-*.json")))


def run_mn(argv: list[str], record) -> dict:
    """Run Mininet's `mn` program with ``argv`` in this process, without its ``__main__`` block
    (whose error handler runs Mininet's clean-up: killall and pkill by name). ``record(pid, what)``
    is called with each node's shell pid as Mininet creates it; every node shell still running
    when `mn` returns or raises is ended (SIGHUP to its process group, as Mininet does) and
    reaped. Returns, if the run made a ``pingAll``, ``{"ploss": percent lost, "datapath_types":
    {bridge: its OVS datapath_type}}``. Raises whatever `mn` raised (SystemExit for a bad
    argument)."""
    mn = shutil.which("mn") or "/usr/bin/mn"
    saved_argv, saved_path = sys.argv, list(sys.path)
    out, nodes = {}, []

    def created(node, what):
        nodes.append(node)
        record(node.pid, f"{what} {node.name}")
        return node

    try:
        runner = runpy.run_path(mn, run_name="fabriclab_mn")["MininetRunner"]
        mn_globals = runner.begin.__globals__   # the module's own namespace (run_path returns a copy)
        base = mn_globals["Mininet"]

        class RecordingMininet(base):
            """Mininet that records each node's shell pid the moment the node exists."""

            def addHost(self, *a, **kw):
                return created(super().addHost(*a, **kw), "mn host")

            def addSwitch(self, *a, **kw):
                return created(super().addSwitch(*a, **kw), "mn switch shell")

            def addController(self, *a, **kw):
                return created(super().addController(*a, **kw), "mn controller shell")

            def pingAll(self, *a, **kw):
                out["datapath_types"] = {sw.name: subprocess.run(
                    ["ovs-vsctl", "--timeout=5", "get", "bridge", sw.name, "datapath_type"],
                    capture_output=True, text=True).stdout.strip().strip('"') for sw in self.switches}
                out["ploss"] = super().pingAll(*a, **kw)
                return out["ploss"]

        mn_globals["Mininet"] = RecordingMininet
        sys.argv = ["mn", *argv]
        runner()
    finally:
        # the shells still running, ours by the Popen objects Mininet made: every one after an error,
        # the controller's after a clean run (Mininet's RemoteController.stop does nothing); an
        # interactive bash ignores SIGTERM, so Mininet's own SIGHUP to the shell's process group
        for node in nodes:
            shell = getattr(node, "shell", None)
            if shell is not None and shell.poll() is None:
                node.terminate()
                try:
                    shell.wait(5)
                except subprocess.TimeoutExpired:
                    shell.kill()
                    shell.wait()
        sys.argv, sys.path[:] = saved_argv, saved_path
        setLogLevel("output")   # mn set "info" for this process
    return out


def start_controller(argv: list[str], tmp_path: Path, state: RunState) -> subprocess.Popen:
    """Start the controller ``argv`` from the repository root with its temporary folder in
    ``tmp_path`` (so a temporary file it made would be seen), record its pid, and wait until it
    listens on 6653 (AssertionError with its log if it dies or does not within 30 s)."""
    assert not port_listening(OF_PORT), "another program listens on 6653 already"
    log = open(tmp_path / "controller.log", "w")
    ctl = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                           env=dict(os.environ, TMPDIR=str(tmp_path)))
    log.close()
    state.add_process(ctl.pid, "controller")
    deadline = time.monotonic() + 30
    while not port_listening(OF_PORT):
        assert ctl.poll() is None, (tmp_path / "controller.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "controller not listening after 30 s"
        time.sleep(0.05)
    return ctl


def stop(ctl: subprocess.Popen) -> None:
    """SIGTERM the controller we started (by its Popen, i.e. its pid) and reap it."""
    if ctl.poll() is None:
        ctl.terminate()
        try:
            ctl.wait(10)
        except subprocess.TimeoutExpired:
            ctl.kill()
            ctl.wait()


def controller_argv(how: str, tmp_path: Path) -> list[str]:
    """The two recipes: ``python -m controller.main --topo``, and the osken-manager one (fabriclab's
    port of it, controller.manager) with the app's options half on the command line, half in a
    configuration file."""
    ready = tmp_path / "ready"
    if how == "controller.main":
        return [PY, "-m", "controller.main", "--topo", SPEC, "--ready-file", str(ready), "--rest-port", "0"]
    conf = tmp_path / "fabriclab.conf"
    conf.write_text(f"[DEFAULT]\nofp_listen_host = 127.0.0.1\nofp_tcp_listen_port = {OF_PORT}\n\n"
                    f"[fabriclab]\nready_file = {ready}\nrest_port = 0\n")
    return [PY, "-m", "controller.manager", "--config-file", str(conf), "controller/app.py", "--fabriclab-topo", SPEC]


def check_ready(tmp_path: Path) -> None:
    """The controller configured every switch of the fabric without an OpenFlow error."""
    ready = tmp_path / "ready"
    assert ready.exists(), "controller never configured every switch: " + (tmp_path / "controller.log").read_text()[-2000:]
    rec = json.loads(ready.read_text())
    assert len(rec["switches"]) == len(build(SPEC).switches) and rec["openflow_errors"] == []


def check_pingall(res: dict, tmp_path: Path) -> None:
    """pingall lost nothing, every bridge ran on the datapath the probe chooses, and the controller
    configured every switch."""
    assert res.get("ploss") == 0, res
    want = "netdev" if chosen_datapath() == "user" else ""   # "": the kernel datapath (system)
    assert set(res["datapath_types"].values()) == {want}, res
    check_ready(tmp_path)


@pytest.mark.lane("host", reason="the VM lane runs the mn program itself (below) and the osken-manager recipe")
@pytest.mark.parametrize("how", ["controller.main", "osken-manager"])
def test_mn_recipe_pingall_without_mns_cleanup(tmp_path, how):
    check_pingall(run_recipe_in_process(tmp_path, how), tmp_path)


@pytest.mark.lane("vm", reason="the kernel datapath; the host lane runs both recipes on the userspace one")
def test_osken_manager_recipe_on_the_kernel_datapath(tmp_path):
    assert chosen_datapath() == "kernel"
    check_pingall(run_recipe_in_process(tmp_path, "osken-manager"), tmp_path)


@pytest.mark.lane("host", reason="teardown by recorded names and pids does not depend on the kernel")
def test_an_error_inside_mn_leaves_nothing(tmp_path):
    """`mn` raises once its network is up (an unknown test after pingall): nothing is left, all
    removed by the recorded names and pids where `mn` itself would have run Mininet's clean-up."""
    removed = {}
    with pytest.raises(Exception, match="Test nosuchtest is unknown"):
        run_recipe_in_process(tmp_path, "controller.main", test="pingall+nosuchtest", removed=removed)
    assert sorted(removed["bridges"]) == sorted(s.name for s in build(SPEC).switches), removed


def run_recipe_in_process(tmp_path: Path, how: str, test: str = "pingall", removed: dict | None = None) -> dict:
    """Start the controller recipe ``how`` (:func:`controller_argv`) and run ``mn --custom
    topologies/mn_custom.py --topo SPEC --switch fabriclab --controller fabriclab --test TEST``
    in this process (:func:`run_mn`), everything recorded in a RunState; stop the controller and
    let the RunState remove what is left, by name and pid, whether `mn` returned or raised; then
    assert that nothing is left (:func:`check_nothing_left`). Returns :func:`run_mn`'s result;
    ``removed``, if given, receives what the RunState removed (experiments.state.cleanup_record)."""
    fabric = build(SPEC)
    bridges = [s.name for s in fabric.switches]
    tmp_before = map_files(tempfile.gettempdir())
    recorded: list[dict] = []
    state = RunState(f"test-mn-cli-{os.getpid()}")
    try:
        with state:
            # the bridges' own devices too: on the userspace datapath each bridge has a tap device of its name
            state.claim(bridges, fabric.interface_names() + bridges)
            ctl = start_controller(controller_argv(how, tmp_path), tmp_path, state)
            try:
                return run_mn(["--custom", MN_CUSTOM, "--topo", SPEC, "--switch", "fabriclab",
                               "--controller", f"fabriclab,ip=127.0.0.1,port={OF_PORT}", "--test", test],
                              state.add_process)
            finally:
                stop(ctl)
                recorded[:] = state.rec["processes"]
    finally:
        if removed is not None:
            removed.update(state.final_report or {})
        check_nothing_left(tmp_path, recorded, tmp_before)


def check_nothing_left(tmp_path: Path, recorded: list[dict], tmp_before: set[str]) -> None:
    """No bridge, no -eth link, no process of this test (recorded, or naming ``tmp_path``), no
    temporary map file (in ``tmp_path``, the controller's TMPDIR, or new in the system's)."""
    # the controller, 4 hosts, 4 switch shells, the shell Mininet gives its controller object
    assert len(recorded) == 1 + 4 + 4 + 1, recorded
    assert [p for p in recorded if proc_start_time(p["pid"]) == p["start_time"]] == []
    assert_clean(str(tmp_path))
    assert map_files(tmp_path) == set() and map_files(tempfile.gettempdir()) <= tmp_before


@pytest.mark.lane("vm", reason="the mn program's own clean-up kills processes by name: only in the throwaway VM")
def test_mn_program_pingall_with_fabriclab_switch(tmp_path):
    """The recipe exactly as a user types it: the `mn` program, the controller.main recipe."""
    assert chosen_datapath() == "kernel"
    tmp_before = map_files(tempfile.gettempdir())
    with RunState(f"test-mn-cli-{os.getpid()}") as state:
        ctl = start_controller(controller_argv("controller.main", tmp_path), tmp_path, state)
        try:
            r = subprocess.run(["mn", "--custom", MN_CUSTOM, "--topo", SPEC, "--switch", "fabriclab",
                                "--controller", "fabriclab", "--test", "pingall"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=600)
            out = r.stdout + r.stderr
            assert r.returncode == 0, out[-2000:]
            assert "Results: 0% dropped" in out, out[-2000:]
            check_ready(tmp_path)
        finally:
            stop(ctl)
    assert_clean(str(tmp_path))
    assert map_files(tmp_path) == set() and map_files(tempfile.gettempdir()) <= tmp_before
