"""The three HTML pages, each rendered from its Jinja2 template (experiments/templates/) on a small
synthetic folder: a run's and a comparison's report.html (experiments.report) and a study's
(experiments.studyreport). A value holding a ``<script>`` is escaped wherever the files put it
(names, descriptions, table cells, captions, errors), the plots' data: URIs are left as they
are, each page has its sections, and the templates escape by default."""
from __future__ import annotations

import base64
import csv
import html
import json

import pytest
from markupsafe import Markup

from experiments import pagekit, report, studyreport as sr
from tests.unit.test_report import check_self_contained, fidelity, png
from tests.unit.test_studyreport import METRICS, make_study

SCRIPT = "<script>alert('x')</script>"
ESCAPED = html.escape(SCRIPT)             # &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;


def escaped_everywhere(text: str, at_least: int) -> None:
    """No script tag anywhere in ``text``, and the escaped one at least ``at_least`` times."""
    assert "<script" not in text.lower() and SCRIPT not in text
    assert text.count(ESCAPED) >= at_least, text.count(ESCAPED)


def sections_in_order(text: str, *marks: str) -> None:
    at = [text.find(m) for m in marks]
    assert -1 not in at, [m for m, i in zip(marks, at) if i == -1]
    assert at == sorted(at), marks


def test_every_template_parses_and_escapes_by_default():
    env = pagekit.environment()
    names = sorted(p.name for p in pagekit.TEMPLATES.glob("*.html.j2"))
    assert {"page.html.j2", "macros.html.j2", "folder.html.j2", "run.html.j2", "comparison.html.j2",
            "study.html.j2"} <= set(names)
    for name in names:
        env.get_template(name)                               # a syntax error fails here
        assert env.autoescape(name) is True, name
    t = env.from_string('<p title="{{ v }}">{{ v }}</p>{{ safe }}')
    assert t.render(v=SCRIPT + '"&', safe=Markup("<b>kept</b>")) == (
        f'<p title="{ESCAPED}&quot;&amp;">{ESCAPED}&quot;&amp;</p><b>kept</b>')
    with pytest.raises(Exception, match="undefined"):
        env.from_string("{{ nothing }}").render()           # a misspelt value is an error, not ""


def test_a_runs_page(tmp_path):
    d = tmp_path / "run"
    (d / "rounds" / "01-a").mkdir(parents=True)
    (d / "rounds" / "02-b").mkdir(parents=True)
    (d / "scenario.yaml").write_text(json.dumps({"name": SCRIPT, "description": SCRIPT}))
    (d / "environment.json").write_text(json.dumps({"datapath": SCRIPT, "kernel": "6.1"}))
    for rd, ok in ((d / "rounds" / "01-a", True), (d / "rounds" / "02-b", False)):
        f = fidelity(ok)
        f["failures"] = [SCRIPT] if not ok else []
        (rd / "summary.json").write_text(json.dumps({"round": SCRIPT if not ok else "a", "note": SCRIPT,
                                                     "fidelity": f}))
    (d / "rounds" / "01-a" / "summary.txt").write_text(f"line one\n{SCRIPT}\n")
    plot = png(d / "rounds" / "01-a" / "q.png", pagekit.Caption(SCRIPT, SCRIPT))
    png(d / "top.png", None)
    with open(d / "rounds.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerows([("round", "value", "folder"), ("a", SCRIPT, "rounds/01-a"), ("b", 2, "rounds/02-b")])
    page = report.write_report(d)
    check_self_contained(page)
    text = page.read_text(encoding="utf-8")
    # the name (title, h1), the description, the datapath (both environment tables), summary.txt, the
    # summaries' figures (3), the round's name (verdict, fidelity table, heading), its failure (fidelity
    # table, list, fidelity block), rounds.csv, the caption (heading, how to read, alt, figcaption)
    escaped_everywhere(text, at_least=20)
    assert f"<title>{ESCAPED}: fabriclab report</title>" in text and f"<h1>{ESCAPED}</h1>" in text
    sections_in_order(text, f"<h1>{ESCAPED}</h1>", '<p class="warn">Unfaithful: 1 of 2 round(s)',
                      "<h2>Environment</h2>", "<h2>Fidelity, round by round</h2>", '<table class="fidelity">',
                      "<h2>The rounds side by side (rounds.csv)</h2>", "<h2>Plots of the whole run</h2>",
                      '<section class="plot generic" data-file="top.png">', "<h2>Round 1: a</h2>",
                      f"<pre>line one\n{ESCAPED}</pre>", '<section class="plot" data-file="rounds/01-a/q.png">',
                      f"<h2>Round 2: {ESCAPED}</h2>", f"<ul><li>{ESCAPED}</li></ul>",
                      "drawn again by <code>python -m experiments plot run</code>")
    assert f'src="data:image/png;base64,{base64.b64encode(plot.read_bytes()).decode()}"' in text
    assert ".wide{overflow-x:auto}" in text and "Content-Security-Policy" in text


def test_a_comparisons_page(tmp_path):
    d = tmp_path / "cmp"
    d.mkdir()
    (d / "comparison.json").write_text(json.dumps(
        {"name": SCRIPT, "description": SCRIPT, "complete": False,
         "runs": [{"fabric": SCRIPT, "run": "r1"}, {SCRIPT: 1.23456, "run": "r2"}],
         "ratios": [{"traffic": SCRIPT, "measured": 0.5}]}))
    png(d / "compare.png", pagekit.Caption("Per host", SCRIPT))
    text = report.write_report(d).read_text(encoding="utf-8")
    check_self_contained(d / "report.html")
    escaped_everywhere(text, at_least=7)
    sections_in_order(text, f"<h1>{ESCAPED}</h1>", '<p class="muted">cmp: a comparison</p>',
                      f"<p>{ESCAPED}</p>", "Incomplete: not every planned run is in.", "<h2>Runs</h2>",
                      f"<th>fabric</th><th>run</th><th>{ESCAPED}</th>", f"<td>{ESCAPED}</td><td>r1</td><td>-</td>",
                      "<td>-</td><td>r2</td><td>1.235</td>", "<h2>Ratios</h2>", "<h2>Plots</h2>",
                      '<section class="plot" data-file="compare.png">')


def test_a_studys_page(tmp_path):
    study = tmp_path / "study"
    metrics = {"fct_median_s": {**METRICS["fct_median_s"], "title": SCRIPT}, "jain_index": METRICS["jain_index"]}
    make_study(study, variants=("cubic", SCRIPT), metrics=metrics, sweep=("k", [5, SCRIPT]), fct=False,
               seeds=(1, 2, 3), description=SCRIPT)
    cmp = json.loads((study / "comparison.json").read_text())
    cmp["cells"][0].update(status="failed", error=SCRIPT)
    cmp["bottlenecks"][0].update(bottleneck=SCRIPT, moved=True)
    cmp["paths"] = {"checked": 3, "same": False, "differing": [{"seed": 1, "flow_id": 0, "paths": {"a": SCRIPT}}]}
    (study / "comparison.json").write_text(json.dumps(cmp))
    st = sr.load_study(study)
    plot = png(study / "metric_jain_index.png", None)
    plots = {"metric": [("jain_index", plot)], "sweep": [], "fct_ecdf": None, "throughput_delay": None,
             "slowdown": None}
    text = sr.write_html(st, plots).read_text(encoding="utf-8")
    escaped_everywhere(text, at_least=21)
    assert "<title>incast-cc: study report</title>" in text
    sections_in_order(text, "<h1>incast-cc</h1>", f"<p>{ESCAPED}</p>", '<h2>Study</h2><dl class="shape">',
                      f"<dt>variants</dt><dd>cubic, {ESCAPED}</dd>", "<h2>Comparison</h2>",
                      "<h3>k=5</h3>", f"<h3>A = cubic, B = {ESCAPED}</h3><table>",
                      f"<tr><td>{ESCAPED}<br><span class=\"muted\">fct_median_s, lower is better</span></td>",
                      f"<h3>k={ESCAPED}</h3>", "<h2>Bottlenecks that moved</h2>", f"<b>{ESCAPED}</b>",
                      "<h2>Paths that differed between variants of one seed</h2>",
                      "<h2>Cells that failed or were unfaithful</h2>", f"<td><pre>{ESCAPED}</pre></td>",
                      "<h2>Plots</h2>", "<h3>Each metric per variant</h3>",
                      f'<figure><img alt="Jain&#x27;s index (jain_index) per variant" src="data:image/png;base64,'
                      f'{base64.b64encode(plot.read_bytes()).decode()}">',
                      "<h3>Flow completion times</h3>", '<p class="muted">No study_fct.csv in the study folder.</p>',
                      "<h3>Each metric against k</h3>", "<h3>Slowdown by flow size</h3>",
                      "by experiments/studyreport.py.</p>")
    assert "&times;" in text and "&minus;" in text                  # the templates' own entities, not escaped
