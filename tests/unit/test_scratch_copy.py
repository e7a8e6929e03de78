"""docs/architecture.md's "where new code goes" holds for every axis: in a temporary copy of the
sources, a throwaway topology, traffic pattern, fault kind, routing strategy, RoCE rate controller
and feature are each added as one file (or, where the table says so, one class in the registry's
own file) plus one registration, and nothing else. The copy's scenario model, schema and checks
take all six, a scenario using them is planned on its fabric, the topology is drawn, the generated
key reference is regenerated (as its own test asks a contributor to), and the unit tests of those
registries pass in the copy.

The copy holds the source packages and the unit tests, not the virtual environment; it runs with
this interpreter and ``PYTHONPATH`` set to the copy, so nothing of the checkout is imported."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "topologies", "controller", "traffic", "experiments", "tests", "docs")

#: file -> its whole text (a new file)
NEW_FILES = {
    "topologies/star.py": '''
        """``star``: one switch and its hosts (a throwaway kind)."""
        from __future__ import annotations

        from dataclasses import dataclass

        from common.params import F
        from topologies.base import NUM, Fabric, LinkSpec, Node, Topology, dpid_for, host_ip, host_mac


        @dataclass(frozen=True)
        class Star(Topology):
            """One leaf switch with ``hosts`` hosts."""
            KIND = "star"
            TITLE = "Star"
            LAYERS = ("leaf", "host")
            PARAMS = {"hosts": F((int,), 4, lo=2, hi=16), "host_rate_mbps": F(NUM, 10, lo=0.1, hi=1000)}
            MN_ARGS = ("hosts", "host_rate_mbps")
            hosts: int = 4
            host_rate_mbps: float = 10.0

            @property
            def n_hosts(self) -> int:
                return self.hosts

            @property
            def n_links(self) -> int:
                return self.hosts

            @property
            def n_groups(self) -> int:
                return 1

            def build(self) -> Fabric:
                fab = Fabric(kind=self.KIND, params={"hosts": self.hosts, "host_rate_mbps": self.host_rate_mbps,
                                                     "oversubscription": 1.0}, layers=self.LAYERS)
                fab.nodes.append(Node("hub1", "leaf", dpid=dpid_for("leaf", 1)))
                for h in range(1, self.hosts + 1):
                    fab.nodes.append(Node(f"h{h}", "host", mac=host_mac(1, h), ip=host_ip(1, h), leaf="hub1",
                                          group="hub1"))
                    fab.links.append(LinkSpec("hub1", h, f"h{h}", 0, self.host_rate_mbps))
                fab.check_names()
                return fab
        ''',
    "controller/faults/blackhole.py": '''
        """``blackhole``: a switch that drops every frame (a throwaway kind)."""
        from __future__ import annotations

        from common.params import F
        from controller.faults.base import Evidence, FaultSpec, FrameDrop, Injector, switch_ports


        class Blackhole(Injector):
            """A switch losing everything."""
            NAME = "blackhole"
            TITLE = "a switch that forwards nothing"
            TARGET = "switch"
            LAYER = "switch"
            PARAMS = {"frame_fraction": F((int, float), 1.0, lo=0.5, hi=1.0)}
            MECHANISM = "every receiving port of the switch drops (nearly) every frame"
            DIAGNOSIS_ORDER = 45

            @classmethod
            def recognise(cls, ev: Evidence):
                return None

            @classmethod
            def actions(cls, fabric_map: dict, spec: FaultSpec):
                return tuple(FrameDrop(spec.place, p["intf"], float(spec.params["frame_fraction"]), "none")
                             for p in switch_ports(fabric_map, spec.place, spec.ports))

            @classmethod
            def describe(cls, spec: FaultSpec) -> str:
                return f"{spec.place} drops everything"
        ''',
    "controller/routing/lowest.py": '''
        """``lowest``: of the equal-cost next hops, always the lowest port (a throwaway strategy)."""
        from __future__ import annotations

        from controller.routing.base import RoutingStrategy


        class Lowest(RoutingStrategy):
            """One path per destination: the lowest-numbered equal-cost port."""
            NAME = "lowest"
            TITLE = "the lowest equal-cost port"
            METHOD: dict = {}
            HASHED = False

            def next_hops(self):
                return {sw: {ip: ports[:1] for ip, ports in by_ip.items()}
                        for sw, by_ip in super().next_hops().items()}
        ''',
    "experiments/features/scratch.py": '''
        """A throwaway feature: it adds one line to every round's summary."""
        from __future__ import annotations

        from experiments.features.base import Feature


        class Scratch(Feature):
            """Marks every summary."""
            name = "scratch"

            def summarize(self, rnd, summary: dict) -> None:
                summary["scratch"] = {"seen": True}
        ''',
}

#: file -> (text to find, text it becomes): the registrations, and the classes the table puts in a
#: registry's own file (traffic patterns, rate controllers), appended at its end
EDITS = {
    "topologies/__init__.py": [
        ("from topologies.spineleaf import SpineLeaf\n", "from topologies.spineleaf import SpineLeaf\nfrom topologies.star import Star\n"),
        ("(SpineLeaf, FatTree, Dragonfly, RailOptimized)", "(SpineLeaf, FatTree, Dragonfly, RailOptimized, Star)")],
    "controller/faults/__init__.py": [
        ("from controller.faults.slow_host import SlowHost\n",
         "from controller.faults.slow_host import SlowHost\nfrom controller.faults.blackhole import Blackhole\n"),
        ("(Corrupt, Degrade, Drop, Flap, SlowHost)", "(Corrupt, Degrade, Drop, Flap, SlowHost, Blackhole)")],
    "controller/routing/registry.py": [
        ("register(Valiant)\n", "register(Valiant)\nfrom controller.routing.lowest import Lowest  # noqa: E402\nregister(Lowest)\n")],
    "experiments/features/registry.py": [
        ("from experiments.features.watch import ControlPlane\n",
         "from experiments.features.watch import ControlPlane\nfrom experiments.features.scratch import Scratch\n"),
        ("Forwarding, ScaledFabric)", "Forwarding, ScaledFabric, Scratch)")],
    "traffic/patterns.py": [(None, '''

        class Mirror(_PairPattern):
            """Host x sends to host N-1-x (a throwaway pattern)."""
            NAME = "mirror"

            @staticmethod
            def pairs(fabric, traffic, seed):
                names = [h.name for h in fabric.hosts]
                return [(a, b) for a, b in zip(names, reversed(names)) if a != b]

            @staticmethod
            def check(n_hosts, n_groups, traffic):
                return None if n_hosts >= 2 else ("pattern", "needs two hosts")


        PATTERNS[Mirror.NAME] = Mirror
        ''')],
    "traffic/ratecontrol.py": [(None, '''

        class HalfRate(FixedRate):
            """Half the line rate, open loop (a throwaway rate controller)."""
            name = "halfrate"

            @classmethod
            def from_job(cls, job):
                return cls(job["line_rate_mbps"] * 1e6 / 2)


        RATE_CONTROLLERS[HalfRate.name] = HalfRate
        ''')],
}

#: what the copy must accept: every throwaway in one scenario, and the rate controller in another
CHECK = '''
import json, sys
from pathlib import Path
from controller.faults import FAULTS
from controller.routing.registry import STRATEGIES
from experiments.features.registry import FEATURES
from experiments.plan import check_against_fabric
from experiments.scenario import validate
from experiments.schema_export import scenario_schema
from topologies import TOPOLOGIES
from traffic.patterns import PATTERNS
from traffic.ratecontrol import RATE_CONTROLLERS
sc = validate({"name": "scratch", "topology": {"kind": "star", "hosts": 4},
               "routing": {"mode": "lowest"}, "traffic": {"pattern": "mirror"},
               "faults": [{"kind": "blackhole", "switch": "hub1"}]})
fabric, fmap, plan, rounds, _ = check_against_fabric(sc)
roce = validate({"name": "rc", "topology": {"kind": "star"}, "traffic": {"transport": "roce", "senders": 2},
                 "roce": {"mode": "halfrate"}})
from experiments.draw import draw
draw(fmap, Path(sys.argv[1]) / "star.png", title="star")
text = json.dumps(scenario_schema())
print(json.dumps({"kinds": sorted(TOPOLOGIES), "faults": sorted(FAULTS), "routing": sorted(STRATEGIES),
                  "features": list(FEATURES)[-1], "patterns": "mirror" in PATTERNS, "cc": "halfrate" in RATE_CONTROLLERS,
                  "pairs": [[p["src"], p["dst"]] for p in plan], "roce_mode": roce.roce.mode,
                  "in_schema": all(w in text for w in ("star", "mirror", "lowest", "blackhole", "halfrate"))}))
'''

#: the copy's unit tests of those registries
TESTS = ("tests/unit/test_routing.py", "tests/unit/test_patterns.py", "tests/unit/test_ratecontrol.py",
         "tests/unit/test_scenario_schema.py", "tests/unit/test_troubleshooter.py", "tests/unit/test_spineleaf.py",
         "tests/unit/test_faults.py", "tests/unit/test_run_loop.py")


def scratch_copy(dest: Path) -> Path:
    """The sources and unit tests copied to ``dest`` with the six additions made; returns ``dest``."""
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__", "integration"))
    for name in ("pyproject.toml", "README.md", "Makefile"):
        shutil.copy(REPO / name, dest / name)
    if (REPO / "build").is_dir():
        shutil.copytree(REPO / "build", dest / "build")
    for rel, text in NEW_FILES.items():
        assert not (dest / rel).exists(), rel
        (dest / rel).write_text(textwrap.dedent(text).lstrip())
    for rel, edits in EDITS.items():
        s = (dest / rel).read_text()
        for old, new in edits:
            if old is None:
                s = s.rstrip("\n") + "\n" + textwrap.dedent(new)
            else:
                assert s.count(old) == 1, (rel, old)
                s = s.replace(old, new)
        (dest / rel).write_text(s)
    return dest


def in_copy(copy: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["PYTHONPATH"] = str(copy)
    return subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)


def test_each_axis_takes_a_new_kind_as_one_file_plus_one_registration(tmp_path):
    copy = scratch_copy(tmp_path / "src")
    changed = set(NEW_FILES) | set(EDITS)
    # one new file per axis, one registration per registry (the pattern's and the rate controller's
    # class is in its registry's file, as the table says)
    assert len(NEW_FILES) == 4 and len(EDITS) == 6 and len(changed) == 10
    res = in_copy(copy, "-c", CHECK, str(tmp_path))
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert "star" in got["kinds"] and "blackhole" in got["faults"] and "lowest" in got["routing"]
    assert got["features"] == "scratch" and got["patterns"] and got["cc"] and got["roce_mode"] == "halfrate"
    assert got["pairs"] == [["h1", "h4"], ["h2", "h3"], ["h3", "h2"], ["h4", "h1"]] and got["in_schema"]
    assert (tmp_path / "star.png").stat().st_size > 0
    # the generated key reference, regenerated as its test asks a contributor to
    res = in_copy(copy, "-m", "experiments", "schema", "--markdown")
    assert res.returncode == 0, res.stderr
    (copy / "docs" / "scenario-keys.md").write_text(res.stdout)
    assert "`topology.hosts`" in res.stdout and "mirror" in res.stdout
    tests = [t for t in TESTS if (copy / t).exists()]
    res = in_copy(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
