"""Bad scenario files, tried as a new user would through the command line: each ends with exit 2,
one line of bounded size naming the key, quickly, and nothing written (`check`, and `run` into an
empty results folder). The command runs in this process (experiments.cli.main, from the
repository root, its stdout and stderr captured), as the console script and `python -m
experiments` run it: one test checks that both are the same command, each in its own process."""
import contextlib
import io
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from experiments.cli import main

REPO = Path(__file__).resolve().parents[2]

#: 453 bytes of YAML whose aliases expand to 9^8 = 43 million list items (a "billion laughs")
ALIAS_BOMB = "name: bomb\ntraffic:\n  sender_hosts: &a9 [" + ", ".join(["x"] * 9) + "]\n" + "".join(
    f"  x{i}: &a{8 - i} [" + ", ".join([f"*a{9 - i}"] * 9) + "]\n" for i in range(8))


@dataclass
class Result:
    """What the command did: its exit code and what it printed."""
    returncode: int
    stdout: str
    stderr: str


def cli(*args) -> tuple[Result, float]:
    """Run ``fabriclab ARGS`` in this process from the repository root; (result, seconds)."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    t0 = time.monotonic()
    os.chdir(REPO)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
    finally:
        os.chdir(here)
    return Result(code, out.getvalue(), err.getvalue()), time.monotonic() - t0


def test_the_console_script_and_python_m_experiments_are_the_same_command(tmp_path):
    """The command in its own process, both ways: the same one-line refusal, exit 2."""
    bad = write(tmp_path, "name: n\ntraffic: {sendrs: 3}\n")
    script = Path(sys.executable).with_name("fabriclab")
    runs = [[sys.executable, "-m", "experiments", "check", str(bad)]]
    if script.exists():            # installed by make setup (pip install -e .)
        runs.append([str(script), "check", str(bad)])
    for argv in runs:
        res = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
        assert res.returncode == 2 and res.stderr.strip().count("\n") == 0, (argv, res.stderr[-2000:])
        assert "scenario key 'traffic.sendrs'" in res.stderr, res.stderr


def refused(path: Path, key: str, tmp_path: Path, run_too: bool = True) -> str:
    """Assert that `check` (and `run`, as root) refuse ``path`` naming ``key``; return the line."""
    res, took = cli("check", str(path))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, (res.returncode, res.stderr[-2000:])
    assert f"scenario key '{key}'" in lines[0], lines[0]
    assert len(lines[0]) < 700 and took < 20, (len(lines[0]), took)
    if run_too and os.geteuid() == 0:
        out = tmp_path / "results"
        out.mkdir(exist_ok=True)
        res, _ = cli("run", str(path), "--results", str(out), "--quiet")
        assert res.returncode == 2 and f"scenario key '{key}'" in res.stderr, res.stderr[-2000:]
        assert list(out.iterdir()) == []                                   # nothing started or written
    return lines[0]


def write(tmp_path, text, name="s.yaml", mode="w"):
    p = tmp_path / name
    with open(p, mode) as f:
        f.write(text)
    return p


def test_not_utf8(tmp_path):
    line = refused(write(tmp_path, b"name: caf\xe9\n", mode="wb"), "<file>", tmp_path)
    assert "not UTF-8" in line


def test_nested_five_thousand_lists_deep(tmp_path):
    refused(write(tmp_path, "name: deep\nrounds: " + "[" * 5000 + "]" * 5000 + "\n"), "<file>", tmp_path)


def test_nested_deeper_than_the_limit_names_where(tmp_path):
    refused(write(tmp_path, "name: deep\nrounds: " + "[" * 40 + "]" * 40 + "\n"), "rounds" + "[0]" * 32, tmp_path)


def test_alias_bomb_is_refused_quickly_with_a_short_message(tmp_path):
    assert len(ALIAS_BOMB) < 600
    line = refused(write(tmp_path, ALIAS_BOMB), "<file>", tmp_path)
    assert "aliases" in line


@pytest.mark.parametrize("text, key", [
    ("name: n\ntraffic: {timeout_s: .nan}\n", "traffic.timeout_s"),
    ("name: n\nmeasurement: {sample_hz: .nan}\n", "measurement.sample_hz"),
    ("name: n\nmeasurement: {sample_hz: .inf}\n", "measurement.sample_hz"),
    ("name: n\nqueues: {buffer_packets: 100}\npfc: {watchdog: {timeout_s: .inf}}\n", "pfc.watchdog.timeout_s"),
    ("name: n\necn: {profile: {red: {kmin_packets: 5, kmax_packets: 50, pmax: .nan}}}\n", "ecn.profile.red.pmax"),
])
def test_nan_and_infinity_are_not_numbers_in_range(tmp_path, text, key):
    refused(write(tmp_path, text), key, tmp_path)


def test_a_fabric_no_machine_can_build(tmp_path):
    line = refused(write(tmp_path, "name: huge\ntopology: {spines: 64, leaves: 250, hosts_per_leaf: 250}\n"),
                   "topology", tmp_path)
    assert "1024" in line


def test_a_duplicate_key_names_it(tmp_path):
    text = "name: dup\ntraffic: {senders: 4}\nqueues: {buffer_packets: 50}\ntraffic: {senders: 2}\n"
    line = refused(write(tmp_path, text), "traffic", tmp_path)
    assert "lines 2 and 4" in line
    refused(write(tmp_path, "name: dup\ntraffic:\n  senders: 4\n  senders: 5\n"), "traffic.senders", tmp_path)


def test_not_a_regular_file(tmp_path):
    refused(Path("/dev/zero"), "<file>", tmp_path, run_too=False)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    refused(fifo, "<file>", tmp_path, run_too=False)            # refused without opening: no block


def test_a_file_too_large(tmp_path):
    refused(write(tmp_path, "name: big\n" + "#" * (2 << 20) + "\n"), "<file>", tmp_path, run_too=False)


def test_a_long_value_is_quoted_short(tmp_path):
    line = refused(write(tmp_path, "name: n\ntraffic: {pattern: " + "x" * 100_000 + "}\n"), "traffic.pattern", tmp_path)
    assert len(line) < 400


def test_an_error_is_named_where_it_was_written_not_under_rounds(tmp_path):
    text = "name: r\necn: {ports: {leaf9-eth1: off}}\nrounds: [{name: a}, {name: b}]\n"
    refused(write(tmp_path, text), "ecn.ports.leaf9-eth1", tmp_path)


def test_analyze_a_folder_that_is_not_results(tmp_path):
    """`analyze` on a folder that is not a run's results: exit 2, one line, nothing written."""
    res, _ = cli("analyze", str(tmp_path))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "not a results folder" in lines[0], res.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text, key", [
    ("name: r\ntraffic: {sendrs: 3}\n", "traffic.sendrs"),            # edited into an invalid scenario
    ("name: r\nname: s\n", "name"),                                    # a key twice: not the second silently
    (": bad: [\n", "<file>"),                                          # not YAML
    (b"name: r\xff\n", "<file>"),                                      # not UTF-8
])
def test_analyze_a_folder_whose_recorded_scenario_does_not_parse(tmp_path, text, key):
    """A results folder whose scenario.yaml does not parse (edited, or by an earlier version):
    exit 2, one line naming the file and the key, nothing written; read under the same limits
    as a scenario file."""
    rec = tmp_path / "scenario.yaml"
    rec.write_bytes(text if isinstance(text, bytes) else text.encode())
    (tmp_path / "environment.json").write_text("{}")
    res, _ = cli("analyze", str(tmp_path))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-2000:]
    assert "scenario.yaml" in lines[0] and f"'{key}'" in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["environment.json", "scenario.yaml"]


def test_check_on_a_comparison_checks_every_run_of_it(tmp_path):
    """`check` on a comparison file checks the comparison (every fabric x traffic run), not a scenario."""
    res, _ = cli("check", "experiments/scenarios/compare-topologies.yaml")
    assert res.returncode == 0 and "valid comparison of" in res.stdout, res.stdout + res.stderr
    bad = write(tmp_path, "name: c\nfabrics: {sl: {kind: spineleaf, spinez: 2}}\ntraffic: {p: {pattern: permutation}}\n")
    res, _ = cli("check", str(bad))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and "'fabrics.sl.spinez'" in lines[0], res.stderr[-2000:]


def test_plot_of_a_missing_folder_is_one_line(tmp_path):
    res, _ = cli("plot", str(tmp_path / "nowhere"))
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0 and "no such results folder" in res.stderr
    (tmp_path / "elsewhere").mkdir()             # a folder, but no results in it
    res, _ = cli("plot", str(tmp_path / "elsewhere"))
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0, res.stderr
    assert "not a results folder (no summary.json, rounds.json, study.json or comparison.json in it)" in res.stderr


def test_a_study_with_a_misspelt_variants_is_checked_as_a_study(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: s\nbase: {name: b}\nvariant: {a: {}}\nseeds: 2\n")
    res, _ = cli("check", str(f))
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0, res.stderr
    assert "'variant': unknown key" in res.stderr and "variants" in res.stderr, res.stderr


def test_a_study_with_a_bad_variant_key_is_refused_before_anything_starts(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: s\nbase: {name: b}\nvariants: {a: {hosts: {tcp_ecnn: 1}}}\nseeds: 2\n")
    res, _ = cli("check", str(f))
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0, res.stderr
    assert "variants.a.hosts.tcp_ecnn" in res.stderr
    res, _ = cli("study", str(f), "--results", str(tmp_path / "res"))
    assert res.returncode == 2 and "variants.a.hosts.tcp_ecnn" in res.stderr
    assert not (tmp_path / "res").exists()


#: rate-controller plug-ins a new user might write: (file name, text or None for no file, key, what the line says)
BAD_PLUGINS = [
    ("missing.py", None, "roce.cc.plugin", "cannot read it"),
    ("syntax.py", "from traffic.ratecontrol import RateController\nclass Mine(RateController)\n    name = 'mine'\n",
     "roce.cc.plugin", "syntax error at line 2"),
    ("empty.py", "RATE = 10e6\n", "roce.cc.plugin", "defines no subclass of traffic.ratecontrol.RateController"),
    ("half.py", "from traffic.ratecontrol import RateController\nclass Mine(RateController):\n    name = 'mine'\n",
     "roce.cc.plugin", "class Mine has no from_job"),
    ("zero.py", "from traffic.ratecontrol import RateController\nclass Mine(RateController):\n    name = 'mine'\n"
                "    @classmethod\n    def from_job(cls, job):\n        return cls()\n"
                "    def rate_bps(self):\n        return 0\n", "roce.cc.plugin", "rate_bps() returned 0"),
]


@pytest.mark.parametrize("name, text, key, says", BAD_PLUGINS, ids=[b[0] for b in BAD_PLUGINS])
def test_a_broken_rate_controller_plugin_is_one_line_naming_the_key_and_the_file(tmp_path, name, text, key, says):
    cc = tmp_path / name
    if text is not None:
        cc.write_text(text)
    line = refused(write(tmp_path, f"name: n\ntraffic: {{transport: roce}}\nroce: {{cc: {{plugin: {cc}}}}}\n"),
                   key, tmp_path)
    assert str(cc) in line and says in line, line
    # the same file named by a round
    line = refused(write(tmp_path, f"name: n\ntraffic: {{transport: roce}}\nrounds:\n  - {{name: a}}\n"
                                   f"  - {{name: b, roce: {{cc: {{plugin: {cc}}}}}}}\n", name="r.yaml"),
                   "rounds[1].roce.cc.plugin", tmp_path, run_too=False)
    assert str(cc) in line and says in line, line


def test_the_shipped_aimd_plugin_checks_from_the_repository_root(tmp_path):
    s = write(tmp_path, "name: n\ntraffic: {transport: roce}\nroce: {cc: {plugin: docs/examples/aimd_cc.py}}\n"
                        "rounds: [{name: aimd}, {name: dcqcn, roce: {mode: dcqcn}}]\n")
    res, _ = cli("check", str(s))
    assert res.returncode == 0 and "is valid" in res.stdout, res.stdout + res.stderr
