"""The layers hold: import-linter's contracts (pyproject.toml, [tool.importlinter]) pass on the
tree, and they break on a deliberately added upward import or cycle (so the check can fail).
Function-local imports are only the listed slow or framework imports, each with its reason."""
import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "topologies", "controller", "traffic", "experiments")
LINT = Path(sys.executable).with_name("lint-imports")

#: (file, imported module) -> why it is imported inside a function and not at the top
LOCAL_IMPORTS_ALLOWED = {
    ("common/pfc.py", "scapy.contrib.mac_control"): "scapy loads in ~0.8 s; only frame building needs it",
    ("common/pfc.py", "scapy.layers.l2"): "scapy, as above",
    ("common/roce.py", "scapy.contrib.roce"): "scapy: the reference frames only",
    ("common/roce.py", "scapy.layers.inet"): "scapy, as above",
    ("common/roce.py", "scapy.layers.l2"): "scapy, as above",
    ("common/roce.py", "scapy.packet"): "scapy, as above",
    ("traffic/roce.py", "scapy.utils"): "scapy: only an agent that captures frames",
    ("experiments/analysis.py", "scipy.stats"): "scipy.stats loads in ~0.7 s; only the ECMP balance test",
    ("experiments/labs/bandwidth.py", "scipy.stats"): "scipy.stats loads in ~0.7 s; only lab 1's check fits a line",
    ("experiments/study.py", "experiments"): "a study's runs (the live fabric), statistics (scipy.stats, ~0.7 s) and "
                                             "report (matplotlib): `check` of a study file needs none of them",
    ("experiments/results.py", "pandas"): "pandas is optional: only experiments.results.load needs it",
    ("experiments/cli.py", "experiments"): "each subcommand loads its own modules: `check` in 0.3 s, not 0.65 s",
    ("experiments/cli.py", "controller"): "only the `ports` subcommand talks to a controller, as above",
    ("controller/main.py", "controller"): "os-ken patches the standard library as it loads: after argument parsing",
    ("controller/main.py", "controller.ofp"): "os-ken, as above",
}


def lint(root: Path, *contracts: str) -> subprocess.CompletedProcess:
    """Run lint-imports on the contracts in ``root``/pyproject.toml (only ``contracts``, by id,
    when given) with ``root`` on the path."""
    only = [a for c in contracts for a in ("--contract", c)]
    return subprocess.run([str(LINT), "--no-cache", "--no-logo", *only, str(root / "pyproject.toml")], cwd=root,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
                          capture_output=True, text=True, timeout=120)


def test_the_layer_contracts_are_kept():
    res = lint(REPO)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout


@pytest.fixture()
def tree_copy(tmp_path):
    """The five packages and pyproject.toml, copied to be broken on purpose."""
    for p in PACKAGES:
        shutil.copytree(REPO / p, tmp_path / p, ignore=shutil.ignore_patterns("__pycache__", "scenarios", "bpf"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    return tmp_path


@pytest.mark.parametrize("where, line, contract", [
    ("common/errors.py", "from experiments import runner", "layers"),             # upward
    ("common/ecn.py", "from experiments.scenario import load_scenario", "pure-models"),  # the schema in a model
    ("traffic/agent.py", "from controller import dataplane", "layers"),            # an agent on the data plane
    ("traffic/patterns.py", "import yaml", "agents-and-topologies"),               # parsing below the schema
    ("experiments/tables.py", "from experiments import analysis", "acyclic"),      # a cycle
    ("experiments/runner.py", "from experiments.features.pfc.feature import Pfc", "run-loop"),  # a feature by name
    ("controller/flowtables.py", "from controller import ofp", "flow-tables"),     # os-ken in the pure tables
    ("experiments/studyreport.py", "from experiments import live", "study-report"),  # a report off live state
    ("experiments/report.py", "from experiments import plot", "run-report"),       # a plot's caption by name
    ("experiments/analysis.py", "from experiments import live", "analysis-leaf"),  # analysis on the live fabric
    ("experiments/workloads/roce/report.py", "from experiments.workloads.roce import jobs", "analysis-leaf"),
])
def test_a_deliberate_violation_breaks_its_contract(tree_copy, where, line, contract):
    with open(tree_copy / where, "a") as f:
        f.write(f"\n{line}  # deliberately wrong\n")
    assert lint(tree_copy, contract).returncode == 1, lint(tree_copy, contract).stdout
    whole = lint(tree_copy)
    assert whole.returncode == 1 and "0 broken" not in whole.stdout, whole.stdout


def test_function_local_imports_are_only_the_listed_ones():
    found = {}
    for pkg in PACKAGES:
        for f in sorted((REPO / pkg).rglob("*.py")):
            tree = ast.parse(f.read_text())
            for fn in ast.walk(tree):
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for n in ast.walk(fn):
                        if isinstance(n, (ast.Import, ast.ImportFrom)):
                            mod = n.module if isinstance(n, ast.ImportFrom) else n.names[0].name
                            found[(str(f.relative_to(REPO)), mod)] = n.lineno
    unexplained = {k: v for k, v in found.items() if k not in LOCAL_IMPORTS_ALLOWED}
    assert not unexplained, f"imports inside functions (move them to the top, or list them with a reason): {unexplained}"
    stale = set(LOCAL_IMPORTS_ALLOWED) - set(found)
    assert not stale, f"listed but gone: {stale}"
