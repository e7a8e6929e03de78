"""The project as a wheel: every subpackage, the BPF sources and the reports' templates are in
it, and the command's pure sub-commands (--help, schema, check, analyze, plot) run from it in a
fresh virtual environment that has the pure dependencies only (no pyroute2, no os-ken, no
Mininet), outside the checkout; ``analyze`` rebuilds a synthetic run's folder from it.

The wheel is built offline from a copy of the sources; the fresh environment sees the pure
dependencies already installed in .venv (linked, the live stack left out), so the test needs no
network and takes a few seconds."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "topologies", "controller", "traffic", "experiments")
#: what the pure sub-commands must run without (the live stack), as site-packages entries
LIVE_ONLY = ("pyroute2", "os_ken", "mininet")
#: the system site-packages .venv is made with (scripts/setup.sh: --system-site-packages)
SYSTEM_SITE = ("/usr/lib/python3/dist-packages",)
#: a run of one round on a small fabric; its plots are drawn by ``plot``, not by ``analyze``
TINY_RUN = ("name: tiny\nseed: 1\ntopology: {spines: 1, leaves: 2, hosts_per_leaf: 2}\n"
            "traffic: {pattern: incast, receiver: h1, senders: 2, response_bytes: 20000}\nmeasurement: {plots: false}\n")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built with no network and no build isolation from a copy of the sources."""
    src, dist = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src)
    for p in PACKAGES:
        shutil.copytree(REPO / p, src / p, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(dist), str(src)], check=True, capture_output=True, timeout=120)
    (whl,) = dist.glob("fabriclab-*.whl")
    return whl


@pytest.fixture(scope="module")
def pure_venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv (no system site-packages) with the wheel installed and .venv's packages linked,
    the live stack (:data:`LIVE_ONLY`) and the checkout's editable install left out. Returns its bin/."""
    root = tmp_path_factory.mktemp("venv")
    deps = root / "deps"
    deps.mkdir()
    # .venv's own packages first, then the system's it also sees (--system-site-packages: matplotlib's
    # pyparsing, say), as .venv resolves them
    for where in (Path(sysconfig.get_paths()["purelib"]), *map(Path, SYSTEM_SITE)):
        for e in sorted(where.iterdir()) if where.is_dir() else ():
            if e.name.startswith(LIVE_ONLY + ("__editable__", "fabriclab-", "distutils-precedence", "__pycache__")) \
                    or (deps / e.name).is_symlink():
                continue
            (deps / e.name).symlink_to(e)
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=60)
    (site,) = (root / "venv" / "lib").glob("python3*/site-packages")
    (site / "deps.pth").write_text(f"{deps}\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(root / "venv" / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True, timeout=120)
    return root / "venv" / "bin"


def clean_env(cwd: Path, pythonpath: Path | None = None) -> dict:
    """The environment of a command run from the test venv: nothing of the caller's (its
    PYTHONPATH would put the checkout first), ``pythonpath`` added when given."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "MPLCONFIGDIR": str(cwd)}
    return env | ({"PYTHONPATH": str(pythonpath)} if pythonpath else {})


def fabriclab(bin_dir: Path, *args: str, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(bin_dir / "fabriclab"), *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env=clean_env(cwd, pythonpath))


def synthetic_run(d: Path) -> Path:
    """A run folder of :data:`TINY_RUN` as the run loop leaves it before the analysis: scenario.yaml,
    round.json (the raw record), the agents' records of two complete flows, the sampler's files
    and environment.json (tests/unit/test_slowdown.py's synthetic round)."""
    import yaml

    from experiments import rounds
    from experiments.plan import check_against_fabric
    from experiments.scenario import validate
    from tests.unit.test_slowdown import _synthetic_round
    sc = validate(yaml.safe_load(TINY_RUN))
    layout = check_against_fabric(sc)
    _synthetic_round(rounds.run_context(sc, layout, {}, d, True), layout[2], d, 1000.0, lambda f: 0.05)
    (d / "scenario.yaml").write_text(TINY_RUN)
    (d / rounds.ROUND_RECORD).write_text(json.dumps(      # the ECN feature's record: no port marked
        {"index": 0, "name": sc.rounds[0].name, "workload": "flows", "options": {}, "raw": {"codes": {}},
         "features": {"ecn": {"counters": {}}}, "timings_s": {}, "stopped": None}))
    return d


def test_the_wheel_holds_every_subpackage_and_the_bpf_sources(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for p in PACKAGES:
        for init in (REPO / p).rglob("__init__.py"):
            assert str(init.relative_to(REPO)) in names, f"{init.relative_to(REPO).parent} is not in the wheel"
    for c in (REPO / "controller" / "bpf").glob("*.c"):
        assert f"controller/bpf/{c.name}" in names
    for y in (REPO / "experiments" / "scenarios").glob("*.yaml"):
        assert f"experiments/scenarios/{y.name}" in names
    templates = sorted((REPO / "experiments" / "templates").glob("*.html.j2"))     # the reports' pages
    assert len(templates) >= 3
    for t in templates:
        assert f"experiments/templates/{t.name}" in names, f"{t.name} is not in the wheel"


def test_the_pure_commands_run_from_the_wheel_without_the_live_stack(pure_venv, tmp_path):
    py = pure_venv / "python"
    probe = subprocess.run([str(py), "-c", "import experiments, importlib.util as u; print(experiments.__file__); "
                            f"print([m for m in {LIVE_ONLY!r} if u.find_spec(m)])"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60, env=clean_env(tmp_path))
    where, live = probe.stdout.splitlines()
    assert "site-packages" in where and str(REPO) not in where, where      # the wheel's copy, not the checkout
    assert live == "[]", f"the test venv has {live}"

    res = fabriclab(pure_venv, "--help", cwd=tmp_path)
    assert res.returncode == 0 and "analyze" in res.stdout, res.stderr
    res = fabriclab(pure_venv, "schema", cwd=tmp_path)
    assert res.returncode == 0 and json.loads(res.stdout)["title"], res.stderr
    shutil.copy(REPO / "experiments" / "scenarios" / "incast.yaml", tmp_path / "mine.yaml")
    res = fabriclab(pure_venv, "check", "mine.yaml", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    (tmp_path / "bad.yaml").write_text("name: bad\ntopology: {kind: spineleaf, spines: -1}\n")
    res = fabriclab(pure_venv, "check", "bad.yaml", cwd=tmp_path)
    assert res.returncode == 2 and "topology.spines" in res.stderr, res.stdout + res.stderr


def test_analyze_and_plot_rebuild_a_results_folder_from_the_wheel(pure_venv, tmp_path):
    """``analyze`` rebuilds a run's folder from its raw files and ``plot`` draws its plots, with
    none of the live stack; both write its report.html from the wheel's templates."""
    run = synthetic_run(tmp_path / "run")
    res = fabriclab(pure_venv, "analyze", "--quiet", str(run), cwd=tmp_path)
    assert res.returncode == 0 and "analysed 1 round(s)" in res.stdout, res.stdout + res.stderr
    for f in ("summary.json", "summary.txt", "flows.csv", "queues.csv", "ports.csv", "topology.png", "report.html"):
        assert (run / f).is_file() and (run / f).stat().st_size > 0, f
    assert json.loads((run / "summary.json").read_text())["flows"]["all_complete"] is True
    assert "<h1>tiny</h1>" in (run / "report.html").read_text(encoding="utf-8")

    (run / "report.html").unlink()
    res = fabriclab(pure_venv, "plot", str(run), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    written = [Path(line) for line in res.stdout.split()]
    assert {"fct_cdf.png", "queue_depth.png", "report.html"} <= {p.name for p in written}
    assert all(p.parent == run and p.stat().st_size > 0 for p in written), written
    assert '<section class="plot" data-file="fct_cdf.png">' in (run / "report.html").read_text(encoding="utf-8")
