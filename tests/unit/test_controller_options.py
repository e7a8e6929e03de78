"""The controller app takes its settings as os-ken configuration options (group [fabriclab]), as
Ryu apps take theirs: on the command line, in a configuration file, registered before or after
the arguments are parsed (a manager loads apps after parsing); a spec is built in memory, so no
temporary map file is written."""
import glob
import json
import os
import tempfile
import tomllib
from pathlib import Path

import pytest

from common.errors import SetupError
from controller import options
from controller.ofp import cfg

REPO = Path(__file__).resolve().parents[2]


def _map_files() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "fabriclab-map-*.json")))


def test_command_line_options():
    conf = cfg.ConfigOpts()
    options.register(conf)
    conf(args=["--fabriclab-topo", "spineleaf,2,2,2", "--fabriclab-ready-file", "/x/ready",
               "--fabriclab-routing", "single", "--fabriclab-rest-port", "0"], project="os_ken")
    s = options.settings(conf)
    assert s["topo"] == "spineleaf,2,2,2" and s["fabric_map"] is None and s["ready_file"] == "/x/ready"
    assert s["routing"] == "single" and s["rest_port"] is None
    m = options.fabric_map(s)
    assert (len(m["switches"]), len(m["hosts"])) == (4, 4)


def test_config_file_read_by_an_app_registered_after_parsing(tmp_path):
    """osken-manager parses its arguments, then loads the app, which registers its options."""
    fmap = tmp_path / "map.json"
    from topologies.spec import build
    fmap.write_text(json.dumps(build("fattree,4").to_map()))
    conf_file = tmp_path / "fabriclab.conf"
    conf_file.write_text(f"[fabriclab]\nfabric_map = {fmap}\nrest_port = 9000\n")
    conf = cfg.ConfigOpts()
    conf(args=["--config-file", str(conf_file)], project="os_ken")
    options.register(conf)      # too late for the command line: a configuration-file option
    s = options.settings(conf)
    assert s["fabric_map"] == str(fmap) and s["topo"] is None and s["rest_port"] == 9000
    assert s["routing"] == "ecmp"
    assert len(options.fabric_map(s)["switches"]) == 20


@pytest.mark.parametrize("args, word", [([], "neither"),
                                         (["--fabriclab-topo=fattree,4", "--fabriclab-fabric-map=/m.json"], "both")])
def test_exactly_one_fabric(args, word):
    conf = cfg.ConfigOpts()
    options.register(conf)
    conf(args=args, project="os_ken")
    with pytest.raises(SetupError, match=f"--fabriclab-topo and --fabriclab-fabric-map.*got {word}"):
        options.settings(conf)


def test_bad_option_values_are_refused_by_the_parser():
    conf = cfg.ConfigOpts()
    options.register(conf)
    with pytest.raises(SystemExit):   # oslo.config: "Invalid String(choices=...) value: random", exit 1
        conf(args=["--fabriclab-topo=fattree,4", "--fabriclab-routing=random"], project="os_ken")


def test_main_arguments_become_the_options():
    """controller.main passes its arguments to the app as the options (None left out)."""
    args = options.cli_args(topo="fattree,4", fabric_map=None, ready_file="/r", rest_port=0)
    assert args == ["--fabriclab-topo=fattree,4", "--fabriclab-ready-file=/r", "--fabriclab-rest-port=0"]
    with pytest.raises(KeyError):
        options.cli_args(fabric="x")


def test_the_app_builds_a_spec_in_memory(monkeypatch):
    """The app instantiated on parsed options: its map comes from the spec, no file is written."""
    import os_ken.cfg
    from controller.app import FabricController
    conf = cfg.ConfigOpts()
    options.register(conf)
    conf(args=["--fabriclab-topo=spineleaf,2,2,2", "--fabriclab-rest-port=0"], project="os_ken")
    monkeypatch.setattr(os_ken.cfg, "CONF", conf)
    before = _map_files()
    app = FabricController()
    assert (len(app.by_dpid), len(app.mac_of)) == (4, 4) and app.rest is None
    assert app.config["topo"] == "spineleaf,2,2,2"
    assert _map_files() == before


def test_osken_manager_is_installed_as_fabriclabs_port():
    """os-ken 4.2.2 ships no osken-manager; `make setup` installs controller.manager under that name."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["osken-manager"] == "controller.manager:main"
    from controller import manager
    assert callable(manager.main)


def test_a_forked_helper_of_the_controller_dies_on_sigterm_without_its_handler(tmp_path):
    """pyroute2 forks a helper per network namespace and ends it with SIGTERM: the controller's
    handler must not run there (it removed the faults from the forked copy, hung on a lock and
    kept the controller's listening sockets)."""
    import subprocess
    import sys
    code = (
        "import os, signal, sys, time\n"
        "import controller.main as m\n"
        "import controller.faultports as fp\n"
        "def hang(*a, **k):\n"
        "    time.sleep(60)\n"
        "fp.remove_everywhere = hang\n"
        "m.remove_everywhere = hang\n"
        "m.exit_on_sigterm()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    time.sleep(30)\n"
        "    os._exit(0)\n"
        "time.sleep(0.2)\n"
        "t0 = time.monotonic()\n"
        "os.kill(pid, signal.SIGTERM)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, round(time.monotonic() - t0, 1))\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    died_by_sigterm, took_s = res.stdout.split()
    assert died_by_sigterm == "True" and float(took_s) < 5, res.stdout
