"""fabriclab command line.

    python -m experiments run [SCENARIO.yaml] [--results DIR]
    python -m experiments check SCENARIO.yaml     # validate only (a comparison file too)
    python -m experiments clean                   # remove what a killed run left
    python -m experiments plot RESULTS_DIR        # redraw plots from result files, and report.html
    python -m experiments analyze RESULTS_DIR     # rebuild every derived file from the raw ones (report.html too)
    python -m experiments schema [--markdown]     # the scenario's JSON Schema (or its key reference)
    python -m experiments draw SCENARIO.yaml [--out PNG]   # draw the scenario's fabric (no root)
    python -m experiments compare [COMPARISON.yaml] [--results DIR]   # same traffic on several fabrics
    python -m experiments study STUDY.yaml [--results DIR]   # variants x seeds, compared per seed
    python -m experiments ports [SWITCH] [--api URL] [--json]   # a running fabric's switch-port counters
    python -m experiments diagnose [SCENARIO.yaml] [--inject random --seed N]   # find a hidden fault

Exit codes: 0 success, 1 run failed, 2 bad input (scenario key, missing
capability, not root), 3 a fidelity check failed (the results are written but
marked; ``--accept-unfaithful`` makes that 0), 130 interrupted.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from common.errors import BusyError, CapabilityError, RunError, ScenarioError, SetupError, UnfaithfulRun
from experiments.plan import build_fabric, check_against_fabric
from experiments.scenario import read_yaml_file, validate
from experiments.state import clean_stale, describe_report

# Each subcommand imports its own modules inside main(): `check` loads the parser and the fabric
# only, 0.3 s, where the run's modules (matplotlib among them) would make it 0.65 s.

#: Exit codes of a run ended by a signal (experiments.live.SIGNAL_EXIT), and the signal's name.
SIGNAL_NAMES = {143: "SIGTERM", 129: "SIGHUP (the terminal closed)"}

DEFAULT_SCENARIO = Path(__file__).resolve().parent / "scenarios" / "incast.yaml"
DEFAULT_DIAGNOSE = Path(__file__).resolve().parent / "scenarios" / "diagnose-fattree.yaml"


def _ports(api: str, switch: str | None, as_json: bool) -> int:
    """``ports``: print the counters (exit 1 when no controller answers, 2 for an unknown switch)."""
    from controller import portstats, rest
    api = api or f"http://127.0.0.1:{rest.DEFAULT_PORT}"
    try:
        rows = rest.ControlClient(api).call("GET", "/ports", timeout_s=1, what="ports")["ports"]
    except SetupError as e:
        print(f"fabriclab: no fabriclab controller answers at {api} ({e}); is a run going? Its first lines name "
              "the controller's API", file=sys.stderr)
        return 1
    if switch is not None:
        known = sorted({r["switch"] for r in rows})
        if switch not in known:
            print(f"fabriclab: no switch {switch!r} in this fabric (switches: {', '.join(known)})", file=sys.stderr)
            return 2
        rows = [r for r in rows if r["switch"] == switch]
    print(json.dumps(rows, indent=1) if as_json else portstats.dump_ports_text(rows))
    return 0


def main(argv=None) -> int:
    """Dispatch the sub-commands; see the module docstring for exit codes."""
    ap = argparse.ArgumentParser(prog="fabriclab")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a scenario")
    r.add_argument("scenario", nargs="?", default=str(DEFAULT_SCENARIO))
    r.add_argument("--results", default="results")
    r.add_argument("--quiet", action="store_true")
    r.add_argument("--accept-unfaithful", action="store_true",
                   help="a failed fidelity check does not fail the run (exit 0); every output says so")
    c = sub.add_parser("check", help="validate a scenario, comparison or study file (exit 2 naming the bad key)")
    c.add_argument("scenario")
    sub.add_parser("clean", help="remove state left by a killed run")
    p = sub.add_parser("plot", help="redraw the plots of a results folder (a run's, a comparison's, a study's) and its report.html")
    p.add_argument("results_dir")
    sch = sub.add_parser("schema", help="print the scenario's JSON Schema (editors complete and check YAML with it)")
    sch.add_argument("--markdown", action="store_true", help="the scenario-key reference instead (docs/scenario-keys.md)")
    a = sub.add_parser("analyze", help="rebuild a results folder's tables, summaries and plots from its raw files")
    a.add_argument("results_dir")
    a.add_argument("--quiet", action="store_true")
    cm = sub.add_parser("compare", help="run the same traffic on several fabrics and compare them")
    cm.add_argument("comparison", nargs="?", default=None)
    cm.add_argument("--results", default="results")
    cm.add_argument("--quiet", action="store_true")
    cm.add_argument("--accept-unfaithful", action="store_true",
                    help="a failed fidelity check does not fail the runs (exit 0); every output says so")
    st = sub.add_parser("study", help="run a study: variants x sweep x seeds, compared per seed with paired statistics")
    st.add_argument("study")
    st.add_argument("--results", default="results")
    st.add_argument("--quiet", action="store_true")
    st.add_argument("--accept-unfaithful", action="store_true",
                    help="cells whose fidelity checks failed do not fail the study (exit 0); they are marked "
                         "and left out of the statistics either way")
    st.add_argument("--dask", metavar="SCHEDULER_ADDRESS", default=None,
                    help="run the fabric runs on a Dask cluster (tcp://HOST:PORT) whose workers each offer one "
                         "'fabric' resource (docs/studies.md); needs no root here")
    po = sub.add_parser("ports", help="a running fabric's switch-port counters, ovs-ofctl dump-ports style (from "
                                      "its controller's REST API; no root)")
    po.add_argument("switch", nargs="?", default=None, help="one switch (default: all)")
    po.add_argument("--api", default=None,
                    help="the controller's REST API (a run's first lines name it; default http://127.0.0.1:8080, "
                         "where the controller listens when the port is free)")
    po.add_argument("--json", action="store_true", help="the counters as JSON instead")
    dg = sub.add_parser("diagnose", help="troubleshoot a fabric with a fault it is not told about: is it the "
                                         "network, which zone (bisection), which layer (port counters)")
    dg.add_argument("scenario", nargs="?", default=str(DEFAULT_DIAGNOSE),
                    help="the fabric and its faults (default: a k=4 Fat-Tree; with --inject random, its faults "
                         "are replaced by one random fault)")
    dg.add_argument("--inject", choices=["random"], default=None,
                    help="inject one seeded random fault (kind, place, size) unseen; revealed after the verdict")
    dg.add_argument("--seed", type=int, default=0, help="the random fault's seed (and the probes' order)")
    dg.add_argument("--rate-fraction", type=float, default=0.6,
                    help="each probe's rate as a share of its path's slowest link (default %(default)s)")
    dg.add_argument("--by-hand", action="store_true",
                    help="a lab: you troubleshoot (iperf3 in the hosts, the ports' counters) and type your answer; "
                         "it is checked against the hidden fault")
    dg.add_argument("--results", default="results")
    dg.add_argument("--quiet", action="store_true")
    d = sub.add_parser("draw", help="draw a scenario's fabric as a PNG (layers on rows, rates, oversubscription)")
    d.add_argument("scenario")
    d.add_argument("--out", default="topology.png")
    args = ap.parse_args(argv)

    if args.cmd == "diagnose" and not 0.05 <= args.rate_fraction <= 0.95:
        print(f"fabriclab: --rate-fraction must be within 0.05..0.95, got {args.rate_fraction}", file=sys.stderr)
        return 2
    if args.cmd in ("run", "check", "draw", "diagnose"):
        try:
            data = read_yaml_file(args.scenario)
            studies = None
            if args.cmd == "check":
                from experiments import study as studies     # a study file is checked as one
            if studies is not None and studies.is_study(data):
                s = studies.expand(data, source=Path(args.scenario).resolve())
                for c in s.cells:
                    check_against_fabric(c.scenario)
                plans = studies.plan_runs(s)
                for note in s.notes:
                    print(f"fabriclab: note: {note}")
                def n(k, word):
                    return f"{k} {word}{'' if k == 1 else 's'}"
                print(f"fabriclab: {args.scenario} is a valid study: {n(len(s.variants), 'variant')} x "
                      f"{n(len(s.points), 'sweep point')} x {n(len(s.seeds), 'seed')} = {n(len(s.cells), 'cell')} "
                      f"on {n(len(plans), 'fabric run')} (what this kernel offers is checked when it runs: "
                      f"sudo python -m experiments study {args.scenario})")
                return 0
            if args.cmd == "check" and isinstance(data, dict) and "fabrics" in data:     # a comparison file
                from experiments import compare
                cmp = compare.validate_comparison(data)
                for _fabric, _traffic, sc in cmp["runs"]:
                    check_against_fabric(sc)
                print(f"fabriclab: {args.scenario} is a valid comparison of {len(cmp['runs'])} runs "
                      f"(run it with: sudo python -m experiments compare {args.scenario})")
                return 0
            if args.cmd == "diagnose" and isinstance(data, dict) and "traffic" not in data:
                data = {**data, "traffic": {"senders": 1}}    # the probes are its traffic: none is needed
            sc = validate(data)
        except ScenarioError as e:
            print(f"fabriclab: {e}", file=sys.stderr)
            return 2
        if args.cmd == "check":
            try:
                check_against_fabric(sc)
            except ScenarioError as e:
                print(f"fabriclab: {e}", file=sys.stderr)
                return 2
            print(f"fabriclab: {args.scenario} is valid (what this kernel offers is checked when it runs)")
            return 0
        if args.cmd == "diagnose":
            try:
                check_against_fabric(sc)
            except ScenarioError as e:
                print(f"fabriclab: {e}", file=sys.stderr)
                return 2
            if args.inject is None and not any(r.faults for r in sc.rounds):
                print(f"fabriclab: {args.scenario} has no faults: give it a faults section, or --inject random",
                      file=sys.stderr)
                return 2
        if args.cmd == "draw":
            from experiments import draw
            print(draw.draw(build_fabric(sc).to_map(), Path(args.out), title=sc.name))
            return 0
    if args.cmd == "compare":
        from experiments import compare
        try:
            cmp = compare.load_comparison(args.comparison or compare.DEFAULT)
        except ScenarioError as e:
            print(f"fabriclab: {e}", file=sys.stderr)
            return 2
    if args.cmd == "study":
        from experiments import study as studies
        try:
            the_study = studies.load_study(args.study)
            for c in the_study.cells:
                check_against_fabric(c.scenario)
            for note in the_study.notes:
                print(f"fabriclab: note: {note}")
        except ScenarioError as e:
            print(f"fabriclab: {e}", file=sys.stderr)
            return 2
        if args.dask:
            return _study_on_dask(studies, the_study, args)
    if args.cmd == "plot":
        from experiments import plot
        d = Path(args.results_dir)
        paths = []
        if not d.is_dir():
            print(f"fabriclab: {d}: no such results folder", file=sys.stderr)
            return 2
        if (d / "study.json").exists() and (d / "comparison.json").exists():     # a study's folder
            from experiments import studyreport
            paths = studyreport.write_report(d)
        elif (d / "rounds.json").exists():
            for r in json.loads((d / "rounds.json").read_text())["rounds"]:
                paths += plot.plot_all(d / r["folder"])
            paths += plot.plot_rounds(d)
        elif (d / "summary.json").exists():
            paths = plot.plot_all(d)
        elif (d / "comparison.json").exists() and "runs" in json.loads((d / "comparison.json").read_text()):
            paths = plot.plot_comparison(d)
        else:
            print(f"fabriclab: {d}: not a results folder (no summary.json, rounds.json or study.json in it)",
                  file=sys.stderr)
            return 2
        if (d / "fabric_map.json").exists() and (d / "scenario.yaml").exists():
            from experiments import draw
            paths.append(draw.draw(json.loads((d / "fabric_map.json").read_text()), d / "topology.png",
                                   title=read_yaml_file(d / "scenario.yaml").get("name")))
        if not (d / "study.json").exists():
            from experiments import report                  # the study's report is its own (above)
            try:
                paths.append(report.write_report(d))
            except (FileNotFoundError, ValueError) as e:
                print(f"fabriclab: no report.html: {e}", file=sys.stderr)
        for path in paths:
            print(path)
        return 0
    if args.cmd == "ports":
        return _ports(args.api, args.switch, args.json)
    if args.cmd == "schema":
        from experiments import schema_export
        print(schema_export.markdown() if args.markdown else json.dumps(schema_export.scenario_schema(), indent=1))
        return 0
    if args.cmd == "analyze":
        from experiments import runner
        d = Path(args.results_dir)
        if not (d / "scenario.yaml").is_file() or not (d / "environment.json").is_file():
            print(f"fabriclab: {d}: not a results folder (no scenario.yaml and environment.json)", file=sys.stderr)
            return 2
        try:
            dirs = runner.analyze(d, quiet=args.quiet)
        except FileNotFoundError as e:
            print(f"fabriclab: {e}", file=sys.stderr)
            return 2
        except ScenarioError as e:
            print(f"fabriclab: {d}/scenario.yaml does not parse as a scenario of this fabriclab (a folder recorded "
                  f"by an earlier version: run its scenario again): {e}", file=sys.stderr)
            return 2
        print(f"fabriclab: analysed {len(dirs)} round(s) of {d}")
        return 0
    if os.geteuid() != 0:
        print("fabriclab: this needs root (Mininet, Open vSwitch, tc): run it with sudo", file=sys.stderr)
        return 2
    if args.cmd == "clean":
        try:
            report = clean_stale()
        except SetupError as e:
            print(f"fabriclab: {e}", file=sys.stderr)
            return 1
        print("fabriclab: nothing recorded to clean" if report is None else f"fabriclab: {describe_report(report)}")
        return 0
    from experiments import runner
    try:
        if args.cmd == "compare":
            from experiments import compare
            compare.run_comparison(cmp, Path(args.results), quiet=args.quiet,
                                   accept_unfaithful=args.accept_unfaithful)
        elif args.cmd == "diagnose":
            from experiments import diagnose
            _out, record = diagnose.diagnose(sc, Path(args.results), inject=args.inject, seed=args.seed,
                                             rate_fraction=args.rate_fraction, quiet=args.quiet,
                                             ask=input if args.by_hand else None)
            return 0 if record.get("matched", True) else 1
        elif args.cmd == "study":
            studies.preflight(the_study, studies.plan_runs(the_study))
            out, result = studies.run_study(the_study, Path(args.results), quiet=args.quiet)
            return _study_exit(studies, out, result, args)
        else:
            runner.run(sc, Path(args.results), quiet=args.quiet, accept_unfaithful=args.accept_unfaithful)
    except UnfaithfulRun as e:
        print(f"fabriclab: {e}", file=sys.stderr)
        return 3
    except ScenarioError as e:
        print(f"fabriclab: {e}", file=sys.stderr)
        return 2
    except CapabilityError as e:
        print(f"fabriclab: {e}", file=sys.stderr)
        return 2
    except BusyError as e:
        print(f"fabriclab: {e}", file=sys.stderr)
        return 2
    except SetupError as e:
        print(f"fabriclab: set-up failed: {e}", file=sys.stderr)
        return 1
    except RunError as e:
        print(f"fabriclab: run failed: {e}; fabric torn down", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fabriclab: interrupted; fabric torn down", file=sys.stderr)
        return 130
    except SystemExit as e:
        if e.code in SIGNAL_NAMES:
            print(f"fabriclab: stopped by {SIGNAL_NAMES[e.code]}; fabric torn down (exit {e.code})", file=sys.stderr)
        raise
    return 0


def _study_exit(studies, out: Path, result: dict, args) -> int:
    """A study's report and exit code: 1 when a cell failed, 3 when one was unfaithful (unless
    --accept-unfaithful), else 0."""
    if not args.quiet:
        print(studies.format_comparison(result, out))
    status = {c["status"] for c in result["cells"]}
    if "failed" in status:
        print(f"fabriclab: some cells failed (comparison.json names them): {out}", file=sys.stderr)
        return 1
    if "unfaithful" in status and not args.accept_unfaithful:
        print(f"fabriclab: some cells failed a fidelity check and are left out of the statistics: {out}",
              file=sys.stderr)
        return 3
    return 0


def _study_on_dask(studies, the_study, args) -> int:
    """Run a checked study's fabric runs on the Dask scheduler ``args.dask`` (experiments.studydask)."""
    from experiments import studydask
    try:
        dispatch = studydask.DaskDispatch(args.dask)
    except SetupError as e:
        print(f"fabriclab: {e}", file=sys.stderr)
        return 1
    try:
        plans = studies.plan_runs(the_study)
        refused = dict((p.name, e) for p, e in dispatch.preflight(plans))

        def check(sc, _env):
            if sc.name in refused:
                raise CapabilityError(refused[sc.name])
        studies.preflight(the_study, plans, env={}, check=check)
        out, result = studies.run_study(the_study, Path(args.results), quiet=args.quiet, dispatch=dispatch)
    except (CapabilityError, ScenarioError) as e:
        print(f"fabriclab: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fabriclab: interrupted (runs already sent finish on their workers)", file=sys.stderr)
        return 130
    finally:
        dispatch.close()
    return _study_exit(studies, out, result, args)


if __name__ == "__main__":
    sys.exit(main())
