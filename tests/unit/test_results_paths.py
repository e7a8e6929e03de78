"""Every path the user gives is checked before anything starts: `--results` of run, compare, study
and diagnose (a regular file, a path below a file, not writable, under /proc or /sys, a dangling or
planted symlink at the folder or at the name the next run's folder would get), `lab check --results`
and `--answers`. Each is one line naming the path, exit 2, nothing created and no run started (the
run functions are replaced by ones that fail the test). Results folders are never world-writable,
whatever the umask (experiments.folders)."""
import os
import shutil
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from experiments import compare, diagnose, folders, runner, study
from experiments.cli import DEFAULT_DIAGNOSE, DEFAULT_SCENARIO
from experiments.scenario import load_scenario

from .test_bad_input import cli
from .test_labs import make_runs
from .test_run_loop import run_fake

REPO = Path(__file__).resolve().parents[2]
STUDY = REPO / "experiments" / "studies" / "aa.yaml"

#: Each fabric command: its arguments before --results, and the name its folder gets after the time.
COMMANDS = {
    "run": (["run", str(DEFAULT_SCENARIO)], lambda: load_scenario(DEFAULT_SCENARIO).name),
    "compare": (["compare"], lambda: compare.load_comparison(compare.DEFAULT)["name"]),
    "study": (["study", str(STUDY)], lambda: study.load_study(str(STUDY)).name),
    "diagnose": (["diagnose", "--inject", "random", "--seed", "3"],
                 lambda: diagnose.folder_name(load_scenario(DEFAULT_DIAGNOSE), "random", 3)),
}


@pytest.fixture(autouse=True)
def nothing_runs(monkeypatch):
    """A refused path must stop the command before any of these: each fails the test."""
    def started(*a, **kw):
        raise AssertionError("a run started")
    for mod, fn in ((runner, "run"), (compare, "run_comparison"), (study, "run_study"), (study, "preflight"),
                    (diagnose, "diagnose")):
        monkeypatch.setattr(mod, fn, started)


def tree(root: Path) -> list[str]:
    """Everything under ``root`` (symlinks not followed), relative, sorted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def refused(args: list[str], path: str, root: Path, says: str) -> str:
    """The command with ``--results path``: exit 2, one line naming ``path`` and saying ``says``,
    nothing created under ``root``."""
    before = tree(root)
    res, seconds = cli(*args, "--results", path, "--quiet")
    line = res.stderr.strip()
    assert res.returncode == 2 and line.count("\n") == 0, res
    assert path in line and says in line, line
    assert tree(root) == before
    assert seconds < 20, seconds
    return line


def bad_roots(tmp: Path) -> list[tuple[str, str]]:
    """``(path, what the refusal says)`` for each bad --results made under ``tmp``."""
    (tmp / "afile").write_text("x")
    os.symlink(tmp / "nowhere", tmp / "dangling")
    return [(str(tmp / "afile"), "a regular file, not a folder"),
            (str(tmp / "afile" / "below"), "which is a regular file, not a folder"),
            ("/proc/x", "under /proc"), ("/sys/kernel/x", "under /sys"),
            (str(tmp / "dangling"), "a dangling symlink")]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_results_path_is_one_line_exit_2_and_nothing_starts(tmp_path, command):
    args, _ = COMMANDS[command]
    for path, says in bad_roots(tmp_path):
        refused(args, path, tmp_path, says)


def plant(root: Path, name: str, target: Path, seconds: int = 30) -> None:
    """Symlinks at the names the next ``name`` folder under ``root`` gets in the coming ``seconds``."""
    now = datetime.now(timezone.utc)
    for s in range(-1, seconds):
        link = folders.next_folder(root, name, now=now + timedelta(seconds=s))
        if not os.path.lexists(link):
            os.symlink(target, link)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("target", ["dangling", "a folder"])
def test_a_symlink_at_the_next_runs_folder_name_is_refused(tmp_path, command, target):
    """Anyone who can write a shared results folder can put a symlink where a run's folder goes
    (its name is the time and the scenario's): refused, naming it, whether it dangles or not."""
    args, name = COMMANDS[command]
    root = tmp_path / "shared"
    root.mkdir()
    dest = tmp_path / ("nowhere" if target == "dangling" else "elsewhere")
    if target != "dangling":
        dest.mkdir()
    plant(root, name(), dest)
    line = refused(args, str(root), tmp_path, "a symlink stands where this run's folder goes")
    assert f"{root}/" in line and name() in line, line
    assert not any(dest.iterdir()) if dest.exists() else True


@pytest.mark.skipif(os.geteuid() != 0, reason="making a symlink owned by another user needs root")
def test_a_symlink_planted_by_another_user_at_the_results_folder_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "results"
    os.symlink(tmp_path / "elsewhere", link)
    os.lchown(link, 65534, 65534)
    for args, _ in COMMANDS.values():
        refused(args, str(link), tmp_path, "a symlink made by uid 65534")


def test_a_results_folder_that_is_not_writable(tmp_path):
    """Checked as an unprivileged user (root writes everywhere but on a read-only file system):
    in a child that drops to uid 65534 when this runs as root (the folder in a fresh one under /tmp
    that uid can reach: pytest's own are 0700)."""
    top = Path(tempfile.mkdtemp(prefix="fabriclab-ro-"))
    top.chmod(0o755)
    ro = top / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                        # the child: report the command's exit code and message
        try:
            os.close(r)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
            out = []
            for args, _ in COMMANDS.values():
                for path in (ro, ro / "sub" / "deeper"):
                    res, _s = cli(*args, "--results", str(path), "--quiet")
                    out.append(f"{res.returncode}\t{res.stderr.strip()}")
            os.write(w, "\n".join(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        got = f.read().splitlines()
    os.waitpid(pid, 0)
    assert len(got) == 2 * len(COMMANDS), got
    for line in got:
        code, msg = line.split("\t")
        assert code == "2" and str(ro) in msg and "not writable by you" in msg, line
    assert list(ro.iterdir()) == []
    shutil.rmtree(top)


@pytest.mark.parametrize("case", ["afile", "below", "proc", "sys", "dangling", "planted"])
def test_lab_check_results_folder(tmp_path, case):
    if case == "planted" and os.geteuid() != 0:
        pytest.skip("making a symlink owned by another user needs root")
    runs = tmp_path / "runs"
    runs.mkdir()
    make_runs(runs)
    (tmp_path / "afile").write_text("x")
    path = {"afile": tmp_path / "afile", "below": tmp_path / "afile" / "x", "proc": Path("/proc/self"),
            "sys": Path("/sys/kernel"), "dangling": tmp_path / "dangling", "planted": tmp_path / "planted"}[case]
    if case == "dangling":
        os.symlink(tmp_path / "nowhere", path)
    if case == "planted":
        os.symlink(runs, path)
        os.lchown(path, 65534, 65534)
    res, _ = cli("lab", "check", "4", "--results", str(path))
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0 and str(path) in res.stderr, res


@pytest.mark.parametrize("case", ["proc", "folder", "fifo", "dangling", "missing"])
def test_lab_check_answers_file(tmp_path, case):
    """--answers under /proc, a folder, a named pipe (reading it would wait forever), a dangling
    symlink, a missing file: one line naming it, exit 2."""
    right = make_runs(tmp_path)
    del right
    path = {"proc": Path("/proc/self/status"), "folder": tmp_path, "fifo": tmp_path / "pipe",
            "dangling": tmp_path / "dangling", "missing": tmp_path / "missing.yaml"}[case]
    if case == "fifo":
        os.mkfifo(path)
    if case == "dangling":
        os.symlink(tmp_path / "nowhere", path)
    res, seconds = cli("lab", "check", "4", "--results", str(tmp_path), "--answers", str(path))
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0 and str(path) in res.stderr, res
    assert seconds < 10


def test_the_checks_accept_what_they_should(tmp_path):
    """A folder to be made (parents too), an existing one, one's own symlink to a folder."""
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "mine")
    for p in (tmp_path / "new" / "deeper", tmp_path / "real", tmp_path / "mine"):
        assert folders.check_results_root(p) == p
    assert folders.check_input_path(tmp_path / "mine", "results folder", folder=True) == tmp_path / "mine"
    (tmp_path / "real" / "x").mkdir()
    out = folders.next_folder(tmp_path / "real", "x", now=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))
    assert out.name == "20260102T030405Z-x"
    out.mkdir()
    assert folders.next_folder(tmp_path / "real", "x",
                               now=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)).name == "20260102T030405Z-x-2"


def test_make_folder_never_follows_what_stands_there(tmp_path):
    """A symlink planted after the name was chosen: make_folder refuses, the target stays empty."""
    (tmp_path / "target").mkdir()
    os.symlink(tmp_path / "target", tmp_path / "run")
    with pytest.raises(folders.PathError, match="something appeared there"):
        folders.make_folder(tmp_path / "run")
    assert list((tmp_path / "target").iterdir()) == []


@pytest.fixture
def umask():
    """Set the process's umask for the test; restored after."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda m: os.umask(m)
    os.umask(old)


@pytest.mark.parametrize("mask, folder_mode, file_mode", [(0o000, 0o755, 0o644), (0o022, 0o755, 0o644),
                                                          (0o077, 0o700, 0o600), (0o002, 0o775, 0o664)])
def test_a_runs_folders_and_files_are_never_world_writable(tmp_path, umask, monkeypatch, mask, folder_mode,
                                                          file_mode):
    """A whole run (the fake platform of test_run_loop: the run loop's own writes, rounds, plots)
    under umask 000 gives folders 0755 and files 0644; a umask that keeps the world out is kept."""
    monkeypatch.undo()                                     # the real runner.run (nothing_runs replaced it)
    umask(mask)
    out = run_fake(tmp_path, "incast.yaml", [], [])
    modes = {p: p.lstat().st_mode & 0o777 for p in [out.parent, out, *out.rglob("*")]}
    dirs = {p: m for p, m in modes.items() if p.is_dir()}
    files = {p: m for p, m in modes.items() if p.is_file()}
    assert len(dirs) >= 3 and len(files) >= 5, modes
    assert set(dirs.values()) == {folder_mode}, {str(p): oct(m) for p, m in dirs.items()}
    assert set(files.values()) == {file_mode}, {str(p): oct(m) for p, m in files.items()}
