"""Congestion-control A/B studies: variants x sweep points x seeds, run as cells, compared per seed.

A study file names a base scenario, variants (named overrides of any scenario section), an
optional sweep (dotted keys and their values, crossed with the variants), the seeds and the
metrics to compare::

    name: ecn-vs-droptail
    description: ...
    base: ../experiments/scenarios/incast.yaml   # a scenario file (relative to the study file),
                                                 # or the scenario itself as a mapping
    variants:                                    # at least one; {} = the base as it is
      drop-tail: {ecn: {profile: "off"}}
      ecn-k20: {ecn: {profile: {step: {k_packets: 20}}}}
    sweep:                                       # optional: key -> values, crossed
      traffic.senders: [4, 8]
    seeds: 10                                    # a count (1..n) or a list
    metrics: [queue_median_packets, fct_p99_s]   # optional (default: every metric measured)
    confidence: 0.95                             # optional

Expansion (:func:`expand`): one cell per (variant, sweep point, seed); the cell's scenario is
the base with the variant's overrides merged in (a mapping merges key by key, anything else
replaces, ``null`` removes the key), the sweep point's values set, and the seed. Every cell's
scenario is checked by the scenario schema before anything starts; an error names the study's
key (``variants.ecn-k20.ecn.profile``, ``sweep.traffic.senders``, ``base.queues``).

Cells that differ only in what a round may change (ECN profiles, host TCP settings, PFC on or
off, the RoCE mode, the seed, an incast's senders, a collective's ranks and placement) share
one fabric and run as its rounds, seeds outermost, so that slow drift of a shared machine
touches every variant alike; cells that differ in anything else (topology, queues, link delay,
the traffic pattern, PFC's thresholds ...) get a fabric of their own (:func:`plan_runs`). A
run holds at most experiments.model.MAX_ROUNDS cells. Every grouping is checked: the round
the group runs must equal the cell's own resolved round, else the cell runs alone.

The seed fixes every random choice of a cell: the pattern's pairs, arrival times and every
flow's source port, hence its ECMP path (traffic.patterns.source_ports), so a seed puts the
same flow on the same path in every variant and the variants are compared per seed (common
random numbers; experiments.studystats).
"""
from __future__ import annotations

import copy
import csv
import itertools
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional, Protocol, Union

from pydantic import Field, ValidationError, field_validator

from common.errors import BusyError, CapabilityError, ScenarioError, SetupError
from common.params import quote
from experiments import folders
from experiments.metrics import METRICS, measure, one_line
from experiments.tables import write_csv
from experiments.progress import Progress
from experiments.model import MAX_ROUNDS, NAME, ROUND_COLLECTIVE_KEYS, Scenario, Section, _round_data
from experiments.scenario import _scenario_error, read_yaml_file, validate

#: Most cells one study may have (each is a round of traffic, seconds to minutes).
MAX_CELLS = 2000
#: Most seeds.
MAX_SEEDS = 1000

Scalar = Union[bool, int, float, str]


class StudyFile(Section):
    """A study file as written (module docstring). ``base`` is a path or an inline scenario."""
    name: Annotated[str, Field(pattern=f"^(?:{NAME})$")]
    description: str = ""
    base: Union[str, dict[str, Any]]
    variants: Annotated[dict[Annotated[str, Field(pattern=f"^(?:{NAME})$")], Optional[dict[str, Any]]],
                        Field(min_length=1)]
    sweep: Optional[Annotated[dict[str, Annotated[list[Scalar], Field(min_length=1)]], Field(min_length=1)]] = None
    seeds: Union[Annotated[int, Field(ge=1, le=MAX_SEEDS)],
                 Annotated[list[Annotated[int, Field(ge=0, le=2**31 - 1)]], Field(min_length=1, max_length=MAX_SEEDS)]
                 ] = 10
    metrics: Optional[Annotated[list[str], Field(min_length=1)]] = None
    confidence: Annotated[float, Field(ge=0.5, le=0.999)] = 0.95

    @field_validator("metrics")
    @classmethod
    def _known_metrics(cls, v):
        for m in v or []:
            if m not in METRICS:
                raise ValueError(f"unknown metric {m!r} (known: {', '.join(METRICS)})")
        return v

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds(cls, v):
        def whole(x):
            return isinstance(x, int) and not isinstance(x, bool)
        if whole(v):
            if not 1 <= v <= MAX_SEEDS:
                raise ValueError(f"a count of seeds must be from 1 to {MAX_SEEDS}, got {v}")
            return v
        if not isinstance(v, list) or not v:
            raise ValueError(f"expected a count of seeds (1..{MAX_SEEDS}) or a list of seeds, got {quote(v)}")
        if len(v) > MAX_SEEDS:
            raise ValueError(f"at most {MAX_SEEDS} seeds, got {len(v)}")
        for i, x in enumerate(v):
            if not (whole(x) and 0 <= x <= 2**31 - 1):
                raise ValueError(f"seeds[{i}] must be an integer from 0 to {2**31 - 1}, got {quote(x)}")
        if len(set(v)) != len(v):
            raise ValueError("seeds must be distinct")
        return v

    @field_validator("base", mode="before")
    @classmethod
    def _base(cls, v):
        if not isinstance(v, (str, dict)):
            raise ValueError(f"expected a scenario file's path or a scenario mapping, got {quote(v)}")
        return v

    @field_validator("sweep")
    @classmethod
    def _sweep_keys(cls, v):
        for key in v or {}:
            if not re.fullmatch(r"[a-z_]+(\.[A-Za-z0-9_]+)+", key):
                raise ValueError(f"{key!r} is not a dotted scenario key (e.g. traffic.senders)")
            if key.split(".")[0] in ("name", "seed", "rounds", "description"):
                raise ValueError(f"{key!r}: the study sets the name and the seed; cells have no rounds")
        return v


@dataclass(frozen=True)
class Cell:
    """One run of the study: a variant at a sweep point with a seed.

    Attributes:
        name: the cell's name (its round's name and folder: ``<variant>[-<sweep values>]-s<seed>``).
        variant: the variant's name; ``sweep``: ``{dotted key: value}`` of its sweep point ({} without
            a sweep); ``point``: the sweep point's index; ``seed``: the seed of every random choice.
        scenario: the cell's resolved single-round scenario.
    """
    name: str
    variant: str
    sweep: dict
    point: int
    seed: int
    scenario: Scenario = field(repr=False, compare=False)


@dataclass(frozen=True)
class Study:
    """A checked study: its cells in run order (seed, sweep point, variant) and what to compare.

    Attributes:
        name, description: as written. ``source``: the study file (None: given as data).
        variants: names in the file's order; ``sweep_keys``: dotted keys; ``points``: every sweep
            point as ``{key: value}`` ([{}] without a sweep); ``seeds``: in order.
        metrics: the metric names to compare (None: every metric the cells measured).
        confidence: the confidence of every interval and verdict (before the correction for
            several metrics: experiments.studystats).
        cells: every cell.
        notes: what the study did with the base that the user should know (its rounds dropped).
    """
    name: str
    description: str
    variants: tuple
    sweep_keys: tuple
    points: tuple
    seeds: tuple
    metrics: Optional[tuple]
    confidence: float
    cells: tuple
    source: Optional[Path] = None
    notes: tuple = ()


def merge(base: dict, over: dict) -> dict:
    """``base`` with ``over`` merged in: a mapping merges key by key, any other value replaces,
    ``None`` removes the key (the section's defaults hold again). Neither input is changed."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and (k not in out or isinstance(out.get(k), dict)):
            out[k] = merge(out.get(k) or {}, v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def set_dotted(data: dict, key: str, value: Any) -> None:
    """Set ``data[a][b][c] = value`` for ``key`` ``a.b.c``, creating mappings on the way.

    Raises:
        ScenarioError: a part of the way holds something other than a mapping (names ``sweep.<key>``).
    """
    parts = key.split(".")
    d = data
    for i, p in enumerate(parts[:-1]):
        nxt = d.get(p)
        if nxt is None:
            nxt = d[p] = {}
        if not isinstance(nxt, dict):
            raise ScenarioError(f"sweep.{key}", f"{'.'.join(parts[:i + 1])} is {nxt!r}, not a section")
        d = nxt
    d[parts[-1]] = value


def _value_tag(v: Any) -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", str(v))


def cell_name(variant: str, point: dict, seed: int, index: int) -> str:
    """``<variant>[-<last key part><value>...]-s<seed>``, or ``<variant>-p<index>-s<seed>`` when that
    is longer than a name may be (64 characters)."""
    tag = "".join(f"-{k.rsplit('.', 1)[-1]}{_value_tag(v)}" for k, v in point.items())
    name = f"{variant}{tag}-s{seed}"
    return name if re.fullmatch(NAME, name) else f"{variant[:40]}-p{index}-s{seed}"


def _rekey(e: ScenarioError, variant: str, over: dict, point: dict) -> ScenarioError:
    """A cell's scenario error as the study key that caused it."""
    for key in point:
        if e.key == key or e.key.startswith(key + ".") or key.startswith(e.key + "."):
            return ScenarioError(f"sweep.{key}", e.detail)
    head = e.key.split(".")[0].split("[")[0]
    if head in over:
        return ScenarioError(f"variants.{variant}.{e.key}", e.detail)
    return ScenarioError(f"base.{e.key}", e.detail)


def load_base(base: Union[str, dict], source: Optional[Path]) -> dict:
    """The base scenario's data: the mapping, or the file ``base`` names (relative to the study
    file's folder). A base with ``rounds`` loses them (marked ``x-rounds-dropped``: the study's
    variants take their place).

    Raises:
        ScenarioError: naming ``base``: unreadable, or not a scenario mapping.
    """
    if isinstance(base, str):
        path = Path(base)
        if not path.is_absolute() and source is not None:
            path = source.parent / path
        try:
            data = read_yaml_file(path)
        except ScenarioError as e:
            raise ScenarioError("base", f"{base}: {e.detail}") from None
    else:
        data = base
    if not isinstance(data, dict):
        raise ScenarioError("base", "expected a scenario (a mapping)")
    if data.get("rounds"):       # the variants take their place (Study.notes says so)
        data = {k: v for k, v in data.items() if k != "rounds"}
        data["x-rounds-dropped"] = True
    return data


def expand(data: Any, source: Optional[Path] = None) -> Study:
    """Check a study's data and expand it into its cells (module docstring).

    Raises:
        ScenarioError: naming the study's key: a bad study key, a bad base, or a cell whose
            scenario the schema refuses (``variants.<v>.<key>``, ``sweep.<key>``, ``base.<key>``);
            more than :data:`MAX_CELLS` cells.
    """
    try:
        f = StudyFile.model_validate(data)
    except ValidationError as e:
        raise _scenario_error(e, StudyFile) from None
    base = load_base(f.base, source)
    notes = ()
    if base.pop("x-rounds-dropped", False):
        notes = ("the base scenario's rounds are not run: every cell is one round, and the variants take their place",)
    for v, over in f.variants.items():
        for k in ("name", "seed", "rounds"):
            if over and k in over:
                raise ScenarioError(f"variants.{v}.{k}", "set by the study (cells are named and seeded by it; "
                                                         "each cell is one round)")
    keys = tuple(f.sweep or ())
    points = tuple(dict(zip(keys, vals)) for vals in itertools.product(*(f.sweep or {}).values()))
    seeds = tuple(range(1, f.seeds + 1)) if isinstance(f.seeds, int) else tuple(f.seeds)
    n = len(f.variants) * len(points) * len(seeds)
    if n > MAX_CELLS:
        raise ScenarioError("seeds", f"{n} cells (variants x sweep points x seeds); at most {MAX_CELLS}")
    checked: dict = {}
    cells = []
    for seed in seeds:
        for pi, point in enumerate(points):
            for variant, over in f.variants.items():
                d = merge(base, over or {})
                for key, value in point.items():
                    set_dotted(d, key, value)
                name = cell_name(variant, point, seed, pi)
                d.update(name=name, seed=seed, variant=variant)
                d.pop("rounds", None)
                try:
                    sc = validate(d)
                except ScenarioError as e:
                    raise _rekey(e, variant, over or {}, point) from None
                checked[(variant, pi)] = True
                cells.append(Cell(name=name, variant=variant, sweep=point, point=pi, seed=seed, scenario=sc))
    if len({c.name for c in cells}) != len(cells):
        raise ScenarioError("variants", "two cells get the same name: make the variant names or sweep values differ")
    return Study(name=f.name, description=f.description, variants=tuple(f.variants), sweep_keys=keys, points=points,
                 seeds=seeds, metrics=tuple(f.metrics) if f.metrics else None, confidence=f.confidence,
                 cells=tuple(cells), source=source, notes=notes)


def load_study(path: str | Path) -> Study:
    """Read a study file (the scenario's file limits) and :func:`expand` it.

    Raises:
        ScenarioError: as :func:`expand`, or an unreadable file.
    """
    path = Path(path)
    return expand(read_yaml_file(path), source=path.resolve())


def is_study(data: Any) -> bool:
    """Whether parsed YAML data is a study file: it has ``variants``, or a ``base`` without the
    ``fabrics`` and ``traffic`` of a comparison file (no scenario has a base, no study a top-level
    traffic), so that a study with a misspelt ``variants`` is checked as the study it is, and a
    comparison with a misspelt ``fabrics`` as a comparison."""
    return isinstance(data, dict) and ("variants" in data or ("base" in data and "fabrics" not in data
                                                              and "traffic" not in data))


# --- which cells share a fabric -----------------------------------------------------------------

def fabric_signature(sc: Scenario) -> str:
    """What a round cannot change of a resolved scenario, as text: cells with equal signatures may
    run as rounds of one fabric (the verification in :func:`plan_runs` decides)."""
    d = sc.to_data()
    for k in ("name", "description", "seed", "variant", "rounds", "hosts"):
        d.pop(k, None)
    d["roce"] = {k: v for k, v in d["roce"].items() if k not in ("mode", "cc")}    # a round's rate controller
    d["ecn"] = {"marker": d["ecn"]["marker"]}
    if d.get("pfc"):
        d["pfc"] = {k: v for k, v in d["pfc"].items() if k != "enabled"}
    if d.get("collective"):
        d["collective"] = {k: v for k, v in d["collective"].items() if k not in ROUND_COLLECTIVE_KEYS}
    t = d.get("traffic")
    if t and t.get("pattern") == "incast" and sc.collective.kind is None:
        if t.get("sender_hosts") is None:
            t.pop("senders", None)
        if t.get("incast_mode") == "blocks":
            t.pop("block_bytes", None)
    return json.dumps(d, sort_keys=True, default=str)


@dataclass(frozen=True)
class RunOutcome:
    """What a dispatch yields for one :class:`RunPlan` as its fabric run ends: ``run_dir``, the run's
    results folder here (None when it did not run), and ``error``, why it failed (None when it ran;
    a run that was unfaithful still ran)."""
    plan: "RunPlan"
    run_dir: Optional[Path]
    error: Optional[str] = None


class Dispatch(Protocol):
    """Runs a study's fabric runs: ``dispatch(plans, runs_dir, on_round)`` yields one
    :class:`RunOutcome` per plan as runs end, in any order (:func:`serial` here, one after
    another; experiments.studydask.DaskDispatch over machines). ``on_round(cell name, round
    folder, summary)`` may be called as rounds finish (a progress bar), or never."""

    def __call__(self, plans: list, runs_dir: Path, on_round) -> Iterator[RunOutcome]: ...


@dataclass(frozen=True)
class RunPlan:
    """One fabric's run: a multi-round scenario whose rounds are ``cells`` (in order); ``why_alone``
    says why a cell that could have shared a fabric did not (None otherwise)."""
    name: str
    scenario: Scenario
    cells: tuple
    why_alone: Optional[str] = None


def _group_scenario(name: str, cells: list[Cell]) -> Scenario:
    """The multi-round scenario running ``cells`` as its rounds (the first cell's scenario as the
    base, every round its cell's own resolved round in file syntax)."""
    first = cells[0].scenario
    d = first.to_data()
    d["name"] = name
    d.pop("variant", None)                          # every round gives its own
    d["ecn"] = {"marker": d["ecn"]["marker"]}       # every round gives its whole profile
    d["rounds"] = [_round_data(c.scenario.rounds[0], c.scenario) for c in cells]
    if d.get("pfc") is None:
        d.pop("pfc", None)
        d.pop("priorities", None)
    if d.get("rounds") and "traffic" not in d:
        pass
    return validate(d)


def _same_round(a, b) -> bool:
    return a.model_copy(update={"name": b.name}) == b


def _chunks(cells: list[Cell], max_rounds: int) -> list[list[Cell]]:
    """``cells`` (seed-major) in consecutive runs of at most ``max_rounds``, cut between seeds so
    that a seed's variants share one fabric run and drift alike; a seed with more cells than
    ``max_rounds`` is cut within itself."""
    seeds: list[list[Cell]] = []
    for c in cells:
        if seeds and seeds[-1][0].seed == c.seed:
            seeds[-1].append(c)
        else:
            seeds.append([c])
    out: list[list[Cell]] = []
    cur: list[Cell] = []
    for group in seeds:
        if len(cur) + len(group) > max_rounds and cur:
            out.append(cur)
            cur = []
        while len(group) > max_rounds:
            out.append(group[:max_rounds])
            group = group[max_rounds:]
        cur += group
    if cur:
        out.append(cur)
    return out


def plan_runs(study: Study, max_rounds: int = MAX_ROUNDS) -> list[RunPlan]:
    """The study's fabric runs: cells with one :func:`fabric_signature` together (in the study's
    cell order, at most ``max_rounds`` per run, cut between seeds: :func:`_chunks`), each group
    checked: a cell whose round in the group's scenario differs from its own resolved round runs
    alone (with the reason).
    """
    groups: dict[str, list[Cell]] = {}
    for c in study.cells:
        groups.setdefault(fabric_signature(c.scenario), []).append(c)
    runs: list[RunPlan] = []
    for cells in groups.values():
        for chunk in _chunks(cells, max_rounds):
            name = f"{study.name[:48]}-run{len(runs) + 1}"
            try:
                sc = _group_scenario(name, chunk)
                bad = [c for c, r in zip(chunk, sc.rounds) if not _same_round(c.scenario.rounds[0], r)]
                why = "its round differs when run beside others" if bad else None
            except ScenarioError as e:
                bad, why = list(chunk), f"the cells do not form one scenario ({e})"
            good = [c for c in chunk if c not in bad]
            if good and bad:
                sc = _group_scenario(name, good)
            if good:
                runs.append(RunPlan(name=name, scenario=sc, cells=tuple(good)))
            for c in bad:
                alone = f"{study.name[:48]}-run{len(runs) + 1}"
                runs.append(RunPlan(name=alone, scenario=_group_scenario(alone, [c]), cells=(c,), why_alone=why))
    return runs


# --- running a study and writing its folder ------------------------------------------------------

#: study.csv's fixed columns (the swept keys go between ``variant`` and ``seed``).
STUDY_COLUMNS = ("study", "cell", "variant", "seed", "metric", "value", "unit")
#: study_fct.csv's fixed columns (the swept keys go between ``variant`` and ``seed``).
FCT_COLUMNS = ("cell", "variant", "seed", "flow_id", "bytes", "fct_s", "ideal_fct_s", "slowdown")


def study_folder(results_root: Path, name: str) -> Path:
    """A new ``<UTC time>-<name>`` folder under ``results_root`` (created, experiments.folders).

    Raises:
        PathError: ``results_root`` cannot hold it (experiments.folders.check_results_root).
    """
    return folders.make_folder(folders.next_folder(folders.check_results_root(results_root), name))


def cell_record(cell: Cell, round_dir: Optional[Path], study_dir: Path, error: Optional[str] = None) -> dict:
    """One cell's entry of comparison.json (``cells``): where its results are and what it measured.

    ``round_dir``: the cell's results folder (its round's folder: summary.json, flows.csv, plots), or
    None when it did not run (``error`` says why). ``status``: ok, unfaithful (a fidelity check
    failed; its values are kept and marked) or failed. ``values``: the metrics; ``paths``: flow id ->
    its traced path; ``fcts``: its study_fct.csv rows (:func:`fct_rows`)."""
    rec = {"cell": cell.name, "variant": cell.variant, "sweep": dict(cell.sweep), "seed": cell.seed,
           "dir": None, "status": "failed", "error": error, "bottleneck": None, "values": {}, "paths": {}}
    if round_dir is None or not (round_dir / "summary.json").is_file():
        rec["error"] = error or "no summary.json (the round did not finish)"
        return rec
    summary = json.loads((round_dir / "summary.json").read_text())
    fid = summary.get("fidelity") or {}
    rec.update(dir=str(round_dir.relative_to(study_dir)), status="ok" if fid.get("ok", True) else "unfaithful",
               error=None if fid.get("ok", True) else "; ".join(map(str, fid.get("failures") or [])) or "unfaithful",
               bottleneck=(summary.get("bottleneck") or {}).get("intf"), values=measure_summary(summary))
    rec["paths"] = {str(f["flow_id"]): f.get("path") for f in _read_csv(round_dir / "flows.csv") if f.get("path")}
    rec["fcts"] = fct_rows(rec, study_dir)      # read once: study_fct.csv is rewritten after every run
    return rec


def measure_summary(summary: dict) -> dict:
    """Every registered metric of one round's summary (experiments.metrics.measure)."""
    return measure(summary)


def _read_csv(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def fct_rows(cell: dict, study_dir: Path) -> list[dict]:
    """study_fct.csv rows of one cell record: every completed flow (flows.csv) or RoCE message
    (roce_messages.csv) with its bytes and completion time; ``ideal_fct_s`` and ``slowdown`` when
    the round's flows.csv gives the ideal FCT."""
    if not cell.get("dir"):
        return []
    d = study_dir / cell["dir"]
    out = []
    msgs = _read_csv(d / "roce_messages.csv")
    rows = msgs or _read_csv(d / "flows.csv")
    for i, r in enumerate(rows):
        fct = r.get("fct_s")
        if not fct:
            continue
        size = r.get("bytes") or r.get("bytes_planned") or r.get("bytes_received")
        ideal = r.get("ideal_fct_s") or None
        out.append({"cell": cell["cell"], "variant": cell["variant"], **cell["sweep"], "seed": cell["seed"],
                    "flow_id": r.get("flow_id", i) if not msgs else f"{r['flow_id']}.{r['message']}",
                    "bytes": size, "fct_s": fct, "ideal_fct_s": ideal,
                    "slowdown": float(fct) / float(ideal) if ideal else None})
    return out


def long_rows(study: Study, cells: list[dict], metrics: list[str]) -> list[dict]:
    """study.csv's rows: one per (cell, metric), the swept keys as columns, empty value = not measured."""
    out = []
    for c in cells:
        for m in metrics:
            out.append({"study": study.name, "cell": c["cell"], "variant": c["variant"], **c["sweep"],
                        "seed": c["seed"], "metric": m, "value": c["values"].get(m), "unit": METRICS[m].unit})
    return out


def compared_metrics(study: Study, cells: list[dict]) -> list[str]:
    """The study's ``metrics``, or every registered metric some usable cell measured."""
    if study.metrics:
        return list(study.metrics)
    return [m for m in METRICS if any(c["values"].get(m) is not None for c in cells if c["status"] != "failed")]


def paths_paired(cells: list[dict]) -> dict:
    """Whether every seed put every flow on the same path in every variant (at one sweep point):
    ``{"checked": seeds x points compared, "same": bool, "differing": [{seed, sweep, flow_id, paths}]}``."""
    groups: dict = {}
    for c in cells:
        if c["paths"]:
            groups.setdefault((c["seed"], json.dumps(c["sweep"], sort_keys=True)), []).append(c)
    differing = []
    for (seed, sweep), cs in groups.items():
        ids = set().union(*(c["paths"] for c in cs))
        for fid in sorted(ids, key=str):
            seen = {c["variant"]: c["paths"].get(fid) for c in cs}
            if len(set(seen.values())) > 1:
                differing.append({"seed": seed, "sweep": json.loads(sweep), "flow_id": fid, "paths": seen})
    return {"checked": len(groups), "same": not differing, "differing": differing[:50]}


def bottlenecks(cells: list[dict]) -> list[dict]:
    """Each usable cell's bottleneck port (the port that held the most), against the study's usual
    one (the most frequent: ``moved``) and against the first variant's of the same seed and sweep
    point (``differs_in_seed``): a bottleneck that moved is named, never hidden behind "the
    bottleneck queue". In an incast a moved bottleneck means ECMP put several flows on one
    uplink; in a permutation each seed has its own."""
    named = [c for c in cells if c.get("bottleneck")]
    if not named:
        return []
    usual = Counter(c["bottleneck"] for c in named).most_common(1)[0][0]
    first: dict = {}
    for c in named:
        first.setdefault((c["seed"], json.dumps(c["sweep"], sort_keys=True)), c["bottleneck"])
    return [{"cell": c["cell"], "variant": c["variant"], "seed": c["seed"], "bottleneck": c["bottleneck"],
             "usual": usual, "moved": c["bottleneck"] != usual,
             "differs_in_seed": c["bottleneck"] != first[(c["seed"], json.dumps(c["sweep"], sort_keys=True))]}
            for c in named]


def format_bottlenecks(rows: list[dict]) -> list[str]:
    """The terminal's lines on where the bottleneck was: the usual port and how many cells had it,
    the others by count, and the cells whose bottleneck differed from their seed's first variant."""
    if not rows:
        return []
    usual = rows[0]["usual"]
    moved = Counter(r["bottleneck"] for r in rows if r["moved"])
    lines = [f"bottleneck: {usual} in {len(rows) - sum(moved.values())} of {len(rows)} cells"
             + (f"; moved to {', '.join(f'{p} ({n})' for p, n in moved.most_common())}" if moved else "")]
    within = [r for r in rows if r["differs_in_seed"]]
    if within:
        lines.append("bottleneck differs from the same seed's first variant: "
                     + ", ".join(f"{r['cell']} at {r['bottleneck']}" for r in within))
    elif moved:
        lines.append("bottleneck: each seed's is the same in every variant (the seeds' traffic differs)")
    return lines


def compare(study: Study, cells: list[dict], metrics: list[str], n_resamples: int = 9999) -> dict:
    """comparison.json's statistics (experiments.studystats): per variant, sweep point and metric
    the median with a bootstrap CI over seeds; per pair of variants (every pair, in the file's
    order: A is the earlier) and sweep point, each metric's paired difference and ratio with
    their CIs, the Wilcoxon p-value, Holm-adjusted over the pair's metrics, the verdict and the
    seeds needed. Intervals are simultaneous over the metrics (Bonferroni level). Unfaithful and
    failed cells count as missing."""
    from experiments import studystats as st
    usable = {(c["variant"], c["seed"], json.dumps(c["sweep"], sort_keys=True)): c
              for c in cells if c["status"] == "ok"}
    level = st.simultaneous_confidence(study.confidence, max(1, len(metrics)))
    per_variant, pairs = [], []
    for point in study.points:
        pkey = json.dumps(point, sort_keys=True)

        def values(variant: str, m: str) -> list:
            return [(usable.get((variant, s, pkey)) or {}).get("values", {}).get(m) for s in study.seeds]
        for v in study.variants:
            for m in metrics:
                vals = values(v, m)
                per_variant.append({"variant": v, "sweep": point, "metric": m, "values": vals,
                                    "seeds": list(study.seeds), **st.summarize_variant(
                                        vals, confidence=level, n_resamples=n_resamples).as_dict()})
        for a, b in itertools.combinations(study.variants, 2):
            fam = [st.compare_paired(values(a, m), values(b, m), METRICS[m].better, confidence=level,
                                     n_resamples=n_resamples) for m in metrics]
            fam = st.adjust_family(fam, confidence=study.confidence)
            pairs += [{"a": a, "b": b, "sweep": point, "metric": m, **p.as_dict()} for m, p in zip(metrics, fam)]
    return {"confidence": study.confidence, "simultaneous_confidence": level,
            "per_variant": per_variant, "pairs": pairs}


def write_study(out: Path, study: Study, cells: list[dict], n_resamples: int = 9999) -> dict:
    """Write study.csv, study_fct.csv and comparison.json for the cells done so far; return the
    comparison (``complete`` false until every cell is in)."""
    metrics = compared_metrics(study, cells)
    keys = list(study.sweep_keys)
    write_csv(out / "study.csv", list(STUDY_COLUMNS[:3]) + keys + list(STUDY_COLUMNS[3:]), long_rows(study, cells, metrics))
    fcts = [r for c in cells for r in c.get("fcts", ())]
    write_csv(out / "study_fct.csv", list(FCT_COLUMNS[:2]) + keys + list(FCT_COLUMNS[2:]), fcts)
    result = {"study": study.name, "description": study.description, "complete": len(cells) == len(study.cells),
              "variants": list(study.variants), "sweep_keys": keys, "seeds": list(study.seeds),
              "metrics": {m: {"unit": METRICS[m].unit, "better": METRICS[m].better, "title": METRICS[m].title}
                          for m in metrics},
              "cells": [{k: v for k, v in c.items() if k not in ("values", "paths", "fcts")} for c in cells],
              **compare(study, cells, metrics, n_resamples=n_resamples),
              "bottlenecks": bottlenecks(cells), "paths": paths_paired(cells)}
    (out / "comparison.json").write_text(json.dumps(result, indent=1, allow_nan=False))
    return result


def preflight(study: Study, plans: list[RunPlan], env: dict | None = None, check=None) -> None:
    """Check every fabric run of the study against this machine before the first starts
    (experiments.runner.preflight: the kernel's congestion controls, qdiscs, the datapath ...),
    so that a variant the kernel cannot run stops the study before anything is created.
    ``check(scenario, env)`` replaces the runner's (tests).

    Raises:
        CapabilityError, ScenarioError: naming the variant's key (``variants.dctcp.hosts.tcp_congestion_control:
            the kernel has no 'dctcp' ...``).
    """
    from experiments import runner
    check = check or runner.preflight
    if env is None:
        from experiments import probe
        env = probe.probe()
    for plan in plans:
        try:
            check(plan.scenario, env)
        except (CapabilityError, ScenarioError) as e:
            text = f"{e.key}: {e.detail}" if isinstance(e, ScenarioError) else str(e)
            m = re.match(r"rounds\[(\d+)\]\.([^:\s]+):? (.*)", text)
            if m and int(m.group(1)) < len(plan.cells):
                cell = plan.cells[int(m.group(1))]
                raise type(e)(*_error_args(e, f"variants.{cell.variant}.{m.group(2)}", m.group(3),
                                           cell)) from None
            raise


def _error_args(e: Exception, key: str, detail: str, cell: Cell) -> tuple:
    """The arguments of an error like ``e`` naming ``key`` (a ScenarioError takes key and detail)."""
    detail = f"{detail} (cell {cell.name})"
    return (key, detail) if isinstance(e, ScenarioError) else (f"{key}: {detail}",)


def _round_dirs(run_dir: Path) -> dict[str, Path]:
    """``{round name: its folder}`` of a multi-round results folder (``rounds/<nn>-<name>``)."""
    rounds = run_dir / "rounds"
    return {d.name.split("-", 1)[1]: d for d in sorted(rounds.iterdir())} if rounds.is_dir() else {}


def run_plan(plan: RunPlan, runs_dir: Path, on_round=None, quiet: bool = True) -> Path:
    """Run one fabric's cells as the rounds of its scenario (experiments.runner.run; a failed
    fidelity check marks the cells, it does not stop the study); return the run's folder.
    ``on_round(name, folder, summary)``: called as each cell's round is analysed.

    Raises: what experiments.runner.run raises, UnfaithfulRun excepted.
    """
    from experiments import runner
    return runner.run(plan.scenario, runs_dir, quiet=quiet, accept_unfaithful=True, on_round=on_round)


def format_cell(c: dict) -> str:
    """One line per cell for the terminal."""
    if c["status"] == "failed":
        return f"{c['cell']}: FAILED: {c['error']}"
    mark = " (UNFAITHFUL)" if c["status"] == "unfaithful" else ""
    return f"{c['cell']}{mark}: {one_line(c['values'], c['bottleneck'])}"


def serial(runner=None) -> Dispatch:
    """The default :class:`Dispatch`: every fabric run here, one after another (:func:`run_plan`,
    or ``runner(plan, runs_dir, on_round) -> run folder``: tests)."""
    run = runner or run_plan

    def dispatch(plans, runs_dir: Path, on_round) -> Iterator[RunOutcome]:
        for plan in plans:
            try:
                yield RunOutcome(plan, run(plan, runs_dir, on_round))
            except (SetupError, CapabilityError, BusyError) as e:
                yield RunOutcome(plan, None, f"{type(e).__name__}: {e}")
    return dispatch


def run_study(study: Study, results_root: Path, quiet: bool = False, runner=None,
              dispatch: Optional[Dispatch] = None) -> tuple[Path, dict]:
    """Run every cell of a checked study (:func:`plan_runs`: one fabric run per group of cells) and
    write the study folder: ``runs/`` (each fabric run's results folder; a cell's own folder is
    its round's), study.csv, study_fct.csv, comparison.json (rewritten after every run: an
    interrupted study keeps what it finished) and the report. ``dispatch`` (default
    :func:`serial` of ``runner``) runs the fabric runs. Returns the folder and the comparison.

    Raises:
        KeyboardInterrupt, SystemExit: a signal stopped it (the finished runs are written).
    """
    out = study_folder(results_root, study.name)
    runs_dir = out / "runs"
    runs_dir.mkdir()
    plans = plan_runs(study)
    (out / "study.json").write_text(json.dumps(
        {"study": study.name, "description": study.description, "source": str(study.source) if study.source else None,
         "variants": list(study.variants), "sweep_keys": list(study.sweep_keys), "points": list(study.points),
         "seeds": list(study.seeds), "metrics": list(study.metrics) if study.metrics else None,
         "runs": [{"name": p.name, "cells": [c.name for c in p.cells], "why_alone": p.why_alone} for p in plans]},
        indent=1))
    dispatch = dispatch or serial(runner)
    progress = Progress("study cells", len(study.cells), quiet)
    cells: list[dict] = []
    by_name = {c.name: c for c in study.cells}
    order = {c.name: i for i, c in enumerate(study.cells)}
    reported: set = set()
    built: dict[str, tuple[Path, dict]] = {}     # cell -> (its round's folder, its record) as analysed
    result: dict = {}

    def on_round(name: str, rdir: Path, _summary: dict) -> None:
        if name in by_name and name not in reported:
            reported.add(name)
            built[name] = (rdir, cell_record(by_name[name], rdir, out))
            progress.advance(1, format_cell(built[name][1]))

    def record(c: Cell, rdir: Optional[Path], error: Optional[str]) -> dict:
        seen = built.get(c.name)
        if error is None and seen is not None and rdir is not None and seen[0] == rdir:
            return seen[1]
        return cell_record(c, rdir, out, error)
    try:
        for o in dispatch(plans, runs_dir, on_round):
            dirs = _round_dirs(o.run_dir) if o.run_dir is not None else {}
            done = [record(c, dirs.get(c.name), o.error) for c in o.plan.cells]
            cells = sorted(cells + done, key=lambda c: order[c["cell"]])
            result = write_study(out, study, cells)
            for c in done:
                if c["cell"] not in reported:
                    reported.add(c["cell"])
                    progress.advance(1, format_cell(c))
    finally:
        progress.close()
    from experiments import studyreport     # matplotlib: only when the study has run
    studyreport.write_report(out)
    return out, result


def format_comparison(result: dict, out: Path) -> str:
    """The study's verdicts for the terminal: per pair of variants and sweep point, each metric's
    medians, ratio with its CI and the verdict."""
    from experiments import studystats     # scipy: only when there is a comparison to print
    lines = ["", f"== fabriclab study: {result['study']} ({len(result['seeds'])} seeds; intervals "
                 f"{100 * result['simultaneous_confidence']:.2f}% each, "
                 f"{100 * result['confidence']:.0f}% over all metrics; p Wilcoxon, Holm-adjusted) =="]

    def g(x):
        return "-" if x is None else f"{x:.4g}"
    head = None
    lowest = None
    for p in result["pairs"]:
        sweep = " ".join(f"{k}={v}" for k, v in p["sweep"].items())
        h = f"{p['a']} (A) vs {p['b']} (B){' at ' + sweep if sweep else ''}:"
        if h != head:
            head = h
            lines += [h, f"  {'metric':<24} {'A median':>10} {'B median':>10} {'unit':<8} {'B/A [CI]':<24} "
                         f"{'p':>7}  verdict"]
        verdict = p["verdict"].replace("A ", f"{p['a']} ").replace("B ", f"{p['b']} ")
        short = studystats.short_interval(p, studystats.interval_level(result))
        if short is not None:
            lowest = min(lowest or short, short)
        ratio = f"{g(p['ratio'])} [{g(p['ratio_ci_low'])}, {g(p['ratio_ci_high'])}]{'*' if short else ''}"
        lines.append(f"  {p['metric']:<24} {g(p['a_median']):>10} {g(p['b_median']):>10} "
                     f"{result['metrics'][p['metric']]['unit']:<8} {ratio:<24} {g(p['p_adjusted']):>7}  {verdict}")
    if lowest is not None:
        lines.append(f"* too few seeds for a {100 * result['simultaneous_confidence']:.4g}% interval: the widest "
                     f"they allow, [min, max] of the per-seed values, holds at {100 * lowest:.4g}% (and no verdict "
                     "can say a difference: see seeds_needed in comparison.json)")
    lines += format_bottlenecks(result["bottlenecks"])
    paths = studystats.paths_sentence(result["paths"], len(result["variants"]))
    if paths:
        lines.append(f"paths: {paths}")
    bad = [c for c in result["cells"] if c["status"] != "ok"]
    for c in bad:
        lines.append(f"cell {c['cell']}: {c['status']}: {c['error']}")
    lines.append(f"results: {out}")
    return "\n".join(lines)
