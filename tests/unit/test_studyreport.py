"""The study report (experiments/studyreport.py) on synthetic study folders: with and without a
sweep, a failed cell, a metric never measured, with and without study_fct.csv, hostile names.
The files are written, the PNGs read back, report.html is self-contained and escaped. A headless
Chromium renders the report where one is installed."""
from __future__ import annotations

import csv
import html
import itertools
import json
import re
import time
import warnings
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
from scipy import stats

from experiments import studyreport as sr
from tests.chromium import CHROMIUM, PROBE, chromium, console_lines

METRICS = {
    "fct_median_s": {"unit": "s", "better": "lower", "title": "FCT median"},
    "fct_p99_s": {"unit": "s", "better": "lower", "title": "FCT p99"},
    "throughput_mbps": {"unit": "Mbit/s", "better": "higher", "title": "throughput"},
    "queue_delay_median_ms": {"unit": "ms", "better": "lower", "title": "queueing delay median"},
    "jain_index": {"unit": "", "better": "higher", "title": "Jain's index"},
    "ecn_marks": {"unit": "packets", "better": None, "title": "ECN marks"},
}
VERDICTS = ["A better", "B better", "no difference", "A higher", "B higher"]


def _value(metric: str, vi: int, k: float, seed: int, rng) -> float:
    base = {"fct_median_s": 0.002 * (1 + vi) * (1 + k / 50), "fct_p99_s": 0.03 * (1 + vi) * (1 + k / 40),
            "throughput_mbps": 900 - 40 * vi - k, "queue_delay_median_ms": 0.2 + 0.1 * k / (1 + vi),
            "jain_index": 0.95 - 0.02 * vi, "ecn_marks": 100 * (1 + k) / (1 + vi)}.get(metric, 1.0 + vi)
    return float(base * (1 + 0.08 * rng.standard_normal()))


def make_study(root: Path, *, variants=("cubic", "dctcp"), sweep=None, seeds=(1, 2, 3, 4, 5),
               failed=None, unmeasured=(), fct=True, metrics=METRICS, write_csv=True,
               description="Two congestion controls on an 8:1 incast.") -> dict:
    """A study folder in the formats the runner writes; returns its comparison.json dict.
    ``sweep``: (key, [values]), {key: [values], ...} (every combination) or None; ``failed``:
    (variant, point index, seed) of a failed cell;
    ``unmeasured``: metrics with no value anywhere."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    sweep = dict([sweep]) if isinstance(sweep, tuple) else dict(sweep or {})
    keys = list(sweep)
    points = [dict(zip(keys, combo)) for combo in itertools.product(*sweep.values())]
    cells, rows, fct_rows, per_variant, pairs = [], [], [], [], []
    vals: dict = {}
    for vi, v in enumerate(variants):
        for pi, pt in enumerate(points):
            for s in seeds:
                name = f"{v}-{'-'.join(f'{x}' for x in pt.values())}-s{s}".replace("--", "-")
                bad = failed == (v, pi, s)
                cells.append({"cell": name, "variant": v, "sweep": pt, "seed": s,
                              "dir": f"cells/{name}", "status": "failed" if bad else "ok",
                              "error": "RuntimeError: <b>agent h3 died</b> & left" if bad else None,
                              "bottleneck": None if bad else "s1-eth1"})
                for m in metrics:
                    k = next((x for x in pt.values() if isinstance(x, (int, float))), 0)
                    x = None if bad or m in unmeasured else _value(m, vi, k, s, rng)
                    vals.setdefault((v, pi, m), []).append(x)
                    rows.append({"study": "s", "cell": name, "variant": v, **pt, "seed": s, "metric": m,
                                 "value": "" if x is None else repr(x), "unit": metrics[m]["unit"]})
                if fct and not bad:
                    for f in range(30):
                        size = float(10 ** rng.uniform(3, 7))
                        ideal = size * 8 / 1e9 + 50e-6
                        t = ideal * (1 + rng.exponential(2 + vi))
                        fct_rows.append({"cell": name, "variant": v, **pt, "seed": s, "flow_id": f,
                                         "bytes": int(size), "fct_s": repr(t),
                                         "ideal_fct_s": repr(ideal) if f % 7 else "",
                                         "slowdown": repr(t / ideal) if f % 7 else ""})
    for (v, pi, m), xs in vals.items():
        got = [x for x in xs if x is not None]
        med = float(np.median(got)) if got else None
        per_variant.append({"variant": v, "sweep": points[pi], "metric": m, "values": xs, "seeds": list(seeds),
                            "n": len(got), "median": med,
                            "ci_low": float(np.min(got)) if len(got) > 1 else None,
                            "ci_high": float(np.max(got)) if len(got) > 1 else None,
                            "mean": float(np.mean(got)) if got else None,
                            "std": float(np.std(got, ddof=1)) if len(got) > 1 else None})
    k = 0
    for pi, pt in enumerate(points):
        for m in metrics:
            a, b = vals[(variants[0], pi, m)], vals[(variants[1], pi, m)]
            ga, gb = [x for x in a if x is not None], [x for x in b if x is not None]
            d = [y - x for x, y in zip(a, b) if x is not None and y is not None]
            verdict = VERDICTS[k % len(VERDICTS)]
            k += 1
            am, bm = (float(np.median(ga)) if ga else None), (float(np.median(gb)) if gb else None)
            pairs.append({"a": variants[0], "b": variants[1], "sweep": pt, "metric": m, "n": len(d),
                          "a_median": am, "b_median": bm, "diff_median": float(np.median(d)) if d else None,
                          "diff_ci_low": float(np.min(d)) if d else None,
                          "diff_ci_high": float(np.max(d)) if d else None,
                          "ratio": bm / am if am and bm else None, "ratio_ci_low": 0.9 if d else None,
                          "ratio_ci_high": 1.4 if d else None, "p_wilcoxon": 0.0312 if d else None,
                          "p_adjusted": 0.0936 if d else None, "verdict": verdict,
                          "seeds_needed": 12 if d else None, "diff_std": 0.1, "unpaired_diff_std": 0.3})
    cmp = {"study": "incast-cc", "description": description, "complete": failed is None,
           "confidence": 0.95, "simultaneous_confidence": 0.8, "variants": list(variants), "sweep_keys": keys,
           "seeds": list(seeds), "metrics": metrics, "cells": cells, "per_variant": per_variant, "pairs": pairs,
           "bottlenecks": [{"cell": cells[-1]["cell"], "variant": variants[-1], "seed": seeds[-1],
                            "bottleneck": "s2-eth3", "usual": "s1-eth1", "moved": True},
                           {"cell": cells[0]["cell"], "variant": variants[0], "seed": seeds[0],
                            "bottleneck": "s1-eth1", "usual": "s1-eth1", "moved": False}]}
    (root / "comparison.json").write_text(json.dumps(cmp, indent=1))
    if write_csv:
        with open(root / "study.csv", "w", newline="") as f:
            w = csv.DictWriter(f, ["study", "cell", "variant", *keys, "seed", "metric", "value", "unit"])
            w.writeheader()
            w.writerows(rows)
    if fct:
        with open(root / "study_fct.csv", "w", newline="") as f:
            w = csv.DictWriter(f, ["cell", "variant", *keys, "seed", "flow_id", "bytes", "fct_s", "ideal_fct_s",
                                   "slowdown"])
            w.writeheader()
            w.writerows(fct_rows)
    return cmp


def _check_pngs(paths):
    for p in paths:
        if p.suffix == ".png":
            img = mpimg.imread(p)
            assert img.ndim == 3 and img.shape[1] >= 800, (p, img.shape)     # 8 in at 110 dpi
            assert img[..., :3].std() > 0.01, f"{p.name} is blank"


class _Tags(HTMLParser):
    """Every start tag of a page with its attributes, as the browser's tokenizer sees them."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _check_html(study: Path, cmp: dict) -> str:
    """report.html: no script, nothing that loads from anywhere but a data: URI, every variant
    and every verdict (spelled with the variant's name) present; returns the text."""
    text = (study / "report.html").read_text()
    low = text.lower()
    assert "<script" not in low and "<link" not in low and "@import" not in low and "url(" not in low
    parser = _Tags()
    parser.feed(text)
    tags = {t for t, _ in parser.tags}
    assert not tags & {"script", "link", "iframe", "object", "embed", "a", "form", "base", "svg"}, tags
    loads = [(t, k, v) for t, a in parser.tags for k, v in a.items() if k in ("src", "href", "srcset", "action")]
    assert loads and all(t == "img" and k == "src" and v.startswith("data:image/png;base64,") for t, k, v in loads)
    assert not any(k.startswith("on") for _, a in parser.tags for k in a)        # no event handler
    for v in cmp["variants"]:
        assert html.escape(v) in text
    for pr in cmp["pairs"]:
        who = {"A": pr["a"], "B": pr["b"]}
        verdict = pr["verdict"]
        spelled = f"{who[verdict[0]]} {verdict[2:]}" if verdict[:2] in ("A ", "B ") else verdict
        assert f">{html.escape(spelled)}<" in text, spelled
    return text


def test_study_without_a_sweep(tmp_path):
    study = tmp_path / "study"
    cmp = make_study(study)
    paths = sr.write_report(study)
    names = [p.name for p in paths]
    assert names == [f"metric_{m}.png" for m in METRICS] + ["fct_ecdf.png", "throughput_delay.png",
                                                            "slowdown_by_size.png", "report.html"]
    assert all(p.parent == study and p.stat().st_size > 0 for p in paths)
    _check_pngs(paths)
    text = _check_html(study, cmp)
    assert text.count("data:image/png;base64,") == len(paths) - 1
    assert "s2-eth3" in text and "usually s1-eth1" in text               # the bottleneck that moved
    assert "Cells that failed" not in text and "incomplete" not in text
    assert ">0.031</td><td class=\"n\">0.094<" in text                  # p, Holm-adjusted p
    assert "Pantheon" in text
    assert "<h2>Paths</h2><p>Not traced in these runs" in text          # comparison.json has no paths check


def test_the_paths_section_says_what_was_checked(tmp_path):
    study = tmp_path / "study"
    make_study(study)
    cmp = json.loads((study / "comparison.json").read_text())
    for paths, says in (({"checked": 6, "same": True, "differing": []},
                         "Every seed put each flow on the same path in every variant (6 seed"),
                        ({"checked": 6, "same": False, "differing": [{"seed": 2, "flow_id": 3, "sweep": {},
                                                                      "paths": {"a": "h1>s1>h2"}}]},
                         "Paths that differed between variants of one seed")):
        (study / "comparison.json").write_text(json.dumps({**cmp, "paths": paths}))
        sr.write_report(study)
        assert says in (study / "report.html").read_text()


def test_study_with_a_sweep_a_failed_cell_and_an_unmeasured_metric(tmp_path):
    study = tmp_path / "study"
    metrics = {m: METRICS[m] for m in ("fct_p99_s", "throughput_mbps", "queue_delay_median_ms", "ecn_marks")}
    cmp = make_study(study, sweep=("ecn.k_packets", [5, 20, 65]), failed=("dctcp", 1, 3),
                     unmeasured=("ecn_marks",), metrics=metrics)
    paths = sr.write_report(study)
    names = {p.name for p in paths}
    assert {"metric_fct_p99_s.png", "sweep_fct_p99_s.png", "sweep_throughput_mbps.png",
            "throughput_delay.png", "fct_ecdf.png", "slowdown_by_size.png", "report.html"} <= names
    assert "metric_ecn_marks.png" not in names and "sweep_ecn_marks.png" not in names
    _check_pngs(paths)
    text = _check_html(study, cmp)
    assert "RuntimeError: &lt;b&gt;agent h3 died&lt;/b&gt; &amp; left" in text
    assert "1 failed" in text and "incomplete" in text
    assert "Not measured in any cell" in text and "ECN marks (ecn_marks)" in text
    for k in ("ecn.k_packets=5", "ecn.k_packets=20", "ecn.k_packets=65"):
        assert f"<h3>{k}</h3>" in text


def test_an_unfaithful_cell_is_counted_and_listed_as_such(tmp_path):
    study = tmp_path / "study"
    metrics = {m: METRICS[m] for m in ("fct_median_s", "jain_index")}
    make_study(study, metrics=metrics)
    cmp = json.loads((study / "comparison.json").read_text())
    cmp["cells"][0].update(status="unfaithful", error="spine2-eth1: sent 0.965 of its 10 Mbit/s while backlogged")
    (study / "comparison.json").write_text(json.dumps(cmp))
    sr.write_report(study)
    text = (study / "report.html").read_text()
    n = len(cmp["cells"])
    assert f"{n}: {n - 1} ok, 1 unfaithful (a fidelity check failed; counted as missing), 0 failed" in text
    assert "<h2>Cells that failed or were unfaithful</h2>" in text and "<td>unfaithful</td>" in text
    assert "sent 0.965 of its 10 Mbit/s" in text


def test_study_without_fct_rows_or_study_csv(tmp_path):
    study = tmp_path / "study"
    metrics = {m: METRICS[m] for m in ("fct_median_s", "jain_index")}
    cmp = make_study(study, fct=False, write_csv=False, metrics=metrics, seeds=(1,))
    paths = sr.write_report(study)
    assert [p.name for p in paths] == ["metric_fct_median_s.png", "metric_jain_index.png", "report.html"]
    _check_pngs(paths)
    text = _check_html(study, cmp)
    assert "No study_fct.csv" in text


def test_a_sweep_of_two_keys_named_values_first(tmp_path):
    study = tmp_path / "study"
    cmp = make_study(study, sweep={"buffer.kind": ["shallow", "deep", "huge"], "ecn.k_packets": [5, 40]},
                     metrics={"fct_p99_s": METRICS["fct_p99_s"]}, fct=False, seeds=(1, 2, 3))
    st = sr.load_study(study)
    assert st.points[:2] == [("shallow", 5.0), ("shallow", 40.0)] and st.points[-1] == ("huge", 40.0)
    paths = sr.write_report(study)
    assert [p.name for p in paths] == ["metric_fct_p99_s.png", "sweep_fct_p99_s.png", "report.html"]
    _check_pngs(paths)
    text = _check_html(study, cmp)
    heads = re.findall(r"<h3>(buffer\.kind=[^<]*)</h3>", text)
    assert heads == [f"buffer.kind={b}, ecn.k_packets={k}" for b in ("shallow", "deep", "huge") for k in (5, 40)]


def test_hostile_names_are_escaped_and_stay_in_the_folder(tmp_path):
    study = tmp_path / "study"
    evil = "<script>x</script>"
    metrics = {"../../evil$x$<i>": {"unit": "<u>", "better": "lower", "title": "<script>t</script>"},
               "throughput_mbps": METRICS["throughput_mbps"]}
    cmp = make_study(study, variants=(evil, 'b"><img src=http://x.invalid/a.png>'), metrics=metrics,
                     description='<a href="http://x.invalid">click</a><script>alert(1)</script>',
                     seeds=(1, 2, 3))
    paths = sr.write_report(study)
    assert all(p.parent == study for p in paths)
    assert "metric__.._evil_x__i_.png" in {p.name for p in paths}
    assert not list(tmp_path.glob("*.png"))
    text = _check_html(study, cmp)
    assert "&lt;script&gt;x&lt;/script&gt;" in text and "<img src=http" not in text


def test_size_buckets_bootstrap_and_formats():
    assert sr.size_buckets([]) == []
    assert sr.size_buckets([1e3, 1e3, 5e4, 5e4, 1e6]) == [(1e3, 1e3), (5e4, 5e4), (1e6, 1e6)]
    sizes = list(np.geomspace(1e3, 1e7, 1000))
    b = sr.size_buckets(sizes, 5)
    assert len(b) == 5 and b[0][0] == 1e3 and b[-1][1] == pytest.approx(1e7)
    assert all(hi < lo2 for (_, hi), (lo2, _) in zip(b, b[1:]))
    assert sr.size_buckets([7.0] * 50 + [9.0] * 50 + list(range(10, 20)), 3)[0] == (7.0, 7.0)  # ties stay together
    med, lo, hi = sr.bootstrap_median_ci([1.0, 2.0, 3.0, 4.0, 100.0])
    assert med == 3.0 and lo <= med <= hi and hi <= 100.0
    assert sr.bootstrap_median_ci([2.0]) == (2.0, None, None)
    assert sr.fmt_value(0.00234, "s") == "2.34 ms" and sr.fmt_value(4.2e-5, "s") == "42 µs"
    assert sr.fmt_value(9412.3, "Mbit/s") == "9412 Mbit/s" and sr.fmt_value(None) == "-"
    assert sr.fmt_value(0.9512) == "0.951" and sr.fmt_p(3e-6) == "<0.0001"
    assert sr.fmt_bytes(1500) == "1.5 KB" and sr.fmt_bytes(2.5e6) == "2.5 MB"


def test_the_slowdown_interval_is_scipys_percentile_bootstrap():
    """bootstrap_median_ci is scipy.stats.bootstrap (percentile, seeded generator, BOOTSTRAP_N
    resamples) of the median; none, one and all-equal values give what they always gave, warning-free."""
    rng = np.random.default_rng(5)
    for values, conf, seed in (([1.0, 2.0, 3.0, 4.0, 100.0], 0.95, 0), (list(rng.lognormal(0, 1, 10)), 0.9, 7),
                               ([3.0, 1.0], 0.99, 1)):
        res = stats.bootstrap((np.asarray(values),), np.median, n_resamples=sr.BOOTSTRAP_N, confidence_level=conf,
                              method="percentile", rng=np.random.default_rng(seed))
        got = sr.bootstrap_median_ci(values, conf, seed=seed)
        assert got == (float(np.median(values)), float(res.confidence_interval.low),
                       float(res.confidence_interval.high)), values
        assert all(type(x) is float for x in got)
    assert sr.bootstrap_median_ci(iter([2.0, 5.0]), n=50, seed=3) == sr.bootstrap_median_ci([2.0, 5.0], n=50, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sr.bootstrap_median_ci([]) == (None, None, None)
        assert sr.bootstrap_median_ci([2.5]) == (2.5, None, None)
        assert sr.bootstrap_median_ci([4.0] * 6) == (4.0, 4.0, 4.0)
        assert sr.bootstrap_median_ci([0.0, 0.0]) == (0.0, 0.0, 0.0)


# ------------------------------------------------------------------ a real browser

@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install chromium; "
                                             "sudo make setup installs it)")
def test_chromium_renders_the_report(tmp_path):
    t0 = time.monotonic()
    study = tmp_path / "study"
    cmp = make_study(study, variants=("cubic", "<script>x</script>"),
                     metrics={m: METRICS[m] for m in ("fct_p99_s", "throughput_mbps", "queue_delay_median_ms")},
                     seeds=(1, 2, 3))
    paths = sr.write_report(study)
    report = study / "report.html"
    shot = tmp_path / "shot.png"
    res, _, err = chromium(tmp_path, "shot", f"--screenshot={shot}", "--window-size=1200,3000",
                            "--enable-logging=stderr", "--v=0", report.as_uri())
    assert res["rc"] == 0, err[-2000:]
    assert console_lines(err) == [], console_lines(err)     # no script error, nothing refused by the CSP
    img = mpimg.imread(shot)
    assert img.shape[:2] == (3000, 1200) and img[..., :3].std() > 0.05
    broken = tmp_path / "broken.html"         # the console check can fail: a load and a script the CSP refuses
    broken.write_text(report.read_text().replace("</body>", '<img src="http://x.invalid/a.png"><script>1</script>'
                                                              "</body>"))
    _, _, err = chromium(tmp_path, "broken", f"--screenshot={tmp_path / 'broken.png'}", "--enable-logging=stderr",
                          "--v=0", broken.as_uri())
    assert len(console_lines(err)) == 2 and "Content Security Policy" in err, console_lines(err)

    probe = tmp_path / "probe.html"
    text = report.read_text()
    probe.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text)
                     .replace("</body>", PROBE + "</body>"))
    res, dom, err = chromium(tmp_path, "dom", "--dump-dom", "--virtual-time-budget=5000", probe.as_uri())
    assert res["rc"] == 0, err[-2000:]
    n = len(paths) - 1
    assert f"<title>decoded {n} of {n}</title>" in dom, re.findall(r"<title>.*?</title>", dom)
    assert "&lt;script&gt;x&lt;/script&gt;" in dom and "<script>x</script>" not in dom
    assert cmp["study"] in dom
    assert time.monotonic() - t0 < 20
