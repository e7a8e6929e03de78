"""The run-state record: what a fabriclab run created, so that teardown (and
the next run, after a SIGKILL) removes exactly that and nothing else.

The record lives in ``$FABRICLAB_STATE_DIR`` (default ``/run/fabriclab``):
``state.json`` lists OVS bridges, root-namespace interfaces and processes
(pid plus kernel start time, so a reused pid is never killed). A ``lock``
file held with flock marks a live run. Nothing here kills by process name.
``api-token`` (mode 0600, for the run's lifetime) holds the token the controller's REST API asks
of every request that changes something (controller.rest).
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import stat
import time
from pathlib import Path

from common.errors import BusyError, SetupError
from controller.dataplane import hostknobs, ovsctl
from controller.datapaths import registry as datapaths


def _forked_child_defaults() -> None:
    # pyroute2 forks this very process to open sockets in other network
    # namespaces (pyroute2.process.ChildProcess) and stops the copy with
    # SIGTERM. A copy must never unwind the runner's stack: its `finally`
    # blocks would tear down the live fabric (kill every host shell, delete
    # the bridges) from inside the child. Default dispositions make the copy
    # simply die.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


os.register_at_fork(after_in_child=_forked_child_defaults)


#: The REST API token's file name in the state folder.
TOKEN_FILE = "api-token"


def state_dir() -> Path:
    """Directory of the run-state record (created on demand, mode 0700 whatever the umask).

    Raises:
        SetupError: the directory exists but is not this user's, or others can write to it: its
            record would tell a root run which processes to kill and which links to delete.
    """
    d = Path(os.environ.get("FABRICLAB_STATE_DIR", "/run/fabriclab"))
    if not d.exists():
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o700)
    _check_private(d)
    return d


def _check_private(path: Path) -> None:
    """SetupError unless ``path`` belongs to this user and neither group nor others can write it."""
    st = path.lstat()
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SetupError(f"refusing the run-state record {path}: owner uid {st.st_uid}, mode "
                         f"{stat.S_IMODE(st.st_mode):o}; it must be this user's (uid {os.geteuid()}) and writable "
                         "by nobody else (remove it, or fix it with chown and chmod go-w)")


def _private_write(path: Path, text: str) -> None:
    """Write ``path`` atomically with mode 0600 (a temporary file renamed over it)."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _open_lock(d: Path):
    """The lock file of ``d``, opened for flock (created 0600)."""
    fd = os.open(d / "lock", os.O_WRONLY | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "w")


def proc_start_time(pid: int) -> int | None:
    """Kernel start time (clock ticks since boot) of ``pid``, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text.rsplit(")", 1)[1].split()[19])


def _alive(rec: dict) -> bool:
    return proc_start_time(rec["pid"]) == rec["start_time"]


def kill_recorded(procs: list[dict], grace_s: float = 2.0) -> list[int]:
    """SIGTERM, then SIGKILL after ``grace_s``, each recorded process still alive.

    A process counts as the recorded one only if its pid *and* start time
    match. Returns the pids signalled.
    """
    hit = []
    for rec in procs:
        if _alive(rec):
            try:
                os.kill(rec["pid"], signal.SIGTERM)
                hit.append(rec["pid"])
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    while any(_alive(r) for r in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    for rec in procs:
        if _alive(rec):
            try:
                os.kill(rec["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
    for rec in procs:  # reap our own children so they do not linger as zombies
        try:
            os.waitpid(rec["pid"], os.WNOHANG)
        except ChildProcessError:
            pass
    return hit


def _restore_sysctl(item: list) -> None:
    key, value = item
    hostknobs.set_sysctl(key, value)


def _restore_ovs_tx_sndbuf(before_bytes: int) -> None:
    # An ovs-vswitchd restarted since the run (no transmit socket yet) starts at its default size.
    if ovsctl.ovs_tx_socket_exists():
        ovsctl.set_ovs_tx_sndbuf(before_bytes)


def _restore_rcu_expedited(before: int) -> None:
    hostknobs.rcu_expedited(before)


#: How each kind of recorded machine-wide change is undone (see RunState.remember).
RESTORERS = {"sysctl": _restore_sysctl, "ovs_tx_sndbuf_bytes": _restore_ovs_tx_sndbuf,
             "rcu_expedited": _restore_rcu_expedited}


def describe_report(report: dict) -> str:
    """A cleanup report (:func:`cleanup_record`) as one short line of counts, e.g. ``2 processes,
    6 bridges, 16 interfaces removed; restored sysctl; 0 errors`` (the lists stay in the record)."""
    parts = [f"{len(report.get(k) or [])} {k}" for k in ("processes", "bridges", "interfaces")]
    line = ", ".join(parts) + " removed"
    if report.get("restored"):
        line += "; restored " + ", ".join(report["restored"])
    errors = report.get("errors") or []
    line += f"; {len(errors)} error(s)" + (f", e.g. {errors[0]}" if errors else "")
    return line


def cleanup_record(rec: dict) -> dict:
    """Remove everything a state record lists; returns what was removed.

    Order: processes, machine-wide settings changed for the run (put back),
    OVS bridges, leftover root-namespace interfaces. Errors are collected into ``errors`` rather than stopping
    the cleanup half way.
    """
    report = {"processes": [], "bridges": [], "interfaces": [], "restored": [], "errors": []}
    report["processes"] = kill_recorded(rec.get("processes", []))
    for key, value in rec.get("restore", {}).items():
        try:
            RESTORERS[key](value)
            report["restored"].append(key)
        except (SetupError, OSError) as e:
            report["errors"].append(f"restoring {key}: {e}")
    try:
        report["bridges"] = datapaths.remove_everywhere(rec.get("bridges", []))
    except SetupError as e:
        report["errors"].append(str(e))
    try:
        report["interfaces"] = hostknobs.delete_root_links(rec.get("interfaces", []))
    except SetupError as e:
        report["errors"].append(str(e))
    return report


class RunState:
    """Context manager owning one run's record (one run at a time per machine).

    On enter: take the lock (SetupError if another live run holds it), and
    clean a stale record left by a killed run. :meth:`claim` records names
    before they are created; :meth:`add_process` records each started
    process. On exit: remove everything recorded, delete the record,
    release the lock.
    """

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.dir = state_dir()
        self.path = self.dir / "state.json"
        self.rec = {"run_id": run_id, "runner_pid": os.getpid(), "bridges": [], "interfaces": [],
                    "processes": [], "restore": {}}
        self._lock = None
        self.owner_pid = os.getpid()
        self.stale_report = None
        self.final_report = None

    def __enter__(self):
        self._lock = _open_lock(self.dir)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise BusyError("another fabriclab run is active on this machine (lock held: "
                            f"{self.dir / 'lock'}); wait for it or stop it with Ctrl-C") from None
        if self.path.exists():
            try:
                _check_private(self.path)
            except SetupError:
                self._lock.close()
                raise
            try:
                old = json.loads(self.path.read_text())
            except (OSError, ValueError):
                old = {}
            self.stale_report = cleanup_record(old)
        (self.dir / TOKEN_FILE).unlink(missing_ok=True)     # a killed run's token opens nothing now
        self._write()
        return self

    def _write(self):
        _private_write(self.path, json.dumps(self.rec, indent=1))

    def claim(self, bridges: list[str], interfaces: list[str]) -> None:
        """Record names about to be created; SetupError if any exists already (not ours)."""
        clash = sorted(set(bridges) & datapaths.present_everywhere())
        clash += sorted(set(interfaces) & hostknobs.root_links())
        if clash:
            raise SetupError("these names exist already and no fabriclab record claims them: "
                             f"{', '.join(clash[:10])}{' ...' if len(clash) > 10 else ''}; "
                             "remove them or rename the fabric")
        self.rec["bridges"] += list(bridges)
        self.rec["interfaces"] += list(interfaces)
        self._write()

    def add_process(self, pid: int, what: str) -> None:
        """Record a started process by pid and kernel start time."""
        self.add_processes([(pid, what)])

    def add_processes(self, started: list[tuple[int, str]]) -> None:
        """Record started processes ``[(pid, what), ...]`` by pid and kernel start time, in one
        write of the record (a fabric's host shells: one write, not one per host)."""
        for pid, what in started:
            st = proc_start_time(pid)
            if st is not None:
                self.rec["processes"].append({"pid": pid, "start_time": st, "what": what})
        self._write()

    def forget_processes(self, pids: list[int]) -> None:
        """Drop processes that were reaped (``pids``) from the record, in one write: the record (and
        every later write of it) stays the size of what is running, not of every agent a study's
        rounds ever started. Only call it for reaped children: a reaped pid is gone."""
        gone = set(pids)
        self.rec["processes"] = [p for p in self.rec["processes"] if p["pid"] not in gone]
        self._write()

    def remember(self, key: str, value) -> None:
        """Record how to undo a machine-wide change (a key of :data:`RESTORERS`) before making it."""
        if key not in RESTORERS:
            raise KeyError(key)
        self.rec["restore"][key] = value
        self._write()

    def write_api_token(self, token: str) -> Path:
        """Write the run's REST API token to ``api-token`` in the state folder (mode 0600; the
        folder is 0700) and return its path; removed when the run ends."""
        path = self.dir / TOKEN_FILE
        _private_write(path, token + "\n")
        return path

    def forget(self, key: str) -> None:
        """The change recorded under ``key`` was undone by its owner."""
        self.rec["restore"].pop(key, None)
        self._write()

    def __exit__(self, *exc):
        if os.getpid() != self.owner_pid:   # a forked copy of the runner: not ours to clean
            return False
        try:
            self.final_report = cleanup_record(self.rec)
            self.path.unlink(missing_ok=True)
            (self.dir / TOKEN_FILE).unlink(missing_ok=True)
        finally:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
        return False


def clean_stale() -> dict | None:
    """``make clean``: remove what a recorded run left behind; None if nothing recorded.

    Raises SetupError if a live run holds the lock (stop it with Ctrl-C instead).
    """
    d = state_dir()
    path = d / "state.json"
    with _open_lock(d) as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BusyError("a fabriclab run is active; stop it with Ctrl-C (it cleans up after itself)") from None
        try:
            if not path.exists():
                return None
            _check_private(path)
            try:
                rec = json.loads(path.read_text())
            except ValueError:
                rec = {}
            report = cleanup_record(rec)
            path.unlink(missing_ok=True)
            (d / TOKEN_FILE).unlink(missing_ok=True)
            return report
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
