"""Where results go: every path the user gives is checked before anything starts, and every
results folder is made here, with explicit modes.

- :func:`check_results_root`: a ``--results`` folder (it may not exist yet) that can hold a run's
  folder; :class:`~common.errors.PathError` (one line naming the path, exit 2) otherwise.
- :func:`check_input_path`: a folder or file the user gives to be read (``lab check --results``,
  ``--answers``).
- :func:`next_folder`: the name of the next ``<UTC time>-<name>`` folder under a results root
  (refusing a symlink already standing at it), :func:`make_folder`: creates it, exclusively.

Modes: folders 0755, files 0644 (the process's umask is made to take away group and world write
when it would leave results world-writable, as umask 000 would; a stricter umask such as 077 or the
group-writable 002 is kept). The umask is set when a results folder is made, so every file of the
run, the agents' and the controller's included (they inherit it), follows it.
"""
from __future__ import annotations

import os
import stat
from datetime import datetime, timezone
from pathlib import Path

from common.errors import PathError

#: The umask bits added when the caller's umask would leave results world-writable.
SAFE_UMASK_BITS = 0o022
#: File systems that are the kernel's, not a place for results (nor for answers to read).
KERNEL_TREES = (Path("/proc"), Path("/sys"))


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _refuse_kernel_trees(given: str, path: Path) -> None:
    for p in (Path(os.path.abspath(path)), Path(os.path.realpath(path))):
        for tree in KERNEL_TREES:
            if p == tree or tree in p.parents:
                raise PathError(f"{given}: under {tree}, the kernel's file system, not a place for fabriclab's files")


def _follow_symlink(given: str, path: Path, st: os.stat_result) -> os.stat_result:
    """The stat of what the symlink ``path`` (lstat ``st``) points to; PathError when it dangles
    or was made by another user (neither root nor the caller: planted in a shared folder)."""
    if st.st_uid not in (0, os.geteuid()):
        raise PathError(f"{given}: a symlink made by uid {st.st_uid}, not by you or root; refused "
                        "(remove it if you did not put it there)")
    try:
        return os.stat(path)
    except OSError:
        raise PathError(f"{given}: a dangling symlink (to {os.readlink(path)}); remove it or give another path") from None


def check_results_root(path: str | Path) -> Path:
    """``path`` as a results root: an existing folder, or a path whose nearest existing ancestor is
    a folder; either writable by the caller (root included: a read-only file system refuses).
    Nothing is created.

    Raises:
        PathError: empty; under /proc or /sys; a file (or pipe, device...), or below one; a
            dangling symlink, or a symlink made by another user; not writable. One line naming it.
    """
    given = str(path)
    if not given:
        raise PathError("--results: an empty path")
    p = Path(given)
    _refuse_kernel_trees(given, p)
    try:
        st = os.lstat(p)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as e:
        raise PathError(f"{given}: {e.strerror}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            st = _follow_symlink(given, p, st)
        if not stat.S_ISDIR(st.st_mode):
            raise PathError(f"{given}: {_kind(st.st_mode)}, not a folder for results")
        where = p
    else:
        where = Path(os.path.abspath(p)).parent
        while True:
            try:
                ast = os.stat(where)
                break
            except (FileNotFoundError, NotADirectoryError):
                where = where.parent
            except OSError as e:
                raise PathError(f"{given}: {where}: {e.strerror}") from None
        if not stat.S_ISDIR(ast.st_mode):
            raise PathError(f"{given}: below {where}, which is {_kind(ast.st_mode)}, not a folder")
    if not os.access(where, os.W_OK | os.X_OK):
        raise PathError(f"{given}: {'it' if where == p else where} is not writable by you")
    return p


def check_input_path(path: str | Path, what: str, folder: bool) -> Path:
    """``path`` as something the user gives to be read: an existing folder (``folder``) or regular
    file, not under /proc or /sys, not a dangling symlink or one made by another user. ``what``
    names it in the message (``results folder``, ``answers file``).

    Raises:
        PathError: one line naming the path and what is wrong.
    """
    given = str(path)
    if not given:
        raise PathError(f"{what}: an empty path")
    p = Path(given)
    _refuse_kernel_trees(given, p)
    try:
        st = os.lstat(p)
    except (FileNotFoundError, NotADirectoryError):
        raise PathError(f"{given}: no such {what}") from None
    except OSError as e:
        raise PathError(f"{given}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        st = _follow_symlink(given, p, st)
    ok = stat.S_ISDIR(st.st_mode) if folder else stat.S_ISREG(st.st_mode)
    if not ok:
        raise PathError(f"{given}: {_kind(st.st_mode)}, not a {what}")
    return p


def next_folder(results_root: str | Path, name: str, now: datetime | None = None) -> Path:
    """The path of the next ``<UTC time>-<name>`` folder under ``results_root`` (``-2``, ``-3``...
    when a folder of that name exists). Nothing is created.

    Raises:
        PathError: a symlink stands where the folder goes (dangling or not: no run made it).
    """
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    root = Path(results_root)
    out, n = root / f"{stamp}-{name}", 1
    while os.path.lexists(out):
        if out.is_symlink():
            raise PathError(f"{out}: a symlink stands where this run's folder goes (no run makes one); remove it")
        n += 1
        out = root / f"{stamp}-{name}-{n}"
    return out


def safe_umask() -> int:
    """Make this process's umask take group and world write away when it would leave files
    world-writable (umask 000 -> 022); a umask that already keeps the world out is kept. Returns
    the umask in force."""
    old = os.umask(0o022)
    new = old if old & 0o002 else old | SAFE_UMASK_BITS
    os.umask(new)
    return new


def make_folder(path: str | Path) -> Path:
    """Create the results folder ``path`` (and its missing parents) after :func:`safe_umask`:
    0755 under umask 022 or 000, as the umask says when it keeps the world out (077: 0700). ``path`` itself must not exist: what stands there (a symlink planted
    after :func:`next_folder` chose the name) is never followed.

    Raises:
        PathError: something stands at ``path``, or it cannot be created (naming it).
    """
    safe_umask()
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.mkdir()
    except FileExistsError:
        raise PathError(f"{p}: something appeared there before fabriclab could create it (a planted symlink?); "
                        "nothing started") from None
    except OSError as e:
        raise PathError(f"{p}: cannot create it ({e.strerror})") from None
    return p
