"""Starting the processes a run leaves running while it works (the controller, the queue sampler,
the traffic agents): none of them keeps a descriptor of its caller above 2 (a lock file the caller
holds, a pipe of a test harness), and each leads a session of its own, so a signal or hang-up meant
for the caller's terminal does not reach it. scripts/detached.sh does the same for the set-up's
Open vSwitch daemons.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

#: The checkout (or installed package root) the agents and the sampler run from (their ``cwd``).
REPO = Path(__file__).resolve().parent.parent


def spawn(argv: list[str], **popen_args) -> subprocess.Popen:
    """``subprocess.Popen(argv, **popen_args)`` with descriptors above 2 closed and a new session.

    Raises:
        ValueError: ``popen_args`` asks to keep descriptors (``pass_fds``, ``close_fds=False``)
            or to stay in the caller's session (``start_new_session=False``).
        OSError: as :class:`subprocess.Popen`.
    """
    _refuse_inheritance(popen_args)
    if popen_args.get("start_new_session") is False:
        raise ValueError("spawn: a started process leads its own session (start_new_session=False given)")
    return subprocess.Popen(argv, close_fds=True, start_new_session=True,
                            **{k: v for k, v in popen_args.items() if k not in ("close_fds", "start_new_session")})


def host_spawn(host, argv: list[str], **popen_args) -> subprocess.Popen:
    """``host.popen(argv, **popen_args)`` of a Mininet host with descriptors above 2 closed.

    Mininet runs it as ``mnexec -da PID argv``: mnexec enters the host's namespaces and calls
    setsid(), so the process leads its own session (a new session asked of Popen as well would make
    mnexec, then a group leader, fork and exit, and the returned pid would not be the process's).

    Raises:
        ValueError: ``popen_args`` asks to keep descriptors or sets ``start_new_session``.
    """
    _refuse_inheritance(popen_args)
    if "start_new_session" in popen_args:
        raise ValueError("host_spawn: mnexec -d gives the process its own session; start_new_session is not for it")
    return host.popen(argv, close_fds=True, **{k: v for k, v in popen_args.items() if k != "close_fds"})


def _refuse_inheritance(popen_args: dict) -> None:
    if popen_args.get("pass_fds"):
        raise ValueError("spawn: a started process keeps no descriptor above 2 (pass_fds given)")
    if popen_args.get("close_fds") is False:
        raise ValueError("spawn: a started process keeps no descriptor above 2 (close_fds=False given)")
