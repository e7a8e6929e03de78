"""The `fabriclab` command: every sub-command's --help (examples and exit codes), usage errors
as one line with exit 2, shell completion, `check` on every kind of file and against this
machine's kernel, and the progress of long work."""
import copy
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import cli
from experiments.progress import Progress

REPO = Path(__file__).resolve().parents[2]

#: every sub-command
SUBCOMMANDS = ["run", "check", "compare", "study", "diagnose", "plot", "draw", "schema", "clean", "lab", "analyze", "ports"]


def run(capsys, *args):
    """``fabriclab ARGS`` in this process: (exit code, stdout, stderr)."""
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_top_help_lists_every_sub_command_with_examples_and_exit_codes(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    listed = out[out.index("Commands:"):out.index("Examples:")]
    for name in SUBCOMMANDS:
        assert f"\n  {name} " in listed, name
    assert "Examples:" in out and "_FABRICLAB_COMPLETE=bash_source fabriclab" in out
    for code_, meaning in cli.EXIT_CODES.items():
        assert f"{code_:<4} {meaning}" in out


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_each_sub_commands_help_shows_examples_of_itself_and_the_exit_codes(capsys, name):
    code, out, err = run(capsys, name, "--help")
    assert code == 0 and err == ""
    assert out.startswith(f"Usage: fabriclab {name}")
    examples = out[out.index("Examples:"):out.index("Exit codes:")]
    assert f"fabriclab {name}" in examples                     # each example is the command itself
    codes = out[out.index("Exit codes:"):]
    assert "\n    0    " in codes and "\n    2    " in codes and "-h, --help" in out
    if name in ("run", "compare", "study"):                       # the fabric runs: every code
        assert all(f"{c:<4} {m}" in codes for c, m in cli.EXIT_CODES.items())
    if name in ("plot", "draw", "schema", "analyze", "check"):    # files only: no run to fail
        assert "\n    1    " not in codes and "\n    3    " not in codes


def test_no_sub_command_prints_the_help_and_exits_2(capsys):
    code, out, _ = run(capsys)
    assert code == 2 and "Commands:" in out


@pytest.mark.parametrize("args, says", [
    (["frob"], "No such command 'frob'. (see: fabriclab --help)"),
    (["run", "--bogus"], "No such option '--bogus'. (see: fabriclab run --help)"),
    (["diagnose", "--inject", "some"], "(see: fabriclab diagnose --help)"),
    (["diagnose", "--seed", "x"], "'x' is not a valid integer"),
    (["plot"], "Missing argument 'RESULTS_DIR'"),
])
def test_a_usage_error_is_one_line_naming_the_help_and_exits_2(capsys, args, says):
    code, out, err = run(capsys, *args)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("fabriclab: ") and says in err, err


def test_shell_completion_completes_sub_commands_and_options():
    """Click's completion protocol, as bash calls it (`eval "$(_FABRICLAB_COMPLETE=bash_source fabriclab)"`)."""
    def complete(words: str, cword: int) -> str:
        env = {**os.environ, "PYTHONPATH": str(REPO), "_FABRICLAB_COMPLETE": "bash_complete",
               "COMP_WORDS": words, "COMP_CWORD": str(cword)}
        res = subprocess.run([sys.executable, "-c", "from experiments.cli import entry; entry()"], cwd=REPO,
                             env=env, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        return res.stdout
    assert complete("fabriclab ru", 1).split() == ["plain,run"]
    assert "plain,--accept-unfaithful" in complete("fabriclab run --acc", 2).split()
    assert "plain,--inject" in complete("fabriclab diagnose --", 2).split()
    res = subprocess.run([sys.executable, "-c", "from experiments.cli import entry; entry()"], cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO), "_FABRICLAB_COMPLETE": "bash_source"},
                         capture_output=True, text=True, timeout=60)
    assert "complete -o nosort -F _fabriclab_completion fabriclab" in res.stdout


def test_check_names_each_kind_of_file(capsys, monkeypatch):
    monkeypatch.setattr(cli.os, "geteuid", lambda: 1000)          # the kernel part needs root: left out here
    code, out, _ = run(capsys, "check", str(REPO / "experiments/scenarios/incast.yaml"))
    assert code == 0 and "incast.yaml is valid (what this kernel offers is checked as root" in out
    code, out, _ = run(capsys, "check", str(REPO / "experiments/scenarios/compare-topologies.yaml"))
    assert code == 0 and "is a valid comparison of" in out
    code, out, _ = run(capsys, "check", str(REPO / "experiments/studies/aa.yaml"))
    assert code == 0 and "is a valid study: 3 variants x 1 sweep point x 10 seeds = 30 cells" in out


@pytest.mark.skipif(os.geteuid() != 0, reason="the probe of this machine's qdiscs needs root")
def test_check_as_root_says_what_this_kernel_lacks_as_run_would(capsys, monkeypatch, tmp_path):
    """`check` refuses, as `run` would, a scenario whose ECN marker this kernel lacks (the probe's
    record with and without sch_red), naming the key; with it, the scenario is valid here."""
    from experiments import probe
    real = probe.probe()
    red = tmp_path / "red.yaml"
    red.write_text("name: red\necn: {marker: red, profile: {step: {k_packets: 20}}}\n")
    for has_red in (False, True):
        env = copy.deepcopy(real)
        env["qdiscs"]["red"] = has_red
        monkeypatch.setattr(probe, "probe", lambda env=env: env)
        code, out, err = run(capsys, "check", str(red))
        if has_red:
            assert code == 0 and "is valid; this machine can run it" in out, out + err
        else:
            assert code == 2 and err.count("\n") == 1, err
            assert ("red.yaml is valid, but this machine cannot run it: ecn.marker: red: this kernel has no sch_red"
                    in err), err
    cc = tmp_path / "cc.yaml"
    cc.write_text("name: cc\nhosts: {tcp_congestion_control: nosuchcc}\n")
    code, _, err = run(capsys, "check", str(cc))
    assert code == 2 and "hosts.tcp_congestion_control" in err, err


def test_plot_and_analyze_of_unreadable_folders_are_one_line_not_a_traceback(capsys, tmp_path):
    (tmp_path / "summary.json").write_text("{not json")
    code, _, err = run(capsys, "plot", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "cannot be read" in err and "Traceback" not in err, err
    code, _, err = run(capsys, "plot", str(tmp_path / "nowhere"))
    assert code == 2 and err == f"fabriclab: {tmp_path / 'nowhere'}: no such results folder\n"


def test_a_run_without_root_is_refused_after_the_scenario_is_checked(capsys, monkeypatch):
    monkeypatch.setattr(cli.os, "geteuid", lambda: 1000)
    code, _, err = run(capsys, "run", str(REPO / "experiments/scenarios/incast.yaml"))
    assert code == 2 and "this needs root" in err


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_prints_one_line_per_step_with_an_eta_when_not_a_terminal(capsys):
    with Progress("study cells", 4, lines=True, stream=io.StringIO()) as p:
        for i in range(4):
            p.advance(1, f"cell {i}")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and lines[0].startswith("fabriclab: study cells 1/4, ") and "ETA" in lines[0]
    assert lines[-1].endswith("ETA 0 s: cell 3")
    with Progress("rounds", 3, lines=False, stream=io.StringIO()) as p:      # a run prints its own lines
        p.advance(1, "x")
    assert capsys.readouterr().out == ""
    with Progress("rounds", 3, quiet=True, stream=_Tty()) as p:
        assert not p.bar


def test_progress_draws_a_bar_on_a_terminal_and_stops_it():
    p = Progress("rounds", 3, stream=_Tty())
    assert p.bar
    p.advance(1)
    assert p.done == 1 and p.eta_s() > 0
    p.close()
    assert not p.bar
    assert not Progress("rounds", 1, stream=_Tty()).bar         # one step: no bar


def test_check_a_labs_folder_checks_its_runs_and_its_template(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(cli.os, "geteuid", lambda: 1000)
    code, out, _ = run(capsys, "check", str(REPO / "labs" / "04-congestion"))
    assert code == 0 and "is lab 4 with 2 valid runs and 8 questions" in out
    code, _, err = run(capsys, "check", str(tmp_path))
    assert code == 2 and "not a scenario file or a lab's folder" in err
