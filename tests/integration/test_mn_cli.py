"""Mininet's own command line with fabriclab's topologies and controller (issue 4, item 3).

    controller.main --topo SPEC  +  mn --custom topologies/mn_custom.py --topo SPEC ... --test pingall

Runs only in the VM lane: when `mn` meets an error it runs Mininet's clean-up,
which kills processes by name (killall ... ping, controllers, ...). That is
harmless inside the throwaway VM and not acceptable on a shared or user machine.
"""
import subprocess
import time

import pytest

from .conftest import PY, ROOT, assert_clean

pytestmark = pytest.mark.lane("vm", reason="mn's error clean-up kills processes by name: only in the throwaway VM")


# One Spine-Leaf: the Fat-Tree and the 4x8 Spine-Leaf (60 s each under the emulated CPU) build their
# Topo from the same fabric model, which tests/unit/test_mn_custom.py checks for every spec.
@pytest.mark.parametrize("spec", ["spineleaf,2,2,2"])
def test_mn_custom_topology_pingall_with_fabriclab_controller(tmp_path, spec):
    ready = tmp_path / "ready"
    log = open(tmp_path / "controller.log", "w")
    ctl = subprocess.Popen([PY, "-m", "controller.main", "--topo", spec, "--ready-file", str(ready)],
                           cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        time.sleep(2)
        assert ctl.poll() is None, (tmp_path / "controller.log").read_text()
        r = subprocess.run(["mn", "--custom", str(ROOT / "topologies" / "mn_custom.py"), "--topo", spec,
                            "--switch", "ovs,protocols=OpenFlow13", "--controller", "remote,ip=127.0.0.1,port=6653",
                            "--wait", "--test", "pingall"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
        out = r.stdout + r.stderr
        assert r.returncode == 0, out[-2000:]
        assert "Results: 0% dropped" in out, out[-2000:]
        assert ready.exists(), "controller never configured every switch"
    finally:
        ctl.terminate()
        ctl.wait(10)
        log.close()
    assert_clean(str(tmp_path))
