"""What every coursework lab is: its questions, the figures it reads from the student's own
results, and the check of an answers file against bands derived from them and the model.

A lab is one module under ``experiments/labs/`` (a :class:`Lab` subclass) plus its folder
``labs/<NN>-<slug>/`` (the sheet ``README.md`` and ``answers.yaml``, the template the student
fills in), registered in :data:`experiments.labs.LABS`. The check reads nothing but files: the
student's results folder (every run the lab asks for, found by scenario name) and their answers.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from common.errors import FabriclabError, ScenarioError
from experiments.scenario import read_yaml_file

REPO = Path(__file__).resolve().parents[2]
LABS_DIR = REPO / "labs"


class LabError(FabriclabError):
    """A lab cannot be checked: its results or answers are missing or unreadable (exit 2)."""


@dataclass(frozen=True)
class Question:
    """One question of a lab sheet.

    Attributes:
        id: its key in the answers file (``q1`` ...).
        prompt: the question as the sheet asks it.
        unit: the answer's unit (``packets``, ``s``, ``Mbit/s``, ``ratio``; ``""`` for a choice).
        kind: ``number`` (checked against a :class:`Band`), ``choice`` (one of ``choices``) or
            ``text`` (a name, e.g. a link, compared by :meth:`Lab.same`).
        choices: the accepted words of a choice question.
        run: the scenario name of the run it reads (the student's results must hold one).
    """
    id: str
    prompt: str
    unit: str
    kind: Literal["number", "choice", "text"]
    run: str
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Band:
    """The answers a number question accepts: ``low <= answer <= high``; ``why`` says where the
    band comes from (the student's measurement, the model, the tolerance)."""
    low: float
    high: float
    why: str

    def __contains__(self, x: float) -> bool:
        return self.low <= x <= self.high

    def text(self, unit: str) -> str:
        """``low..high unit`` with as many digits as the band needs."""
        span = abs(self.high - self.low) or abs(self.high) or 1.0
        digits = max(0, min(6, 2 - int(math.floor(math.log10(span))))) if span > 0 else 2
        return f"{self.low:.{digits}f}..{self.high:.{digits}f} {unit}".rstrip()


def around(measured: float, rel: float, floor: float, why: str) -> Band:
    """A band of ``measured`` +- max(``rel`` x |measured|, ``floor``): reading a figure off the
    student's own files (``floor``: the figure's resolution, in its unit)."""
    half = max(rel * abs(measured), floor)
    return Band(measured - half, measured + half, why)


@dataclass(frozen=True)
class Verdict:
    """The check of one answer: ``ok``, and ``why`` (what was expected, from what)."""
    question: Question
    answer: Any
    ok: bool
    expected: str
    why: str


@dataclass
class Figures:
    """What a lab read from the student's results: ``values[question id]`` (a number, or the
    right choice), ``bands[id]`` for number questions, ``notes[id]`` (where each came from and
    what the model says), and ``missing[id]`` for questions whose run is not in the folder."""
    values: dict = field(default_factory=dict)
    bands: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)
    missing: dict = field(default_factory=dict)


class Lab:
    """A coursework lab (subclass it; register it in experiments.labs.LABS).

    Class attributes: ``NUMBER`` (1..), ``SLUG`` (its folder is ``labs/<NN>-<SLUG>``),
    ``TITLE``, ``RUNS`` (scenario name -> the file the student runs, relative to the repository),
    ``QUESTIONS`` (:class:`Question`, in the sheet's order).
    """
    NUMBER: int = 0
    SLUG: str = ""
    TITLE: str = ""
    RUNS: dict[str, str] = {}
    QUESTIONS: tuple[Question, ...] = ()

    @classmethod
    def folder(cls) -> Path:
        """``labs/<NN>-<SLUG>/``: the sheet and the answers template."""
        return LABS_DIR / f"{cls.NUMBER:02d}-{cls.SLUG}"

    def measure(self, runs: dict[str, Path]) -> Figures:
        """The figures of every question from the student's run folders (``runs``: scenario
        name -> the newest run folder of it found in the results); a question whose run is
        absent goes to ``missing``. Subclasses implement it."""
        raise NotImplementedError

    def reseed(self, name: str, data: dict, seed: int) -> dict:
        """Run ``name``'s scenario data as the ``seed``-th repetition (1, 2, ...), for the teacher's
        guide's spread over seeds (scripts/lab_outcomes.py): the scenario's ``seed``, and every
        round's own seed shifted by (seed - 1) x the number of rounds."""
        out = dict(data, seed=seed)
        if out.get("rounds"):
            n = len(out["rounds"])
            out["rounds"] = [dict(r, seed=r["seed"] + (seed - 1) * n) if r.get("seed") is not None else r
                             for r in out["rounds"]]
        return out

    def command(self, name: str) -> str:
        """The command line that makes run ``name`` (default ``sudo fabriclab run FILE --results DIR``)."""
        return f"sudo fabriclab run {self.RUNS[name]} --results DIR"

    def same(self, q: Question, answer, right) -> bool:
        """Whether a choice or text ``answer`` is the ``right`` one: equal, ignoring case and the
        spaces around it, or, for a choice, naming exactly one of its choices among other words
        (``the hierarchical one``); a lab may know equivalent spellings."""
        a = str(answer).strip().lower()
        if a == str(right).strip().lower():
            return True
        named = {c for c in q.choices if re.search(rf"(?<![\w-]){re.escape(c.lower())}(?![\w-])", a)}
        return named == {str(right).strip().lower()}

    # -- the check, the same for every lab ---------------------------------------------------

    def check(self, results: Path, answers: dict) -> list[Verdict]:
        """Check ``answers`` (question id -> answer) against the figures of the student's
        ``results`` folder: one :class:`Verdict` per question, in the sheet's order.

        Raises:
            LabError: an answer's key is not a question of this lab, or no run of the lab is
                in ``results``.
        """
        known = {q.id for q in self.QUESTIONS}
        unknown = sorted(set(answers) - known)
        if unknown:
            raise LabError(f"answers: unknown question {unknown[0]!r} (lab {self.NUMBER} asks {', '.join(sorted(known))})")
        runs = find_runs(results, self.RUNS)
        if not runs:
            raise LabError(f"{results}: no finished run of lab {self.NUMBER} in it (it needs "
                           + ", ".join(f"{n} from {p}" for n, p in self.RUNS.items()) + ")")
        fig = self.measure(runs)
        return [self._one(q, answers.get(q.id), fig) for q in self.QUESTIONS]

    def _one(self, q: Question, answer, fig: Figures) -> Verdict:
        note = fig.notes.get(q.id, "")
        if q.id in fig.missing:
            return Verdict(q, answer, False, "-", fig.missing[q.id])
        if answer is None:
            return Verdict(q, None, False, _expected(q, fig), "no answer given; " + note)
        if q.kind in ("choice", "text"):
            right = fig.values[q.id]
            ok = self.same(q, answer, right)
            hint = f"answer one of: {', '.join(q.choices)}; " if q.choices and not ok else ""
            return Verdict(q, answer, ok, str(right), (hint + note).rstrip("; "))
        x = as_number(answer, q.unit)
        if x is None:
            unit = f" in {q.unit} (give the number alone, or followed by {q.unit})" if q.unit else ""
            return Verdict(q, answer, False, _expected(q, fig), f"not a number{unit}; {note}")
        band = fig.bands[q.id]
        return Verdict(q, answer, x in band and math.isfinite(x), band.text(q.unit), f"{band.why}; {note}".rstrip("; "))


def as_number(answer, unit: str) -> float | None:
    """An answer as a number: a number, or text of one (a decimal comma too: ``2,87``), followed
    by nothing or by the question's own ``unit`` (``9.19 Mbit/s``), or a ratio ``N:M`` (``3:1``
    is 3); None otherwise."""
    if isinstance(answer, bool):
        return None
    if isinstance(answer, (int, float)):
        return float(answer)
    text = str(answer).strip()
    ratio = re.fullmatch(r"(\d+(?:\.\d+)?)\s*:\s*(\d+(?:\.\d+)?)", text)
    if ratio and float(ratio.group(2)) > 0:                       # 3:1 -> 3
        return float(ratio.group(1)) / float(ratio.group(2))
    if unit and text.lower().endswith(unit.lower()):
        text = text[:-len(unit)].strip()
    if text.count(",") == 1 and "." not in text:
        text = text.replace(",", ".")
    try:
        return float(text)
    except ValueError:
        return None


def _expected(q: Question, fig: Figures) -> str:
    return fig.bands[q.id].text(q.unit) if q.kind == "number" else str(fig.values[q.id])


def find_runs(results: Path, wanted: dict[str, str]) -> dict[str, Path]:
    """The newest finished run folder of each scenario name in ``wanted`` under ``results`` (the
    folder itself, or folders ``<UTC time>-<name>`` in it), by its recorded scenario.yaml's name
    (a comparison's folder: by its comparison.json's name).
    A run that did not finish (interrupted, killed: no ``timings.json``, which a run writes as it
    ends, or no ``diagnosis.json``; a comparison whose comparison.json is not ``complete``) is
    passed over."""
    results = Path(results)
    found: dict[str, Path] = {}
    candidates = [results] + (sorted(p for p in results.iterdir() if p.is_dir()) if results.is_dir() else [])
    for d in candidates:
        if not (d / "timings.json").is_file() and not (d / "diagnosis.json").is_file() and not _complete_comparison(d):
            continue
        name = _run_name(d)
        if name in wanted:
            found[name] = d                      # sorted by time stamp: the newest wins
    return found


def _complete_comparison(d: Path) -> bool:
    """Whether ``d`` is a comparison's folder (``fabriclab compare``) that ran every planned run."""
    try:
        return bool(json.loads((d / "comparison.json").read_text()).get("complete"))
    except (OSError, ValueError, AttributeError):
        return False


def _run_name(d: Path) -> str | None:
    if _complete_comparison(d):
        return json.loads((d / "comparison.json").read_text()).get("name")
    if (d / "scenario.yaml").is_file():
        try:
            data = read_yaml_file(d / "scenario.yaml")
            return data.get("name") if isinstance(data, dict) else None
        except FabriclabError:
            return None
    return json.loads((d / "diagnosis.json").read_text()).get("scenario")


def round_folder(run: Path, name: str) -> Path:
    """Round ``name``'s folder of a run with rounds (``rounds/<nn>-<name>``: the name exactly, so
    ``pfc`` is not ``ecn-pfc``).

    Raises:
        FileNotFoundError: the run has no such round.
    """
    for d in sorted((Path(run) / "rounds").iterdir()) if (Path(run) / "rounds").is_dir() else ():
        if d.name.split("-", 1)[-1] == name:
            return d
    raise FileNotFoundError(f"{run}: no round {name!r}")


def read_answers(path: Path) -> dict:
    """The student's answers file: a YAML mapping of question id to answer (read under the
    scenario files' limits).

    Raises:
        LabError: the file is missing, not YAML, or not a mapping.
    """
    try:
        data = read_yaml_file(path)
    except ScenarioError as e:
        raise LabError(f"answers file {path}: {e.detail}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise LabError(f"answers file {path}: expected a mapping of question ids to answers (q1: 12.5)")
    answers = {str(k): v for k, v in data.items()}
    # YAML 1.1 reads an unquoted 3:1 as the base-60 number 181: keep a ratio as the student wrote it
    for m in RATIO_LINE.finditer(Path(path).read_text(encoding="utf-8")):
        answers[m.group(1)] = f"{m.group(2)}:{m.group(3)}"
    return answers


#: An answers file's line ``q3: 3:1`` (a ratio, quoted or not, maybe with a comment).
RATIO_LINE = re.compile(r"""^ [ \t]* (q\d+) [ \t]*:[ \t]* ["']? [ \t]* (\d+(?:\.\d+)?) [ \t]*:[ \t]* (\d+(?:\.\d+)?)
                            [ \t]* ["']? [ \t]* (?:\#.*)? $""", re.M | re.X)


def report(lab: Lab, verdicts: list[Verdict]) -> str:
    """The check for the terminal: per question what matched and why, then the score."""
    lines = [f"== lab {lab.NUMBER}: {lab.TITLE} =="]
    for v in verdicts:
        q = v.question
        mark = "right" if v.ok else "WRONG"
        unit = f" ({q.unit})" if q.unit else ""
        lines.append(f"{q.id}{unit} {q.prompt}")
        lines.append(f"    your answer: {v.answer if v.answer is not None else '(none)'}: {mark}; "
                     f"expected {v.expected}: {v.why}")
    right = sum(v.ok for v in verdicts)
    lines.append(f"score: {right}/{len(verdicts)}")
    return "\n".join(lines)
