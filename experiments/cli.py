"""The ``fabriclab`` command (click); ``python -m experiments`` is the same command.

    fabriclab run [SCENARIO.yaml] [--results DIR]        run a scenario (default: the incast)
    fabriclab check FILE                                 validate a scenario, comparison or study file,
                                                         and (as root) check it against this kernel
    fabriclab compare [COMPARISON.yaml]                  the same traffic on several fabrics
    fabriclab study STUDY.yaml                           variants x seeds, compared per seed
    fabriclab diagnose [SCENARIO.yaml] [--inject random --seed N]   find a hidden fault
    fabriclab plot RESULTS_DIR                           redraw a results folder's plots
    fabriclab analyze RESULTS_DIR                        rebuild every derived file from the raw ones
    fabriclab draw SCENARIO.yaml [--out PNG]             draw the scenario's fabric (no root)
    fabriclab schema [--markdown]                        the scenario's JSON Schema (or key reference)
    fabriclab ports [SWITCH]                             a running fabric's switch-port counters
    fabriclab clean                                      remove what a killed run left

Exit codes (:data:`EXIT_CODES`): 0 success, 1 the run failed, 2 bad input (a scenario key, a
missing capability, not root, a usage error), 3 a fidelity check failed (the results are
written but marked; ``--accept-unfaithful`` makes that 0), 130 interrupted. A user's mistake is
one line on stderr starting ``fabriclab:``, never a Python traceback.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from common.errors import BusyError, CapabilityError, PathError, RunError, ScenarioError, SetupError, UnfaithfulRun
from experiments import folders
from experiments.plan import build_fabric, check_against_fabric
from experiments.scenario import read_yaml_file, validate

# Each sub-command imports its own modules inside its function: `check` loads the parser and the
# fabric only (0.3 s), where the run's modules (matplotlib among them) would make it 0.65 s.

#: The exit codes of a fabric run, documented in its --help (every sub-command lists its own).
EXIT_CODES = {0: "success", 1: "the run failed (set-up, an agent, the controller)",
              2: "bad input (a key, a --results path that cannot hold results, a capability this machine lacks, "
                 "not root, another run holds the machine)",
              3: "a fidelity check failed (results written and marked)", 130: "interrupted (Ctrl-C)",
              143: "stopped by SIGTERM (fabric torn down)", 129: "stopped by SIGHUP: the terminal closed"}
#: A sub-command that only reads files: success or bad input.
READS = {0: "success", 2: "bad input (a file or folder that cannot be read, a bad key)"}
CHECKS = {0: "valid (and, as root, this machine can run it)", 2: "a bad key, or this machine lacks what it needs"}
DIAGNOSES = {0: "the verdict (or your answer) matches the hidden fault", 1: "it does not, or the run failed",
             2: "bad input (a key, a --results path, not root, another run holds the machine)",
             130: "interrupted (Ctrl-C)"}
PORTS = {0: "success", 1: "no controller answers (no run going)", 2: "no such switch in the fabric"}
CLEANS = {0: "cleaned, or nothing recorded to clean", 1: "something recorded could not be removed", 2: "not root"}
LAB_CHECKS = {0: "full marks", 1: "an answer is wrong", 2: "the results or the answers cannot be read, no such lab"}

#: Exit codes of a run ended by a signal (experiments.live.SIGNAL_EXIT), and the signal's name.
SIGNAL_NAMES = {143: "SIGTERM", 129: "SIGHUP (the terminal closed)"}

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = Path(__file__).resolve().parent / "scenarios"
DEFAULT_SCENARIO = SCENARIOS / "incast.yaml"
DEFAULT_DIAGNOSE = SCENARIOS / "diagnose-fattree.yaml"

def _exit_text(codes: dict) -> str:
    return "\b\nExit codes:\n" + "\n".join(f"  {k:<4} {v}" for k, v in codes.items())


class Stop(Exception):
    """End a sub-command with ``code`` after printing ``message`` (one line, stderr, ``fabriclab:``)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def _examples(*lines: str, codes: dict | None = None) -> str:
    """A help epilog: the examples verbatim (click's ``\\b`` keeps their line breaks), then the
    sub-command's exit codes (default: a fabric run's, :data:`EXIT_CODES`)."""
    return "\b\nExamples:\n" + "\n".join(f"  {x}" for x in lines) + "\n\n" + _exit_text(codes or EXIT_CODES)


def _need_root() -> None:
    if os.geteuid() != 0:
        raise Stop(2, "this needs root (Mininet, Open vSwitch, tc): run it with sudo")


def _scenario(path: str, diagnose: bool = False):
    """Read and check a scenario file against its fabric; Stop(2) naming the key."""
    try:
        data = read_yaml_file(path)
        if diagnose and isinstance(data, dict) and "traffic" not in data:
            data = {**data, "traffic": {"senders": 1}}    # the probes are its traffic: none is needed
        sc = validate(data)
        check_against_fabric(sc)
        return sc
    except ScenarioError as e:
        raise Stop(2, str(e)) from None


def _results_root(results: str, name: str) -> None:
    """``--results`` checked before anything starts: the folder (or where it would be made) and
    the name the next ``name`` folder would get in it (experiments.folders); Stop(2) naming the path."""
    try:
        folders.next_folder(folders.check_results_root(results), name)
    except PathError as e:
        raise Stop(2, str(e)) from None


def _read_path(path: str, what: str, folder: bool) -> Path:
    """A path given to be read (a results folder, an answers file), checked; Stop(2) naming it."""
    try:
        return folders.check_input_path(path, what, folder)
    except PathError as e:
        raise Stop(2, str(e)) from None


def _guard(work) -> int:
    """Run ``work()`` (a fabric run) and turn what it raises into the exit code and one line."""
    try:
        rv = work()
    except UnfaithfulRun as e:
        raise Stop(3, str(e)) from None
    except (ScenarioError, CapabilityError, BusyError, PathError) as e:
        raise Stop(2, str(e)) from None
    except SetupError as e:
        raise Stop(1, f"set-up failed: {e}") from None
    except RunError as e:
        raise Stop(1, f"run failed: {e}; fabric torn down") from None
    except KeyboardInterrupt:
        raise Stop(130, "interrupted; fabric torn down") from None
    except SystemExit as e:
        if e.code in SIGNAL_NAMES:
            print(f"fabriclab: stopped by {SIGNAL_NAMES[e.code]}; fabric torn down (exit {e.code})", file=sys.stderr)
        raise
    return 0 if rv is None else rv


def _plural(k: int, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=_examples("sudo fabriclab run                       # the default incast, 4 rounds",
                              "sudo fabriclab run experiments/scenarios/pfc-incast.yaml --results out",
                              "fabriclab check my-scenario.yaml          # the bad key, in one line",
                              "sudo fabriclab study experiments/studies/ecn-vs-droptail.yaml",
                              "fabriclab plot results/20261205T091500Z-incast",
                              'eval "$(_FABRICLAB_COMPLETE=bash_source fabriclab)"   # shell completion (bash)'))
def cli() -> None:
    """fabriclab: a packet-level congestion lab for AI-cluster networks on Mininet and Open vSwitch.

    Sub-commands that build a fabric need root. `python -m experiments` is the same command.
    """


@cli.command(short_help="run a scenario (default: the incast)", epilog=_examples("sudo fabriclab run",
                              "sudo fabriclab run experiments/scenarios/roce-incast.yaml --results out --quiet"))
@click.argument("scenario", required=False, default=str(DEFAULT_SCENARIO), metavar="[SCENARIO.yaml]")
@click.option("--results", default="results", show_default=True, help="the folder that gets the run's folder")
@click.option("--quiet", is_flag=True, help="no progress, only warnings and errors")
@click.option("--accept-unfaithful", is_flag=True,
              help="a failed fidelity check does not fail the run (exit 0); every output says so")
def run(scenario: str, results: str, quiet: bool, accept_unfaithful: bool) -> int:
    """Run a scenario (default: the 8:1 incast, drop-tail / ECN / PFC / ECN+PFC): build its fabric,
    run its rounds, write CSV/JSON and plots into a new folder under --results."""
    sc = _scenario(scenario)
    _results_root(results, sc.name)
    _need_root()
    from experiments import runner

    def go() -> int:
        runner.run(sc, Path(results), quiet=quiet, accept_unfaithful=accept_unfaithful)
        return 0
    return _guard(go)


def _check_machine(file: str, scenarios: list) -> str:
    """As root, what a run checks before it starts, for each scenario (experiments.runner.preflight):
    '' when this machine can run them all; Stop(2) naming what it lacks."""
    if os.geteuid() != 0:
        return " (what this kernel offers is checked as root: sudo fabriclab check ...)"
    try:
        from experiments import runner
    except ModuleNotFoundError as e:      # an install with the pure dependencies only (a laptop)
        return f" (this machine is not checked: the live stack is not installed here, no module {e.name!r})"
    from experiments import probe
    env = probe.probe()
    try:
        for sc in scenarios:
            runner.preflight(sc, env=env)
    except (CapabilityError, ScenarioError) as e:
        raise Stop(2, f"{file} is valid, but this machine cannot run it: {e}") from None
    return f"; this machine can run it (datapath {env.get('datapath')}, kernel {env.get('kernel')})"


def _check_lab(folder: Path) -> int:
    """``check`` of a lab's folder: each of its runs' scenario files, and its answers template."""
    from experiments import labs
    the = next((cls() for cls in labs.LABS.values() if cls.folder().resolve() == folder.resolve()), None)
    if the is None:
        raise Stop(2, f"{folder}: not a scenario file or a lab's folder (labs: fabriclab lab list)")
    try:
        template = labs.base.read_answers(folder / "answers.yaml")
    except labs.base.LabError as e:
        raise Stop(2, str(e)) from None
    if list(template) != [q.id for q in the.QUESTIONS]:
        raise Stop(2, f"{folder}/answers.yaml: its keys {list(template)} are not the lab's questions")
    scenarios = []
    for name, path in the.RUNS.items():
        try:
            sc = validate(read_yaml_file(REPO / path))
            check_against_fabric(sc)
        except ScenarioError as e:
            raise Stop(2, f"{path}: {e}") from None
        scenarios.append(sc)
    print(f"fabriclab: {folder} is lab {the.NUMBER} with {_plural(len(the.RUNS), 'valid run')} and "
          f"{_plural(len(the.QUESTIONS), 'question')}{_check_machine(str(folder), scenarios)}")
    return 0


@cli.command(short_help="validate a scenario, comparison, study or lab",
             epilog=_examples("fabriclab check experiments/scenarios/incast.yaml",
                              "fabriclab check experiments/scenarios/compare-topologies.yaml",
                              "sudo fabriclab check experiments/studies/cubic-bbr-dctcp.yaml   # + this kernel",
                              "sudo fabriclab check labs/04-congestion                        # a lab's runs", codes=CHECKS))
@click.argument("file", metavar="FILE")
def check(file: str) -> int:
    """Validate a scenario, comparison or study file, or a lab's folder, without running it; as
    root, also check it against this machine's kernel (congestion controls, qdiscs, datapath) as
    a run would. Exit 2 with one line naming the first bad key or the missing capability."""
    if Path(file).is_dir():
        return _check_lab(Path(file))
    try:
        data = read_yaml_file(file)
        from experiments import study as studies
        if studies.is_study(data):
            s = studies.expand(data, source=Path(file).resolve())
            for c in s.cells:
                check_against_fabric(c.scenario)
            plans = studies.plan_runs(s)
            for note in s.notes:
                print(f"fabriclab: note: {note}")
            if os.geteuid() == 0:
                try:
                    studies.preflight(s, plans)
                except (CapabilityError, ScenarioError) as e:
                    raise Stop(2, f"{file} is valid, but this machine cannot run it: {e}") from None
                machine = "; this machine can run every cell"
            else:
                machine = " (what this kernel offers is checked as root: sudo fabriclab check ...)"
            print(f"fabriclab: {file} is a valid study: {_plural(len(s.variants), 'variant')} x "
                  f"{_plural(len(s.points), 'sweep point')} x {_plural(len(s.seeds), 'seed')} = "
                  f"{_plural(len(s.cells), 'cell')} on {_plural(len(plans), 'fabric run')}{machine}")
            return 0
        if isinstance(data, dict) and ("fabrics" in data or ("base" in data and "traffic" in data)):   # a comparison
            from experiments import compare
            cmp = compare.validate_comparison(data)
            for _fabric, _traffic, sc in cmp["runs"]:
                check_against_fabric(sc)
            machine = _check_machine(file, [sc for _f, _t, sc in cmp["runs"]])
            print(f"fabriclab: {file} is a valid comparison of {len(cmp['runs'])} runs{machine}")
            return 0
        sc = validate(data)
        check_against_fabric(sc)
    except ScenarioError as e:
        raise Stop(2, str(e)) from None
    print(f"fabriclab: {file} is valid{_check_machine(file, [sc])}")
    return 0


@cli.command(short_help="the same traffic on several fabrics", epilog=_examples("sudo fabriclab compare",
                              "sudo fabriclab compare experiments/scenarios/compare-topologies.yaml --results out"))
@click.argument("comparison", required=False, default=None, metavar="[COMPARISON.yaml]")
@click.option("--results", default="results", show_default=True, help="the folder that gets the run's folder")
@click.option("--quiet", is_flag=True, help="no progress, only warnings and errors")
@click.option("--accept-unfaithful", is_flag=True,
              help="a failed fidelity check does not fail the runs (exit 0); every output says so")
def compare(comparison: str | None, results: str, quiet: bool, accept_unfaithful: bool) -> int:
    """Run the same traffic on several fabrics (default: Fat-Tree k=4 and a 3:1 Spine-Leaf) and
    plot them side by side."""
    from experiments import compare as comparisons
    try:
        cmp = comparisons.load_comparison(comparison or comparisons.DEFAULT)
    except ScenarioError as e:
        raise Stop(2, str(e)) from None
    _results_root(results, cmp["name"])
    _need_root()

    def go() -> int:
        comparisons.run_comparison(cmp, Path(results), quiet=quiet, accept_unfaithful=accept_unfaithful)
        return 0
    return _guard(go)


@cli.command(short_help="variants x seeds, compared per seed", epilog=_examples("sudo fabriclab study experiments/studies/aa.yaml",
                              "sudo fabriclab study experiments/studies/ecn-vs-droptail.yaml --results out",
                              "fabriclab study my-study.yaml --dask tcp://10.0.0.5:8786   # on a Dask cluster"))
@click.argument("study", metavar="STUDY.yaml")
@click.option("--results", default="results", show_default=True, help="the folder that gets the run's folder")
@click.option("--quiet", is_flag=True, help="no progress, only warnings and errors")
@click.option("--accept-unfaithful", is_flag=True,
              help="cells whose fidelity checks failed do not fail the study (exit 0); they are marked and left "
                   "out of the statistics either way")
@click.option("--dask", "dask_address", metavar="SCHEDULER_ADDRESS", default=None,
              help="run the fabric runs on a Dask cluster (tcp://HOST:PORT) whose workers each offer one 'fabric' "
                   "resource (docs/studies.md); needs no root here")
def study(study: str, results: str, quiet: bool, accept_unfaithful: bool, dask_address: str | None) -> int:
    """Run a study: variants x sweep x seeds, compared per seed with paired statistics; writes
    comparison.json, CSV tables, plots and report.html."""
    from experiments import study as studies
    try:
        the_study = studies.load_study(study)
        for c in the_study.cells:
            check_against_fabric(c.scenario)
        for note in the_study.notes:
            print(f"fabriclab: note: {note}")
    except ScenarioError as e:
        raise Stop(2, str(e)) from None
    _results_root(results, the_study.name)
    if dask_address:
        return _study_on_dask(studies, the_study, dask_address, results, quiet, accept_unfaithful)
    _need_root()

    def go() -> int:
        studies.preflight(the_study, studies.plan_runs(the_study))
        out, result = studies.run_study(the_study, Path(results), quiet=quiet)
        return _study_exit(studies, out, result, quiet, accept_unfaithful)
    return _guard(go)


@cli.command(short_help="find a hidden fault in a fabric", epilog=_examples("sudo fabriclab diagnose --inject random --seed 3",
                              "sudo fabriclab diagnose --inject random --seed 7 --by-hand   # you find it",
                              "sudo fabriclab diagnose experiments/scenarios/diagnose-spineleaf.yaml", codes=DIAGNOSES))
@click.argument("scenario", required=False, default=str(DEFAULT_DIAGNOSE), metavar="[SCENARIO.yaml]")
@click.option("--inject", type=click.Choice(["random"]), default=None,
              help="inject one seeded random fault (kind, place, size) unseen; revealed after the verdict")
@click.option("--seed", type=int, default=0, show_default=True, help="the random fault's seed (and the probes' order)")
@click.option("--rate-fraction", type=float, default=0.6, show_default=True,
              help="each probe's rate as a share of its path's slowest link (0.05..0.95)")
@click.option("--by-hand", is_flag=True,
              help="a lab: you troubleshoot (iperf3 in the hosts, the ports' counters) and type your answer; it is "
                   "checked against the hidden fault")
@click.option("--results", default="results", show_default=True, help="the folder that gets the run's folder")
@click.option("--quiet", is_flag=True, help="no progress, only warnings and errors")
def diagnose(scenario: str, inject: str | None, seed: int, rate_fraction: float, by_hand: bool, results: str,
             quiet: bool) -> int:
    """Troubleshoot a fabric with a fault it is not told about: is it the network, which zone
    (bisection), which layer (port counters). Exit 1 when the verdict misses the fault."""
    if not 0.05 <= rate_fraction <= 0.95:
        raise Stop(2, f"--rate-fraction must be within 0.05..0.95, got {rate_fraction}")
    sc = _scenario(scenario, diagnose=True)
    if inject is None and not any(r.faults for r in sc.rounds):
        raise Stop(2, f"{scenario} has no faults: give it a faults section, or --inject random")
    from experiments import diagnose as diagnosis
    _results_root(results, diagnosis.folder_name(sc, inject, seed))
    _need_root()

    def go() -> int:
        _out, record = diagnosis.diagnose(sc, Path(results), inject=inject, seed=seed, rate_fraction=rate_fraction,
                                          quiet=quiet, ask=input if by_hand else None)
        return 0 if record.get("matched", True) else 1
    return _guard(go)


def _results_folder(path: str, *markers: str) -> Path:
    d = _read_path(path, "results folder", folder=True)
    if not any((d / m).exists() for m in markers):
        raise Stop(2, f"{d}: not a results folder (no {', '.join(markers[:-1])} or {markers[-1]} in it)")
    return d


@cli.command(short_help="redraw a results folder's plots and report", epilog=_examples("fabriclab plot results/20261205T091500Z-incast", codes=READS))
@click.argument("results_dir", metavar="RESULTS_DIR")
def plot(results_dir: str) -> int:
    """Redraw the plots of a results folder (a run's, a comparison's, a study's) and rewrite its
    report.html. No root."""
    from experiments import plot as plots, sections
    d = _results_folder(results_dir, "summary.json", "rounds.json", "study.json", "comparison.json")
    paths = []
    try:
        if (d / "study.json").exists() and (d / "comparison.json").exists():     # a study's folder
            from experiments import studyreport
            paths = studyreport.write_report(d)
        elif (d / "rounds.json").exists():
            for r in json.loads((d / "rounds.json").read_text())["rounds"]:
                paths += plots.plot_all(d / r["folder"], sections=sections.SECTIONS)
            paths += plots.plot_rounds(d, sections=sections.SECTIONS)
        elif (d / "summary.json").exists():
            paths = plots.plot_all(d, sections=sections.SECTIONS)
        elif (d / "comparison.json").exists() and "runs" in json.loads((d / "comparison.json").read_text()):
            paths = plots.plot_comparison(d)
        else:
            raise Stop(2, f"{d}: a study folder without comparison.json (the study did not finish)")
        if (d / "fabric_map.json").exists() and (d / "scenario.yaml").exists():
            from experiments import draw as drawing
            paths.append(drawing.draw(json.loads((d / "fabric_map.json").read_text()), d / "topology.png",
                                      title=read_yaml_file(d / "scenario.yaml").get("name")))
        if not (d / "study.json").exists():
            from experiments import report                  # a study's report is its own (above)
            try:
                paths.append(report.write_report(d))
            except (FileNotFoundError, ValueError) as e:
                print(f"fabriclab: no report.html: {e}", file=sys.stderr)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Stop(2, f"{d}: its files cannot be read as a results folder of this fabriclab "
                      f"({type(e).__name__}: {e}); rerun its scenario or `fabriclab analyze` it") from None
    for path in paths:
        print(path)
    return 0


@cli.command(short_help="rebuild a results folder from its raw files", epilog=_examples("fabriclab analyze results/20261205T091500Z-incast", codes=READS))
@click.argument("results_dir", metavar="RESULTS_DIR")
@click.option("--quiet", is_flag=True, help="no per-round lines")
def analyze(results_dir: str, quiet: bool) -> int:
    """Rebuild a results folder's tables, summaries and plots from its raw files. No root."""
    from experiments import rounds
    d = _read_path(results_dir, "results folder", folder=True)
    if not (d / "scenario.yaml").is_file() or not (d / "environment.json").is_file():
        raise Stop(2, f"{d}: not a results folder (no scenario.yaml and environment.json)")
    try:
        dirs = rounds.analyze(d, quiet=quiet)
    except FileNotFoundError as e:
        raise Stop(2, str(e)) from None
    except ScenarioError as e:
        raise Stop(2, f"{d}/scenario.yaml does not parse as a scenario of this fabriclab (a folder recorded by an "
                      f"earlier version: run its scenario again): {e}") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Stop(2, f"{d}: its raw files cannot be read ({type(e).__name__}: {e}); run its scenario again") from None
    print(f"fabriclab: analysed {len(dirs)} round(s) of {d}")
    return 0


@cli.command(short_help="draw a scenario's fabric as a PNG", epilog=_examples("fabriclab draw experiments/scenarios/incast.yaml",
                              "fabriclab draw experiments/scenarios/allreduce-fattree.yaml --out fattree.png", codes=READS))
@click.argument("scenario", metavar="SCENARIO.yaml")
@click.option("--out", default="topology.png", show_default=True, help="the PNG to write")
def draw(scenario: str, out: str) -> int:
    """Draw a scenario's fabric as a PNG: layers on rows, link rates, oversubscription. No root."""
    sc = _scenario(scenario)
    from experiments import draw as drawing
    print(drawing.draw(build_fabric(sc).to_map(), Path(out), title=sc.name))
    return 0


@cli.command(short_help="the scenario's JSON Schema or key reference", epilog=_examples("fabriclab schema > fabriclab.schema.json   # for an editor's YAML support",
                              "fabriclab schema --markdown               # docs/scenario-keys.md", codes=READS))
@click.option("--markdown", is_flag=True, help="the scenario-key reference instead (docs/scenario-keys.md)")
def schema(markdown: bool) -> int:
    """Print the scenario's JSON Schema (editors complete and check YAML with it). No root."""
    from experiments import schema_export
    print(schema_export.markdown() if markdown else json.dumps(schema_export.scenario_schema(), indent=1))
    return 0


@cli.command(short_help="a running fabric's port counters", epilog=_examples("fabriclab ports", "fabriclab ports leaf1 --json", codes=PORTS))
@click.argument("switch", required=False, default=None)
@click.option("--api", default=None,
              help="the controller's REST API (a run's first lines name it; default http://127.0.0.1:8080)")
@click.option("--json", "as_json", is_flag=True, help="the counters as JSON instead")
def ports(switch: str | None, api: str | None, as_json: bool) -> int:
    """A running fabric's switch-port counters, ovs-ofctl dump-ports style, from its controller's
    REST API. No root. Exit 1 when no controller answers, 2 for an unknown switch."""
    from controller import portstats, rest
    api = api or f"http://127.0.0.1:{rest.DEFAULT_PORT}"
    try:
        rows = rest.ControlClient(api).call("GET", "/ports", timeout_s=1, what="ports")["ports"]
    except SetupError as e:
        raise Stop(1, f"no fabriclab controller answers at {api} ({e}); is a run going? Its first lines name "
                      "the controller's API") from None
    if switch is not None:
        known = sorted({r["switch"] for r in rows})
        if switch not in known:
            raise Stop(2, f"no switch {switch!r} in this fabric (switches: {', '.join(known)})")
        rows = [r for r in rows if r["switch"] == switch]
    print(json.dumps(rows, indent=1) if as_json else portstats.dump_ports_text(rows))
    return 0


@cli.command(short_help="remove what a killed run left", epilog=_examples("sudo fabriclab clean", codes=CLEANS))
def clean() -> int:
    """Remove what a killed run left (its bridges, interfaces, processes), by the run's own record
    in /run/fabriclab; nothing else."""
    _need_root()
    from experiments import state       # the run-state record: netlink (pyroute2), which `check` and `plot` never need
    try:
        report = state.clean_stale()
    except SetupError as e:
        raise Stop(1, str(e)) from None
    print("fabriclab: nothing recorded to clean" if report is None else f"fabriclab: {state.describe_report(report)}")
    return 0


@cli.group(short_help="coursework labs: list, show, check answers",
           epilog=_examples("fabriclab lab list",
                            "fabriclab lab show 4",
                            "fabriclab lab check 4 --results results/lab4 --answers my-answers.yaml", codes=LAB_CHECKS))
def lab() -> None:
    """Coursework labs (labs/): each has a sheet (goals, background, the steps as commands,
    questions), the scenarios it runs and a checker that scores an answers file against the
    student's own results. `make lab-check LAB=N RESULTS=dir` is `fabriclab lab check`."""


def _lab(number: int):
    from experiments import labs
    if number not in labs.LABS:
        raise Stop(2, f"no lab {number} (labs: {', '.join(str(n) for n in sorted(labs.LABS))})")
    return labs.LABS[number]()


@lab.command("list", short_help="the labs and their sheets", epilog=_examples("fabriclab lab list", codes=READS))
def lab_list() -> int:
    """The labs, each with its sheet."""
    from experiments import labs
    for n in sorted(labs.LABS):
        cls = labs.LABS[n]
        print(f"lab {n}: {cls.TITLE} ({cls.folder().relative_to(cls.folder().parents[1])}/README.md)")
    return 0


@lab.command("show", short_help="a lab's runs and questions", epilog=_examples("fabriclab lab show 4", codes=READS))
@click.argument("number", type=int)
def lab_show(number: int) -> int:
    """What lab NUMBER asks you to run and answer (its sheet says why and how)."""
    the = _lab(number)
    print(f"lab {the.NUMBER}: {the.TITLE}; sheet: {the.folder() / 'README.md'}")
    for name in the.RUNS:
        print(f"  run: {the.command(name)}      ({name})")
    for q in the.QUESTIONS:
        unit = f" [{q.unit}]" if q.unit else f" [{' or '.join(q.choices)}]"
        print(f"  {q.id}{unit}: {q.prompt}")
    print(f"  answers: copy {the.folder() / 'answers.yaml'}, fill it in, then: fabriclab lab check {the.NUMBER} "
          "--results DIR --answers FILE")
    return 0


@lab.command("check", short_help="score an answers file against your results",
             epilog=_examples("fabriclab lab check 4 --results results/lab4 --answers my-answers.yaml",
                              "make lab-check LAB=4 RESULTS=results/lab4 ANSWERS=my-answers.yaml", codes=LAB_CHECKS))
@click.argument("number", type=int)
@click.option("--results", required=True, help="the folder you gave --results for the lab's runs (or one run's folder)")
@click.option("--answers", default=None, help="your answers (YAML, question id: answer); default RESULTS/answers.yaml")
def lab_check(number: int, results: str, answers: str | None) -> int:
    """Check your answers to lab NUMBER against bands derived from your own results and the
    model: per question what matched and why, then the score. Exit 0 for full marks, 1 when
    an answer is wrong, 2 when the results or answers cannot be read. No root."""
    from experiments import labs
    LabError, read_answers, report = labs.base.LabError, labs.base.read_answers, labs.base.report
    the = _lab(number)
    d = _read_path(results, "results folder", folder=True)
    answers_file = Path(answers) if answers else d / "answers.yaml"
    try:
        if not labs.base.find_runs(d, the.RUNS):           # a wrong folder is named before missing answers
            raise LabError(f"{d}: no finished run of lab {number} in it (it needs "
                           + ", ".join(f"{n} from {p}" for n, p in the.RUNS.items()) + ")")
        if answers or os.path.lexists(answers_file):      # a missing default is said by read_answers
            _read_path(str(answers_file), "answers file", folder=False)
        verdicts = the.check(d, read_answers(answers_file))
    except LabError as e:
        raise Stop(2, str(e)) from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Stop(2, f"{d}: a run of lab {number} cannot be read ({type(e).__name__}: {e}); run it again") from None
    print(report(the, verdicts))
    return 0 if all(v.ok for v in verdicts) else 1


def _study_exit(studies, out: Path, result: dict, quiet: bool, accept_unfaithful: bool) -> int:
    """A study's report and exit code: 1 when a cell failed, 3 when one was unfaithful (unless
    ``accept_unfaithful``), else 0."""
    if not quiet:
        print(studies.format_comparison(result, out))
    status = {c["status"] for c in result["cells"]}
    if "failed" in status:
        raise Stop(1, f"some cells failed (comparison.json names them): {out}")
    if "unfaithful" in status and not accept_unfaithful:
        raise Stop(3, f"some cells failed a fidelity check and are left out of the statistics: {out}")
    return 0


def _study_on_dask(studies, the_study, address: str, results: str, quiet: bool, accept_unfaithful: bool) -> int:
    """Run a checked study's fabric runs on the Dask scheduler ``address`` (experiments.studydask)."""
    from experiments import studydask
    try:
        dispatch = studydask.DaskDispatch(address)
    except SetupError as e:
        raise Stop(1, str(e)) from None
    try:
        plans = studies.plan_runs(the_study)
        refused = dict((p.name, e) for p, e in dispatch.preflight(plans))

        def check(sc, _env):
            if sc.name in refused:
                raise CapabilityError(refused[sc.name])
        studies.preflight(the_study, plans, env={}, check=check)
        out, result = studies.run_study(the_study, Path(results), quiet=quiet, dispatch=dispatch)
    except (CapabilityError, ScenarioError, PathError) as e:
        raise Stop(2, str(e)) from None
    except KeyboardInterrupt:
        raise Stop(130, "interrupted (runs already sent finish on their workers)") from None
    finally:
        dispatch.close()
    return _study_exit(studies, out, result, quiet, accept_unfaithful)


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default sys.argv[1:]) and return its exit code
    (:data:`EXIT_CODES`). A usage error is one line naming the sub-command's --help (exit 2).

    Raises:
        SystemExit: a run ended by SIGTERM or SIGHUP (its code, 143 or 129, after tearing down);
            shell completion (click exits after printing the completions).
    """
    try:
        rv = cli.main(args=argv, prog_name="fabriclab", standalone_mode=False)
    except Stop as e:
        print(f"fabriclab: {e}", file=sys.stderr)
        return e.code
    except click.exceptions.NoArgsIsHelpError as e:
        print(e.ctx.get_help())
        return 2
    except click.UsageError as e:
        where = e.ctx.command_path if e.ctx is not None else "fabriclab"
        print(f"fabriclab: {e.format_message()} (see: {where} --help)", file=sys.stderr)
        return 2
    except click.ClickException as e:
        print(f"fabriclab: {e.format_message()}", file=sys.stderr)
        return e.exit_code
    except click.Abort:
        print("fabriclab: interrupted", file=sys.stderr)
        return 130
    return rv if isinstance(rv, int) else 0


def entry() -> None:
    """The ``fabriclab`` console script: :func:`main`, then exit with its code."""
    sys.exit(main())
