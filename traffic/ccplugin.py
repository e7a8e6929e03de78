"""RoCE rate-controller plug-ins: a user's own congestion control, one Python file.

A scenario names the file (``roce.cc.plugin``, with optional numeric ``roce.cc.params``). The
file defines exactly one subclass of traffic.ratecontrol.RateController with a ``name``, a
``from_job(job)`` class method and a ``rate_bps()`` method (and the events it reacts to:
docs/roce-cc.md). :func:`load_plugin` loads it with importlib from its path (the file need not
be on ``sys.path``; no bytecode cache is written beside it) and checks it, once in the
scenario check (experiments.scenario.validate) and once in each RoCE agent
(traffic.ratecontrol.for_job). Every problem is a :class:`PluginError`: one line naming the file
and what is wrong. Rounds and results record the controller as ``plugin:<name>``.

A plug-in runs inside the RoCE agents with the run's privileges (root), like the rest of the run.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import math
import os
import re
import sys
import traceback
from pathlib import Path

from traffic.ccbase import RateController

#: The prefix of a plug-in's mode in records (``plugin:<name>``).
PLUGIN_PREFIX = "plugin:"
#: What a plug-in's ``name`` may be.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: The job a plug-in is tried on when it is loaded (traffic.roce's job format, the fields a
#: controller reads): a 10 Mbit/s host link, 1024-byte MTU, an ACK every 16 packets.
SAMPLE_JOB = {"line_rate_mbps": 10.0, "mtu_bytes": 1024, "ack_every": 16, "rto_s": 0.3, "rate_mbps": 10.0}

#: (resolved path, mtime_ns, size) -> the checked class: each agent loads a file once for all its QPs.
_LOADED: dict[tuple, type] = {}
#: (the same key, cc_params) pairs whose sample job passed.
_TRIED: set = set()


class PluginError(ValueError):
    """A rate-controller plug-in that cannot be used: its file cannot be read or has a syntax
    error, it defines no (or more than one) RateController subclass, the class lacks ``name``,
    ``from_job`` or ``rate_bps``, it fails on a sample job, or it raised while a run used it.

    Attributes:
        path: the plug-in file as named.
        problem: what is wrong, one line.
    """

    def __init__(self, path, problem: str):
        self.path, self.problem = str(path), " ".join(str(problem).split())
        super().__init__(f"rate-controller plug-in {self.path}: {self.problem}")


class _NoBytecodeLoader(importlib.machinery.SourceFileLoader):
    """A source loader that writes no ``__pycache__`` beside the plug-in (which may be the
    user's directory, and the agents run as root)."""

    def set_data(self, path, data, *, _mode=0o666):
        """Write nothing."""


def _line_in(exc: BaseException, filename: str) -> str:
    """`` (line N, in func)`` of the innermost frame of ``exc``'s traceback in ``filename``, or ''."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    return f" (line {frames[-1].lineno}, in {frames[-1].name})" if frames else ""


def _module_name(resolved: Path) -> str:
    """A module name of its own for the plug-in at ``resolved`` (never one on ``sys.path``)."""
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
    return "fabriclab_ccplugin_" + re.sub(r"\W", "_", resolved.stem) + "_" + digest


def sample_job(params: dict | None = None, name: str = "plugin") -> dict:
    """The job a plug-in is tried on (:data:`SAMPLE_JOB`, mode ``plugin:<name>``, ``cc_params``)."""
    return {**SAMPLE_JOB, "mode": PLUGIN_PREFIX + name, "cc_params": dict(params or {})}


def _positive_rate(cc, path: str, when: str) -> None:
    r = cc.rate_bps()
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0:
        raise PluginError(path, f"rate_bps() returned {r!r} {when}; it must be a positive finite number "
                                "(bit/s)")


def _try_sample(cls, path: str, filename: str, params: dict | None) -> None:
    """Build the controller for a sample job, run it through each event once, read its rate and
    record; a PluginError naming the method that failed."""
    step = "from_job"
    try:
        cc = cls.from_job(sample_job(params, cls.name))
        if not isinstance(cc, RateController):
            raise PluginError(path, f"{cls.__name__}.from_job returned {type(cc).__name__}, not a "
                                    f"{cls.__name__}")
        step = "start"
        cc.start(0.0)
        step = "rate_bps"
        _positive_rate(cc, path, "for a sample job (10 Mbit/s line) at its start")
        for step, call in (("advance", lambda: cc.advance(0.001)), ("on_sent", lambda: cc.on_sent(1082, 0.001)),
                           ("on_ack", lambda: cc.on_ack(0.005, 0.004, 16384)),
                           ("on_ack", lambda: cc.on_ack(0.006, None, 1024)), ("on_cnp", lambda: cc.on_cnp(0.007)),
                           ("advance", lambda: cc.advance(0.01))):
            call()
        step = "rate_bps"
        _positive_rate(cc, path, "for a sample job after an ACK and a CNP")
        step = "target_bps"
        cc.target_bps()
        step = "record"
        rec = cc.record()
        if not isinstance(rec, dict):
            raise PluginError(path, f"record() returned {type(rec).__name__}, not a dict")
    except PluginError:
        raise
    except Exception as e:
        raise PluginError(path, f"{step} raised {type(e).__name__}: {e} on a sample job (10 Mbit/s line, "
                                f"cc_params {dict(params or {})}){_line_in(e, filename)}") from None


def load_plugin(path, params: dict | None = None) -> type[RateController]:
    """Load and check the rate-controller plug-in at ``path`` (relative to the current directory,
    or absolute). Returns its one RateController subclass, loaded once per file version.

    The class is tried on a sample job (:func:`sample_job` with ``params`` as its
    ``cc_params``): built by ``from_job``, started, run through each event once, its
    ``rate_bps()`` read twice (a positive finite number each time) and its ``record()`` (a dict).

    Raises:
        PluginError: one line naming the file and what is missing or wrong: unreadable, a syntax
            error (with its line), an exception while loading (with its line), no subclass of
            RateController or more than one, no ``name``, no ``from_job`` or ``rate_bps``, or a
            failure on the sample job (naming the method and its line).
    """
    p = Path(path)
    try:
        resolved = p.resolve(strict=True)
        st = resolved.stat()
    except OSError as e:
        raise PluginError(path, f"cannot read it: {e.strerror or e}") from None
    if not p.is_file():
        raise PluginError(path, "is not a regular file")
    key = (str(resolved), st.st_mtime_ns, st.st_size)
    tried = (key, tuple(sorted((params or {}).items())))
    if key in _LOADED:
        cls = _LOADED[key]
        if tried not in _TRIED:
            _try_sample(cls, str(path), str(resolved), params)
            _TRIED.add(tried)
        return cls
    if not os.access(resolved, os.R_OK):
        raise PluginError(path, "cannot read it: permission denied")
    modname = _module_name(resolved)
    loader = _NoBytecodeLoader(modname, str(resolved))
    spec = importlib.util.spec_from_file_location(modname, str(resolved), loader=loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module           # dataclasses and typing look a class's module up there
    try:
        loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(modname, None)
        raise PluginError(path, f"syntax error at line {e.lineno}: {e.msg}") from None
    except Exception as e:
        sys.modules.pop(modname, None)
        raise PluginError(path, f"raised {type(e).__name__} while loading: {e}{_line_in(e, str(resolved))}") from None
    found = [v for v in vars(module).values()
             if isinstance(v, type) and issubclass(v, RateController) and v.__module__ == modname]
    if not found:
        raise PluginError(path, "defines no subclass of traffic.ratecontrol.RateController (write "
                                "`from traffic.ratecontrol import RateController` and `class MyCc(RateController):`)")
    if len(found) > 1:
        raise PluginError(path, f"defines {len(found)} subclasses of RateController "
                                f"({', '.join(c.__name__ for c in found)}); a plug-in defines exactly one")
    cls = found[0]
    name = cls.name
    if not any("name" in b.__dict__ for b in cls.__mro__ if b is not RateController):
        raise PluginError(path, f"class {cls.__name__} has no name (a class attribute: name = \"mycc\"; "
                                "results record it as plugin:<name>)")
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise PluginError(path, f"class {cls.__name__}'s name must be 1-64 letters, digits, '_', '.' or '-' "
                                f"(starting with a letter or digit), not {name!r}")
    if getattr(cls.from_job, "__func__", None) is RateController.from_job.__func__:
        raise PluginError(path, f"class {cls.__name__} has no from_job (a @classmethod from_job(cls, job) "
                                "returning the controller of one queue pair)")
    if cls.rate_bps is RateController.rate_bps:
        raise PluginError(path, f"class {cls.__name__} has no rate_bps (a method rate_bps(self) returning "
                                "the rate in bit/s the queue pair may send at)")
    every = cls.ack_every_packets
    if every is not None and not (isinstance(every, int) and not isinstance(every, bool) and 1 <= every <= 65536):
        raise PluginError(path, f"class {cls.__name__}'s ack_every_packets must be None (the responder's count) "
                                f"or an integer from 1 to 65536 (ask for an ACK every that many packets), not {every!r}")
    _try_sample(cls, str(path), str(resolved), params)
    _LOADED[key] = cls
    _TRIED.add(tried)
    return cls


def plugin_name(path, params: dict | None = None) -> str:
    """The ``name`` of the plug-in at ``path`` (loaded and checked by :func:`load_plugin`).
    Raises PluginError."""
    return load_plugin(path, params).name


def failure_in(exc: BaseException, path) -> PluginError | None:
    """A PluginError naming the plug-in at ``path`` and ``exc`` when ``exc`` was raised by the
    plug-in's code (its traceback passes through the file) while a run used it; else None."""
    if isinstance(exc, PluginError):
        return exc
    try:
        filename = str(Path(path).resolve())
    except OSError:
        return None
    where = _line_in(exc, filename)
    if not where:
        return None
    return PluginError(path, f"raised {type(exc).__name__}: {exc}{where} while the run used it")
