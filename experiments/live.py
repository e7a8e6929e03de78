"""The processes of a run inside a live fabric: traffic agents started in hosts and released
together, the queue sampler, the all-pairs warm-up and RTT probe, and the run's signal record.

Shared by the run loop and every workload module (they import it; it imports none of them).
"""
from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from common.errors import SetupError
from experiments.procs import host_spawn, spawn
from experiments import reach
from experiments.procs import REPO

if TYPE_CHECKING:      # the live fabric and run state are passed in: this module runs without Mininet
    from experiments.fabric import LiveFabric
    from experiments.state import RunState

_SIGNALLED: list[int] = []   # signals received during run(), in order


#: The exit code of a run ended by each signal (128 + the signal's number, as a shell reports it).
SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}
#: How each signal is named on the terminal and in a stopped round's summary (``stopped``).
SIGNAL_NAMES = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}

#: The longest a run stopped by a signal during a round spends keeping what it measured, from the
#: first signal to its exit (seconds): the agents' grace (2 x :data:`STOP_GRACE_S`), the sampler,
#: the round's analysis, the teardown and the run's closing files. Measured from the signal to
#: the exit on a 1-spine, 3-host fabric at 10 Mbit/s (10 runs each, 2026-12-06): a UDP incast
#: 2.18 / 2.55 / 3.32 s, TCP Poisson arrivals 2.62 / 3.04 / 3.57 s (min / median / max;
#: docs/results.md). Past it the run unwinds at once, as a signal outside a round does (what is
#: written so far stays).
STOP_LIMIT_S = 60.0


def _say(text: str) -> None:
    """One line on stderr from a signal handler (os.write: a print there could meet the main
    thread's own write to stderr and raise "reentrant call")."""
    try:
        os.write(2, (text + "\n").encode())
    except OSError:
        pass


class SignalStop:
    """What SIGTERM, SIGINT and SIGHUP do to a run (the handler of :func:`signals_unwind`).

    Outside a round's traffic (set-up, between rounds) a signal unwinds the run where it is (every
    ``finally`` runs, the fabric is torn down). Inside a round (:meth:`keeping`: from the start of
    its traffic to the end of its analysis) the first signal instead asks the round to stop
    (:data:`ROUND_STOP`, reason the signal's name): the agents get SIGTERM and write what they
    counted, the round is saved and analysed, marked ``stopped``, and the run ends after it
    (:attr:`stopped`; the run loop runs no further round, tears the fabric down, writes its
    closing files and exits with the signal's code). Every further signal from then on is said
    and ignored, so a second Ctrl-C does not lose the round; the whole stop is bounded: once
    :data:`STOP_LIMIT_S` has passed since the first signal, the run unwinds at once.
    """

    def __init__(self):
        self.limit_s = STOP_LIMIT_S
        self._keeping = False
        self.signum: int | None = None      # the signal whose stop is being kept
        self.expired = False
        self._t0 = 0.0
        self._timer: threading.Timer | None = None

    @property
    def stopped(self) -> bool:
        """True once a signal stopped a round and the run is ending after it."""
        return self.signum is not None

    def reset(self) -> None:
        """A new run: no stop, no window, no timer."""
        self.cancel()
        self._keeping, self.signum, self.expired = False, None, False

    def cancel(self) -> None:
        """Stop the timer of :data:`STOP_LIMIT_S` (the run is exiting)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    @contextmanager
    def keeping(self):
        """While inside: a signal stops the round and keeps it instead of unwinding (class doc).
        An error raised inside once a signal stopped the round (a workload that could not make
        sense of its agents' partial records) is said, and the run unwinds with the signal's
        exit as it would have without keeping."""
        self._keeping = True
        try:
            yield
        except Exception as e:
            if not self.stopped:
                raise
            _say(f"fabriclab: the stopped round could not be kept ({type(e).__name__}: {e}); "
                 "stopping without it")
            _raise_for(self.signum)
        finally:
            self._keeping = False

    def on_signal(self, signum: int) -> bool:
        """Called by the handler with each signal; True when the signal is absorbed (the run goes
        on keeping the round), False when the run must unwind now."""
        name = SIGNAL_NAMES.get(signum, str(signum))
        if self.stopped:
            if self.expired:
                return False
            left = max(0.0, self.limit_s - (time.monotonic() - self._t0))
            _say(f"fabriclab: {name} ignored: still writing what the stopped round measured, then the "
                 f"fabric goes down (at most {left:.0f} s more)")
            return True
        if not self._keeping:
            return False
        self.signum, self._t0 = signum, time.monotonic()
        ROUND_STOP.request(name)
        main = threading.main_thread().ident
        self._timer = threading.Timer(self.limit_s, self._expire, args=(main,))
        self._timer.daemon = True
        self._timer.start()
        _say(f"fabriclab: {name}: stopping the round's traffic; the agents write what they counted and the "
             f"round is analysed (marked stopped) before the fabric goes down, at most {self.limit_s:.0f} s; "
             "further signals are ignored until then")
        return True

    def _expire(self, main_ident: int) -> None:
        """The timer: the stop took :data:`STOP_LIMIT_S`; make the main thread unwind now."""
        self.expired = True
        _say(f"fabriclab: keeping the stopped round took more than {self.limit_s:.0f} s: stopping without it")
        signal.pthread_kill(main_ident, self.signum)


#: The run's one signal policy (a run is one process).
SIGNAL_STOP = SignalStop()


def _on_signal(signum, _frame):
    """SIGTERM/SIGINT/SIGHUP (the terminal closed): during a round, stop and keep it
    (:class:`SignalStop`); otherwise unwind through every `finally` (the fabric is torn
    down). Recorded too: Python drops an exception raised while a ``__del__`` runs
    ("Exception ignored in ..."), and a Ctrl-C that landed there once let a run finish with exit 0
    (CI); :func:`check_signalled` raises it again."""
    _SIGNALLED.append(signum)
    if SIGNAL_STOP.on_signal(signum):
        return
    _raise_for(SIGNAL_STOP.signum if SIGNAL_STOP.stopped else signum)


def _raise_for(signum) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(SIGNAL_EXIT.get(signum, 143))


class RoundStop:
    """A request, from a thread that watches the round (experiments.features.watch) or from a
    signal (:class:`SignalStop`), to end the
    round's traffic now: :meth:`Agents.wait` stops the agents still running once it is set
    (SIGTERM, so the TCP and UDP agents write what they measured; SIGKILL after
    :data:`STOP_GRACE_S`), so a round whose emulation broke under it ends within about a second
    instead of running on.
    The run loop clears it before each round."""

    def __init__(self):
        self._event = threading.Event()
        self.reason: str | None = None

    def request(self, reason: str) -> None:
        """Ask the round to stop (the first reason is kept)."""
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    def clear(self) -> None:
        """Before a round: no request."""
        self.reason = None
        self._event.clear()

    def is_set(self) -> bool:
        """True once a stop was requested this round."""
        return self._event.is_set()


#: The run's one round-stop request (a run is one process and runs one round at a time).
ROUND_STOP = RoundStop()

#: How often a waiting run loop looks at :data:`ROUND_STOP`, in seconds.
STOP_POLL_S = 0.25
#: Seconds from the moment every agent has said READY to the common start it is released to: each
#: agent is then blocked reading its start time on stdin, so this covers writing a line to each.
RELEASE_IN_S = 0.3
#: How long a stopped round's agents get, after SIGTERM, to write what they measured (seconds).
STOP_GRACE_S = 2.0


def check_signalled(ending: bool = False) -> None:
    """Raise KeyboardInterrupt / SystemExit(143 or 129) if a signal arrived during this run and
    was lost inside a ``__del__``. A signal whose round :class:`SignalStop` is keeping is raised
    only when ``ending`` (the run's last step: it ends with that signal's code)."""
    if SIGNAL_STOP.stopped:
        if ending or SIGNAL_STOP.expired:
            _raise_for(SIGNAL_STOP.signum)
    elif _SIGNALLED:
        _raise_for(_SIGNALLED[0])


@contextmanager
def signals_unwind():
    """While inside: SIGTERM, SIGINT and SIGHUP raise SystemExit(143, 129) or KeyboardInterrupt
    where the program is, so every ``with`` and ``finally`` on the way out runs (the fabric is torn
    down, the run record cleared), except inside :meth:`SignalStop.keeping` (a round's traffic and
    analysis), where they stop the round and keep it; on a normal exit a signal that was lost
    inside a ``__del__``, or whose round was kept, is raised now (:func:`check_signalled`). The
    previous handlers come back on the way out."""
    _SIGNALLED.clear()
    SIGNAL_STOP.reset()
    old = {sig: signal.signal(sig, _on_signal) for sig in SIGNAL_EXIT}
    try:
        yield
        check_signalled(ending=True)
    finally:
        SIGNAL_STOP.cancel()
        for sig, handler in old.items():
            signal.signal(sig, handler)


class Agents:
    """Start agents inside hosts with popen, check readiness, release them together, and end them
    together: an agent that supports it says ``FINISHED`` once its own part is done, and once
    every agent has said so or ended, each is told ``END`` (traffic.roce.EndBarrier: a RoCE
    agent then stops waiting out its linger for ACKs no peer can still need)."""

    def __init__(self, lf: LiveFabric, state: RunState):
        self.lf, self.state = lf, state
        self.procs = []
        self._unrecorded: list[tuple[int, str]] = []

    def start(self, host: str, role: str, job: dict):
        """Launch one agent (``role`` rx/tx) in ``host``, its job marked as taking part in the end
        barrier (``end_barrier``); :meth:`wait_ready` waits for it and records every agent started
        so far in the run's record, in one write (a write per agent took 6 ms each on a loaded
        machine's ext4: the rename flushes the new file). Until then an agent cannot outlive the
        run: it waits for its start time on a pipe from this process, and ends at its end of file."""
        h = self.lf.host(host)
        job = dict(job, end_barrier=True)
        p = host_spawn(h, [sys.executable, "-m", "traffic.agent", json.dumps(job)], cwd=str(REPO),
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._unrecorded.append((p.pid, f"agent {host} {role}"))
        self.procs.append((f"{host}.{role}", p))
        return p

    def _record(self) -> None:
        """Record the agents started since the last call in the run's record (one write)."""
        if self._unrecorded:
            started, self._unrecorded = self._unrecorded, []
            self.state.add_processes(started)

    def wait_ready(self, timeout_s: float = 60.0):
        """Record the started agents, then wait until every one printed READY; SetupError naming
        the first that did not."""
        self._record()
        deadline = time.monotonic() + timeout_s
        for name, p in self.procs:
            line = ""
            # poll, not select: a large fabric's agents' pipes pass descriptor 1024 (a k=8 Fat-Tree's
            # 128 hosts, three pipes each), which select() cannot watch
            watch = select.poll()
            watch.register(p.stdout, select.POLLIN)
            while time.monotonic() < deadline:
                if watch.poll(100):
                    line = p.stdout.readline()
                    break
                if p.poll() is not None:
                    break
            if line.strip() != "READY":
                err = p.stderr.read() if p.poll() is not None else ""
                raise SetupError(f"agent {name} not ready within {timeout_s:.0f} s: {err.strip()[-400:]}")

    def ready_then_release(self, start_in_s: float):
        """:meth:`wait_ready`, then release every agent ``start_in_s`` from now; on any failure
        the agents are killed first (then the error propagates)."""
        try:
            self.wait_ready()
        except BaseException:
            self.kill()
            raise
        self.release(time.time() + start_in_s)

    def release(self, start_at_unix_s: float):
        """Tell every started agent its start time (Unix seconds) on its stdin."""
        self._record()
        for _, p in self.procs:
            p.stdin.write(f"{start_at_unix_s:.6f}\n")
            p.stdin.flush()

    def wait(self, deadline_unix_s: float, give_up: Callable[[], bool] | None = None) -> dict[str, int]:
        """Wait for every agent until ``deadline_unix_s``, or until :data:`ROUND_STOP` is requested
        (killing what is left then); returns ``{"<host>.<role>": exit code}``. ``give_up``, when
        given, is asked every :data:`STOP_POLL_S` while an agent is still running: once it says
        True, every agent still running is killed (a failure that makes the rest pointless, such
        as a rate-controller plug-in that raised in one agent). Raises KeyboardInterrupt/SystemExit
        for a lost signal."""
        codes = {}
        gave_up = False
        barrier = EndBarrier(self.procs)
        for host, p in self.procs:
            check_signalled()
            while not ROUND_STOP.is_set() and not gave_up:
                left = deadline_unix_s - time.time()
                if p.poll() is None:
                    barrier.watch(max(0.01, min(STOP_POLL_S, left)))
                if p.poll() is not None:
                    codes[host] = p.returncode
                    break
                if left <= STOP_POLL_S:
                    break
                gave_up = give_up is not None and bool(give_up())
            if host not in codes and not ROUND_STOP.is_set():
                p.kill()
                codes[host] = p.wait()
        if ROUND_STOP.is_set():
            self._stop_the_rest(codes)
        return codes

    def _stop_the_rest(self, codes: dict) -> None:
        """A stopped round: SIGTERM every agent not yet in ``codes`` (the TCP and UDP agents then
        write what they measured: traffic.agent.stop_on_sigterm), the senders (``<host>.tx``)
        first and the rest once they have ended (a receiver that closed first would reset the
        senders' flows before they could say they were stopped); each group gets up to
        :data:`STOP_GRACE_S`, then what is left is killed. Their exit codes go in ``codes``."""
        left = [(h, p) for h, p in self.procs if h not in codes]
        for group in ([x for x in left if x[0].endswith(".tx")], [x for x in left if not x[0].endswith(".tx")]):
            for _, p in group:
                if p.poll() is None:
                    p.terminate()
            end = time.monotonic() + STOP_GRACE_S
            for h, p in group:
                try:
                    codes[h] = p.wait(max(0.01, end - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    codes[h] = p.wait()

    def kill(self):
        """Kill every agent still running (by its recorded process), reap it, and drop every reaped
        agent from the run's record."""
        self._unrecorded = []                  # killed and reaped below: nothing to record
        for _, p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.state.forget_processes([p.pid for _, p in self.procs])


class EndBarrier:
    """The runner's side of the agents' end barrier (traffic.roce.EndBarrier is the agent's):
    reads ``FINISHED`` lines from the agents' stdout and, once every agent has said it or ended
    (and at least one said it), writes ``END`` on the stdin of each one still running, once.

    Args:
        procs: ``[(name, Popen)]`` with text-mode stdin and stdout pipes, READY already read.
    """

    def __init__(self, procs: list):
        self.procs = [p for _, p in procs]
        self.said: set[int] = set()
        self.sent = False
        self.poller = select.poll()
        self.by_fd = {}
        for p in self.procs:
            if p.stdout is not None and p.poll() is None:
                self.by_fd[p.stdout.fileno()] = p
                self.poller.register(p.stdout, select.POLLIN)

    def watch(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for an agent's line or end (a line, or an agent's end, returns
        sooner), take what arrived, and tell every agent ``END`` once the barrier is complete."""
        for fd, _ev in self.poller.poll(max(0, int(timeout_s * 1000))):
            p = self.by_fd[fd]
            line = p.stdout.readline()
            if not line:                           # the agent closed its stdout: it has ended
                self.poller.unregister(fd)
            elif line.strip() == "FINISHED":
                self.said.add(p.pid)
        if not self.sent and self.said and all(p.pid in self.said or p.poll() is not None for p in self.procs):
            self.sent = True
            for p in self.procs:
                if p.poll() is None:
                    try:
                        p.stdin.write("END\n")
                        p.stdin.flush()
                    except (BrokenPipeError, OSError):
                        pass                       # it ended meanwhile


def start_sampler(lf: LiveFabric, state: RunState, out: Path, hz: float, method: str = "auto") -> subprocess.Popen:
    """Start the queue sampler process on every switch port (``method``: ``auto``, ``bpf`` or
    ``netlink``, controller.qstats); waits for READY. SetupError if it did not start."""
    p = spawn_sampler(lf, state, out, hz, method)
    sampler_ready(p)
    return p


def spawn_sampler(lf: LiveFabric, state: RunState, out: Path, hz: float, method: str = "auto") -> subprocess.Popen:
    """Start the queue sampler as :func:`start_sampler` does, without waiting: the caller starts its
    agents meanwhile (the sampler's start, about 0.3 s of imports and a BPF load, then overlaps
    theirs) and calls :func:`sampler_ready` before it releases any traffic."""
    intfs = lf.fabric.switch_interfaces()
    p = spawn([sys.executable, "-m", "controller.qstats", "--intfs", ",".join(intfs),
               "--hz", str(hz), "--out", str(out / "queues_raw.csv"), "--meta", str(out / "sampler.json"),
               "--method", method],
              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    state.add_process(p.pid, "sampler")
    return p


def sampler_ready(p: subprocess.Popen) -> None:
    """Wait for a spawned sampler's READY (it samples from then on). SetupError if it did not start."""
    line = p.stdout.readline()
    if line.strip() != "READY":
        p.wait(5)
        raise SetupError(f"queue sampler failed: {p.stderr.read().strip()}")


def stop_sampler(p: subprocess.Popen) -> None:
    """SIGTERM the sampler and wait for it to write its files."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if p.returncode != 0:
        raise SetupError(f"queue sampler exited {p.returncode}: {p.stderr.read().strip()}")


def warm_up_reachability(lf: LiveFabric) -> float:
    """Probe every host pair once (ARP resolved before the synchronized start); return seconds taken.

    Raises:
        SetupError: some pair has not answered when 20 s passed without a new pair answering (or
            after 300 s in all: a slow machine, e.g. an emulated CPU, resolves 552 pairs' ARP slowly).
    """
    res = reach.all_pairs(reach.live_fabric_hosts(lf), timeout_s=300, stall_s=20)
    if res.missing:
        raise SetupError(f"no connectivity before traffic: {len(res.missing)} of {res.pairs} host pairs "
                         f"unreachable, e.g. {', '.join(f'{s}->{d}' for s, d in res.missing[:5])}")
    return res.elapsed_s


def measure_rtt_s(lf: LiveFabric, src: str, dst: str, payload_bytes: int = 56) -> float:
    """Median round-trip time of 5 idle pings from ``src`` to ``dst`` in seconds (SetupError on loss).
    ``payload_bytes`` 1472 makes every echo and reply a full 1514-byte frame: the round trip a data
    packet sees (serialised at every hop), where the default small ping sees almost none of it."""
    p = lf.host(src).popen(["ping", "-c", "5", "-i", "0.05", "-W", "2", "-s", str(payload_bytes),
                            lf.fabric.node(dst).ip],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    text, _ = p.communicate(timeout=15)
    rtts = sorted(float(m) for m in re.findall(r"time=([0-9.]+) ms", text))
    if not rtts:
        raise SetupError(f"ping {src}->{dst} got no reply: {text.strip()[-200:]}")
    return rtts[len(rtts) // 2] / 1000.0

