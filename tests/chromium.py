"""Headless Chromium for the tests of fabriclab's HTML reports (a study's, a results folder's):
:func:`chromium` runs it with every process it leaves ended by pid, :func:`console_lines` picks
the page's console messages out of its log, and :func:`check_renders` renders a report and
checks it (no console error, nothing refused, every image decoded, a screenshot that is not
blank, kept under :func:`artifacts_dir`).

The unit tier uses it on synthetic reports (tests/unit/test_studyreport.py, test_report.py),
the live tier on the report of each folder its runs write.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

#: Runs Chromium in its own process group under a child subreaper and, whatever happens, ends
#: every process left of it: Chromium's crash handler starts its own session (out of Chromium's
#: process group) and would otherwise outlive the browser; as a subreaper's orphan it comes back
#: here and is killed by pid. Prints {"rc", "left"} (left: pids killed after the browser exited).
_REAPER = r"""
import ctypes, json, os, signal, subprocess, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)          # PR_SET_CHILD_SUBREAPER
argv, timeout, out, err = json.loads(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
with open(out, "wb") as o, open(err, "wb") as e:
    p = subprocess.Popen(argv, stdout=o, stderr=e, stdin=subprocess.DEVNULL, start_new_session=True)
try:
    rc = p.wait(timeout)
except subprocess.TimeoutExpired:
    rc = "timeout"
left = []
try:
    os.killpg(p.pid, signal.SIGKILL)
except ProcessLookupError:
    pass
end = time.monotonic() + 5
while time.monotonic() < end:
    mine = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                mine.append(int(d))
    if not mine:
        break
    for pid in mine:
        try:
            os.kill(pid, signal.SIGKILL)
            left.append(pid)
        except ProcessLookupError:
            pass
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                break
        except ChildProcessError:
            break
    time.sleep(0.02)
print(json.dumps({"rc": rc, "left": sorted(set(left))}))
"""


def chromium(tmp: Path, name: str, *args: str, timeout: float = 20) -> tuple[dict, str, str]:
    """Run Chromium headless with ``args`` under :data:`_REAPER`, its home (profile, crash
    database) inside ``tmp``; (the reaper's result, Chromium's stdout, its stderr). Asserts that no
    process naming ``tmp`` is left."""
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"))
    argv = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", f"--user-data-dir={home / 'profile'}",
            "--no-first-run", "--disable-extensions", *args]
    out, err = tmp / f"{name}.out", tmp / f"{name}.err"
    helper = subprocess.Popen([sys.executable, "-c", _REAPER, json.dumps(argv), str(timeout), str(out), str(err)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True, env=env)
    try:
        res, _ = helper.communicate(timeout=timeout + 10)
    finally:
        try:
            os.killpg(helper.pid, signal.SIGKILL)          # by the recorded pid, whatever happened
        except ProcessLookupError:
            pass
        helper.wait()
    left = processes_naming(str(home))
    assert not left, f"Chromium processes outlived the run: {left}"
    return json.loads(res), out.read_text(errors="replace"), err.read_text(errors="replace")


def processes_naming(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text`` (a check, not a kill)."""
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        found.append(int(d))
            except OSError:
                pass
    return found


def console_lines(stderr: str) -> list[str]:
    """Chromium's log lines of the page's console (errors, CSP refusals, uncaught exceptions)."""
    return [ln for ln in stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]


#: Added to a copy of the report only (the report has no script; its CSP would refuse one): after
#: the page loaded, how many images decoded, as the page title --dump-dom prints.
PROBE = ("<script>addEventListener('load', () => { const i = [...document.images];"
          "document.title = 'decoded ' + i.filter(x => x.complete && x.naturalWidth > 0).length"
          " + ' of ' + i.length; });</script>")


def artifacts_dir() -> Path:
    """Where screenshots are kept: ``$TEST_REPORTS/screenshots`` (the Makefile passes
    ``TEST_REPORTS``; default ``test-reports`` in the repository, which git ignores). Created."""
    d = Path(os.environ.get("TEST_REPORTS") or ROOT / "test-reports") / "screenshots"
    d.mkdir(parents=True, exist_ok=True)
    return d


def check_renders(report: Path, name: str, tmp: Path, width: int = 1200, height: int = 3000) -> dict:
    """Render ``report`` (an HTML file) in headless Chromium twice and assert that it rendered:

    1. a screenshot (``width`` x ``height`` px) with the browser's log on: Chromium exits 0, the
       page logged nothing to its console (no script error, nothing the Content-Security-Policy
       refused, no failed load), and the screenshot, copied to ``artifacts_dir()/<name>.png``, is
       not one flat colour;
    2. a copy of the page without its CSP and with :data:`PROBE` added, its DOM dumped: every
       ``<img>`` decoded (natural width above 0).

    ``tmp`` is a scratch folder (Chromium's profile). Returns ``{"seconds", "images",
    "screenshot"}``: the wall time of both renders, the number of images, the kept screenshot.
    Raises AssertionError on any failure; needs :data:`CHROMIUM` (the caller skips without it).
    """
    import matplotlib.image as mpimg          # only the screenshot's check needs it

    t0 = time.monotonic()
    tmp.mkdir(parents=True, exist_ok=True)
    shot = tmp / f"{name}.png"
    res, _, err = chromium(tmp, f"{name}-shot", f"--screenshot={shot}", f"--window-size={width},{height}",
                           "--enable-logging=stderr", "--v=0", Path(report).resolve().as_uri())
    assert res["rc"] == 0, err[-2000:]
    assert console_lines(err) == [], console_lines(err)
    img = mpimg.imread(shot)
    assert img.shape[:2] == (height, width) and img[..., :3].std() > 0.05, (img.shape, float(img[..., :3].std()))
    kept = artifacts_dir() / f"{name}.png"
    shutil.copyfile(shot, kept)
    text = Path(report).read_text(encoding="utf-8")
    n = text.count("<img ")
    probe = tmp / f"{name}-probe.html"
    probe.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text)
                     .replace("</body>", PROBE + "</body>"), encoding="utf-8")
    res, dom, err = chromium(tmp, f"{name}-dom", "--dump-dom", "--virtual-time-budget=5000", probe.as_uri())
    assert res["rc"] == 0, err[-2000:]
    assert f"<title>decoded {n} of {n}</title>" in dom, re.findall(r"<title>.*?</title>", dom)
    return {"seconds": time.monotonic() - t0, "images": n, "screenshot": kept}


class _Loads(HTMLParser):
    """Every start tag's attributes that load something, and the ``class`` of every plot section."""

    def __init__(self):
        super().__init__()
        self.tags: set[str] = set()
        self.loads: list[tuple[str, str, str]] = []
        self.generic: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        self.loads += [(tag, k, v or "") for k, v in a.items() if k in ("src", "href", "srcset", "action", "data")]
        if tag == "section" and "generic" in (a.get("class") or "").split():
            self.generic.append(a.get("data-file", "?"))


def check_report_folder(folder: Path, name: str, tmp: Path, captions: bool = True) -> dict:
    """The live tier's check of a results folder's ``report.html`` (a run's, written by the run
    loop; a study's, by experiments.studyreport): it exists; nothing in it loads from anywhere but
    a ``data:`` URI (no attribute names an http(s) address; text may mention one) and it has no script; every PNG of the folder and of its rounds' folders is
    embedded; with ``captions``, no plot shows the generic caption (every bundled plot declares
    its own); then, where Chromium is installed, :func:`check_renders` (screenshot kept as
    ``<name>.png`` under :func:`artifacts_dir`). Returns ``{"seconds": the whole check's wall
    time, "rendered": bool, "images": n}``. Raises AssertionError on any failure."""
    import base64

    t0 = time.monotonic()
    page = Path(folder) / "report.html"
    text = page.read_text(encoding="utf-8")
    low = text.lower()
    assert "<script" not in low and "url(" not in low and "@import" not in low
    p = _Loads()
    p.feed(text)
    # an address may be text (environment.json's controller API, say), never an attribute or a style
    assert not re.search(r"""=\s*["']?\s*(https?:|//)""", low), re.findall(r""".{40}=\s*["']?\s*https?:.{40}""", low)
    assert not p.tags & {"script", "link", "iframe", "object", "embed", "base", "form"}, p.tags
    assert all(t == "img" and k == "src" and v.startswith("data:image/png;base64,") for t, k, v in p.loads), \
        [x[:3] for x in p.loads if not x[2].startswith("data:")]
    pngs = sorted(Path(folder).glob("*.png")) + sorted(Path(folder).glob("rounds/*/*.png"))
    srcs = {v for _, _, v in p.loads}
    missing = [str(x) for x in pngs if "data:image/png;base64," + base64.b64encode(x.read_bytes()).decode() not in srcs]
    assert pngs and not missing, (len(pngs), missing)
    if captions:
        assert p.generic == [], f"plots without a caption of their own: {p.generic}"
    out = {"rendered": False, "images": len(p.loads)}
    if CHROMIUM is not None:
        out.update(check_renders(page, name, Path(tmp) / f"chromium-{name}"), rendered=True)
    out["seconds"] = time.monotonic() - t0
    print(f"report.html of {name}: {out['images']} images, {len(text) / 1e6:.1f} MB, checked"
          f"{' and rendered' if out['rendered'] else ' (no chromium: not rendered)'} in {out['seconds']:.1f} s")
    return out
