"""A results folder's report.html (experiments/report.py) from synthetic folders: a run with
rounds (one unfaithful, accepted), a run of one round, a comparison, a study (refused). The
report is self-contained (nothing loads from anywhere but a data: URI), embeds every PNG of the
folder, shows each plot's caption (the one stored in its PNG, or the generic one), the fidelity
block per round, and escapes what the files say. Every plot fabriclab draws stores a caption.
A headless Chromium renders the report where one is installed."""
from __future__ import annotations

import ast
import base64
import json
import re
import struct
import zlib
from html.parser import HTMLParser
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from experiments import pagekit, report  # noqa: E402
from tests.chromium import CHROMIUM, check_renders  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = "<i>x&\"'"           # no "/": it names a round's folder too


def png(path: Path, caption: pagekit.Caption | None, colour: str = "C0") -> Path:
    """A small PNG drawn by matplotlib, with ``caption`` stored in it (or none)."""
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1, 2], [0, 1, 0], color=colour)
    fig.savefig(path, dpi=60, **({"metadata": caption.metadata()} if caption else {}))
    plt.close(fig)
    return path


def fidelity(ok: bool, accepted: bool = False) -> dict:
    return {"ok": ok, "failures": [] if ok else [f"port {HOSTILE}: 0.91 of its rate"],
            "accepted_unfaithful": accepted, "serialisation": {"within_10pct": 0.99}}


def make_run(root: Path) -> Path:
    """A run with two rounds: round 1 faithful with summary.txt and a captioned plot, round 2
    unfaithful (accepted) with a plot that has no caption and a hostile name; at the top the
    rounds' table, a plot whose caption needs UTF-8 (an iTXt chunk) and one without a caption."""
    root.mkdir(parents=True)
    (root / "scenario.yaml").write_text(f"name: incast\ndescription: 8 senders {HOSTILE} into one port\n")
    (root / "environment.json").write_text(json.dumps(
        {"datapath": "user", "kernel": "6.1.0-test", "ecn": {"marker": "bpf", "mechanism": "tc clsact"},
         "qdiscs": {"htb": True, "red": False}, "accept_unfaithful": True,
         "controller_api": "http://127.0.0.1:8080/fabriclab/"}))
    r1, r2 = root / "rounds" / "01-drop-tail", root / "rounds" / f"02-{HOSTILE}"
    for i, (d, ok) in enumerate(((r1, True), (r2, False)), 1):
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(
            {"scenario": "incast", "round": d.name[3:], "datapath": "user", "total_drops": 164 * i,
             "flows": {"count": 8, "all_complete": True, "per_flow": [{"flow_id": 0}]},
             "fidelity": fidelity(ok, accepted=not ok)}))
    (r1 / "summary.txt").write_text("== fabriclab: incast ==\ncompletion time: median 3.23 s <fast>\n")
    png(r1 / "queue_depth.png", pagekit.Caption("Queue depth", "The queue of the bottleneck over time."))
    png(r2 / "mystery.png", None, "C1")
    png(root / "rounds_bars.png", pagekit.Caption("Rounds ≥ side by side", "Bars per round ≥ 1."), "C2")
    png(root / "topology.png", None, "C3")
    (root / "rounds.csv").write_text("round,variant,seed,round_index,fct_median_s,folder\n"
                                     "drop-tail,drop-tail,1,1,3.230153,rounds/01-drop-tail\n"
                                     "x,x,1,2,3.3309,rounds/02-x\n")
    return root


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text inside each ``<section>``, as the
    browser's tokenizer sees them."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.sections: list[tuple[dict, list]] = []
        self._depth = 0

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "section":
            self.sections.append((dict(attrs), []))
            self._depth += 1

    def handle_endtag(self, tag):
        if tag == "section":
            self._depth -= 1

    def handle_data(self, data):
        if self._depth > 0:
            self.sections[-1][1].append(data)


def check_self_contained(page: Path) -> _Tags:
    """No script, nothing loaded from anywhere but a data: URI, no event handler, no http(s)
    address in an attribute (text may mention one); every PNG below the report's folder is
    embedded, once. Returns the parse."""
    text = page.read_text(encoding="utf-8")
    low = text.lower()
    assert "<script" not in low and "@import" not in low and "url(" not in low
    assert not re.search(r"""=\s*["']?\s*(https?:|//)""", low)        # an address may be text, never a load
    tags = _Tags()
    tags.feed(text)
    kinds = {t for t, _ in tags.tags}
    assert not kinds & {"script", "link", "iframe", "object", "embed", "a", "form", "base", "svg", "frame"}, kinds
    loads = [(t, k, v) for t, a in tags.tags for k, v in a.items() if k in ("src", "href", "srcset", "action", "data")]
    assert all(t == "img" and k == "src" and v.startswith("data:image/png;base64,") for t, k, v in loads), loads
    assert not any(k.startswith("on") for _, a in tags.tags for k in a)
    pngs = sorted(page.parent.rglob("*.png"))
    srcs = [v for _, _, v in loads]
    assert len(srcs) == len(pngs)
    for p in pngs:
        assert srcs.count("data:image/png;base64," + base64.b64encode(p.read_bytes()).decode()) == 1, p
    return tags


def test_a_run_with_rounds(tmp_path):
    d = make_run(tmp_path / "run")
    page = report.write_report(d)
    assert page == d / "report.html"
    tags = check_self_contained(page)
    text = page.read_text(encoding="utf-8")
    # one section per plot, each with its own caption or the generic one, in the PNG's folder
    plots = {a["data-file"]: (a["class"], "".join(t)) for a, t in tags.sections}
    assert set(plots) == {"rounds/01-drop-tail/queue_depth.png", f"rounds/02-{HOSTILE}/mystery.png",
                          "rounds_bars.png", "topology.png"}
    assert plots["rounds/01-drop-tail/queue_depth.png"] == (
        "plot", "Queue depth (rounds/01-drop-tail/queue_depth.png)How to read this. The queue of the bottleneck "
                "over time.Queue depth")
    assert plots["rounds_bars.png"][1].startswith("Rounds ≥ side by side") and "Bars per round ≥ 1." in plots[
        "rounds_bars.png"][1]
    for f in (f"rounds/02-{HOSTILE}/mystery.png", "topology.png"):
        assert plots[f][0] == "plot generic" and report.GENERIC_HOW in plots[f][1]
    # the rounds in order, each with its summary, its fidelity; the verdict at the top
    assert text.index("<h2>Round 1: drop-tail</h2>") < text.index(f"<h2>Round 2: {pagekit.esc(HOSTILE)}</h2>")
    assert "completion time: median 3.23 s &lt;fast&gt;" in text
    assert (f"Unfaithful: 1 of 2 round(s) failed a fidelity check ({pagekit.esc(HOSTILE)}); the run accepted "
            "them") in text
    fid = text[text.index('<table class="fidelity">'):]
    fid = fid[:fid.index("</table>")]
    assert fid.count("<tr>") == 3
    assert '<td>drop-tail</td><td class="ok">true</td><td>-</td><td>false</td>' in fid
    assert (f'<td class="warn">false</td><td>port {pagekit.esc(HOSTILE)}: 0.91 of its rate</td><td>true</td>'
            in fid)
    assert "Fidelity: <span class=\"warn\">FAILED (accepted)</span>" in text
    # the environment and the rounds' table; every string from the files escaped
    assert "<th>datapath</th><td>user</td>" in text and "marker=bpf; mechanism=tc clsact" in text
    assert "<td>http://127.0.0.1:8080/fabriclab/</td>" in text                  # as text
    assert "<h2>The rounds side by side (rounds.csv)</h2>" in text and "<td>3.23</td>" in text
    assert HOSTILE not in text and "<i>" not in text


def test_a_run_of_one_round_shows_its_plots_once(tmp_path):
    d = tmp_path / "one"
    d.mkdir()
    (d / "scenario.yaml").write_text("name: one\n")
    (d / "environment.json").write_text(json.dumps({"datapath": "kernel", "kernel": "6.1"}))
    (d / "summary.json").write_text(json.dumps({"round": None, "fidelity": fidelity(True)}))
    png(d / "fct_cdf.png", pagekit.Caption("FCT", "Read it left to right."))
    text = report.write_report(d).read_text()
    check_self_contained(d / "report.html")
    assert text.count("<img ") == 1 and "<h2>Round" not in text
    assert text.index("<h2>Summary</h2>") < text.index("<h2>Plots</h2>")          # its summary, then its plot
    assert "Every round (1) passed its fidelity checks." in text


def test_a_run_without_fidelity_or_rounds_says_so(tmp_path):
    d = tmp_path / "bare"
    d.mkdir()
    (d / "scenario.yaml").write_text("name: bare\n")
    (d / "environment.json").write_text("{}")
    text = report.write_report(d).read_text()
    assert "No round was analysed" in text
    (d / "summary.json").write_text(json.dumps({"total_drops": 1}))
    text = report.write_report(d).read_text()
    assert "1 round(s) have no fidelity block." in text and '<td class="warn">not recorded</td>' in text


def test_a_comparison_and_what_is_not_a_results_folder(tmp_path):
    d = tmp_path / "cmp"
    d.mkdir()
    (d / "comparison.json").write_text(json.dumps(
        {"name": "topology-comparison", "description": "Fat-Tree against Spine-Leaf", "complete": False,
         "runs": [{"fabric": "fattree-k4", "traffic": "perm", "per_host_mbps": 4.2612, "run": "r1"},
                  {"fabric": "spineleaf", "traffic": "perm", "per_host_mbps": 1.53, "run": "r2"}],
         "ratios": [{"traffic": "perm", "measured": 0.358}]}))
    png(d / "compare_throughput.png", pagekit.Caption("Per host", "Bars per fabric."))
    text = report.write_report(d).read_text()
    check_self_contained(d / "report.html")
    assert "<td>fattree-k4</td><td>perm</td><td>4.261</td><td>r1</td>" in text and "<td>0.358</td>" in text
    assert "Incomplete" in text and "Bars per fabric." in text
    (d / "study.json").write_text("{}")
    with pytest.raises(ValueError, match="studyreport"):
        report.write_report(d)
    assert report.folder_kind(d) == "study"
    with pytest.raises(FileNotFoundError, match="not a results folder"):
        report.write_report(tmp_path)


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def test_png_text_chunks(tmp_path):
    p = png(tmp_path / "a.png", pagekit.Caption("Title ≥", "How µ"))
    assert pagekit.read_caption(p) == pagekit.Caption("Title ≥", "How µ")
    raw = p.read_bytes()                      # a zTXt chunk (compressed Latin-1) before IEND
    end = raw.rindex(b"IEND") - 4
    z = tmp_path / "z.png"
    z.write_bytes(raw[:end] + _chunk(b"zTXt", b"Comment\0\0" + zlib.compress(b"caf\xe9")) + raw[end:])
    assert pagekit.png_text(z)["Comment"] == "café"
    (tmp_path / "not.png").write_bytes(b"GIF89a")
    with pytest.raises(ValueError, match="not a PNG"):
        pagekit.png_text(tmp_path / "not.png")
    assert pagekit.read_caption(tmp_path / "not.png") is None
    (tmp_path / "cut.png").write_bytes(raw[:40])
    assert pagekit.read_caption(tmp_path / "cut.png") is None
    assert pagekit.read_caption(png(tmp_path / "bare.png", None)) is None


#: Modules whose savefig calls need no caption in the PNG: the study report shows its own
#: "how to read this" per plot kind (experiments.studyreport.HOW_TO_READ).
OWN_CAPTIONS = {"experiments/studyreport.py"}


def test_every_plot_fabriclab_draws_stores_a_caption():
    """Every ``savefig`` call in experiments/ passes ``metadata=`` (a Caption's), and every
    Caption declared there has a title and a paragraph: a new plot without one fails here (and
    shows the generic caption in the report)."""
    calls, captions = [], []
    for path in sorted((ROOT / "experiments").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text(), rel)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "savefig":
                calls.append((rel, node.lineno, any(k.arg == "metadata" for k in node.keywords)))
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Caption"
                    and rel not in ("experiments/pagekit.py", "experiments/report.py")):    # the generic one
                captions.append((rel, node.lineno, [a.value for a in node.args if isinstance(a, ast.Constant)]))
    assert len([c for c in calls if c[0] not in OWN_CAPTIONS]) >= 2, calls       # the scan finds them
    assert [c for c in calls if not c[2] and c[0] not in OWN_CAPTIONS] == []
    assert len(captions) >= 20, captions
    for rel, line, args in captions:
        assert len(args) == 2 and 3 <= len(args[0]) <= 80 and len(args[1]) >= 80, (rel, line, args)
    titles = [a[0] for _, _, a in captions]
    assert len(set(titles)) == len(titles), titles


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install chromium; "
                                             "sudo make setup installs it)")
def test_chromium_renders_the_report(tmp_path):
    d = make_run(tmp_path / "run")
    page = report.write_report(d)
    got = check_renders(page, "unit-run-report", tmp_path / "chromium", height=1600)
    assert got["images"] == 4 and got["seconds"] < 20
