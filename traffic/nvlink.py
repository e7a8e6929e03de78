"""The intra-server channel of a GPU server: what NVLink through an NVSwitch is to the ranks.

Inside a server every GPU reaches every other over NVLink at a rate many times its NIC's (the
textbook's example: 600 GB/s per GPU against a 400 Gbit/s NIC, 12:1). fabriclab does not send
that traffic through the emulated switches: their one forwarding thread carries a few hundred
Mbit/s in all, and NVLink traffic is not fabric traffic. Ranks of one server exchange
through kernel memory instead, one named pipe (FIFO) per directed pair of ranks, and the
sender paces its writes at the NVLink rate (:func:`paced_write`). Named pipes live in the
filesystem, which Mininet's hosts share, so the GPUs of a server reach each other whether
they are ranks of one host (one NIC per server) or hosts of their own (one NIC per GPU, a
rail-optimised fabric).

What it models: a point-to-point channel per pair at ``rate_bps``, every pair at once (an
NVSwitch is non-blocking), with a per-transfer latency of whatever a pipe write and read cost
here (measured by the run as the NVLink alpha). What it does not: NVLink's microsecond
latency at its real rate, SHARP-style in-switch reduction, or contention inside a GPU.

Opening: the reader creates its pipe and opens it read-write (:meth:`Channel.open_reader`: the
open does not wait for a writer, and a read before the writer has opened waits for data
instead of seeing the end of the pipe); the writer retries until a reader is there
(:meth:`Channel.open_writer`), so the ranks of a ring cannot wait on each other while they
open. A writer that dies leaves its reader waiting: the agent's deadline ends it.
"""
from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

#: Bytes per paced write: at 120 Mbit/s one slice is about 1 ms of the channel.
SLICE_BYTES = 16384


def fifo_path(fifo_dir: str | Path, src: int, dst: int) -> Path:
    """The named pipe carrying rank ``src``'s data to rank ``dst``."""
    return Path(fifo_dir) / f"{src}-{dst}.fifo"


def _blocking(fd: int) -> None:
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)


def paced_write(fd: int, data: memoryview, rate_bps: float, slice_bytes: int = SLICE_BYTES) -> float:
    """Write all of ``data`` to ``fd`` at no more than ``rate_bps`` (slices of ``slice_bytes``,
    each after the time the previous ones take at that rate); returns the Unix time the last
    byte was written.

    Raises:
        ValueError: a rate that is not positive.
        OSError: the write failed (the reader closed: BrokenPipeError).
    """
    if not rate_bps > 0:
        raise ValueError(f"rate_bps must be > 0, not {rate_bps}")
    data = memoryview(data).cast("B")
    t0 = time.monotonic()
    sent = 0
    while sent < len(data):
        due = t0 + 8 * sent / rate_bps
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        end = min(len(data), sent + slice_bytes)
        while sent < end:
            sent += os.write(fd, data[sent:end])
    # the last slice is on the wire for its own time too
    rest = t0 + 8 * sent / rate_bps - time.monotonic()
    if rest > 0:
        time.sleep(rest)
    return time.time()


def read_exact(fd: int, view: memoryview) -> None:
    """Fill ``view`` from ``fd``. Raises ConnectionError at the end of the pipe."""
    view = memoryview(view).cast("B")
    got = 0
    while got < len(view):
        n = os.readv(fd, [view[got:]])
        if n == 0:
            raise ConnectionError("the NVLink peer closed its pipe mid-chunk")
        got += n


class Channel:
    """One rank's ends of the NVLink pipes in ``fifo_dir`` (module docstring).

    Args:
        fifo_dir: the directory of the pipes (made if missing); the same for every rank of a run.
        rate_bps: the NVLink rate each write is paced at (bit/s, > 0).

    Raises:
        ValueError: a rate that is not positive.
    """

    def __init__(self, fifo_dir: str | Path, rate_bps: float):
        if not rate_bps > 0:
            raise ValueError(f"nvlink rate_bps must be > 0, not {rate_bps}")
        self.dir = Path(fifo_dir)
        self.rate_bps = float(rate_bps)
        self.readers: dict[int, int] = {}       # source rank -> fd
        self.writers: dict[int, int] = {}       # destination rank -> fd
        self.made: list[Path] = []

    def open_reader(self, src: int, me: int) -> None:
        """Create the pipe ``src`` -> ``me`` and open its read end (read-write, so the open does not
        wait for the writer and reads wait for data: module docstring)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        p = fifo_path(self.dir, src, me)
        try:
            os.mkfifo(p, 0o600)
            self.made.append(p)
        except FileExistsError:
            pass
        self.readers[src] = os.open(p, os.O_RDWR)

    def open_writer(self, me: int, dst: int, deadline_unix_s: float) -> None:
        """Open the write end of the pipe ``me`` -> ``dst`` once its reader has it open.
        Raises TimeoutError at the deadline."""
        p = fifo_path(self.dir, me, dst)
        while True:
            try:
                fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as e:
                if e.errno not in (errno.ENXIO, errno.ENOENT):
                    raise
                if time.time() > deadline_unix_s:
                    raise TimeoutError(f"rank {dst} never opened its NVLink pipe from rank {me}") from None
                time.sleep(0.01)
        _blocking(fd)
        self.writers[dst] = fd

    def send(self, dst: int, data: memoryview) -> float:
        """Write ``data`` to rank ``dst`` at the NVLink rate; the Unix time it was done."""
        return paced_write(self.writers[dst], data, self.rate_bps)

    def recv(self, src: int, view: memoryview) -> None:
        """Read exactly ``len(view)`` bytes from rank ``src``."""
        read_exact(self.readers[src], view)

    def close(self) -> None:
        """Close every end and remove the pipes this rank made."""
        for fd in list(self.readers.values()) + list(self.writers.values()):
            try:
                os.close(fd)
            except OSError:
                pass
        self.readers.clear()
        self.writers.clear()
        for p in self.made:
            p.unlink(missing_ok=True)
