"""The serialisation check in the kernel: loads ``controller/bpf/dequeue.bpf.c`` (compiled by
``make setup`` to ``build/dequeue.bpf.o``), attaches it to the ``qdisc:qdisc_dequeue`` tracepoint
and reads, per watched port, the gaps between dequeues while the port was backlogged against one
frame's time on the wire (the C source's header says how).

Nothing is pinned: the tracepoint link lives in the loading process, so a crashed run leaves
nothing behind.
"""
from __future__ import annotations

import ctypes
import struct
from pathlib import Path

from controller.libbpf import BPF_ANY, AttachedProgram, Libbpf

REPO = Path(__file__).resolve().parent.parent
OBJECT = REPO / "build" / "dequeue.bpf.o"
WHO = "BPF dequeue-gap check"
IFNAMSIZ = 16
#: Bins of gap / frame time in tenths; the last one is open-ended (3.0 and above).
NBINS = 31
#: struct fl_deq_port: rate_kbps, last_ns, last_len, backlogged, packets, bytes, gaps, within,
#: gap_ns, frame_ns, max_len, the ceiling's wire_ns, first_ns, min_sv (signed), min_idx, min_t,
#: lead_ns (signed), lead_frames, lead_span_ns, lead_t_ns, ratio_sum, ratio_sq, requeues, requeued,
#: then bins[NBINS]
PORT = struct.Struct(f"=11Q2Qq2Qq7Q{NBINS}Q")
FIELDS = ("rate_kbps", "last_ns", "last_len", "backlogged", "packets", "bytes", "gaps", "within",
          "gap_ns", "frame_ns", "max_len", "wire_ns", "first_ns", "min_sv", "min_idx", "min_t",
          "lead_ns", "lead_frames", "lead_span_ns", "lead_t_ns", "ratio_sum", "ratio_sq", "requeues", "requeued")
#: ratio_sum / ratio_sq: gap / frame time in permille, each gap's capped here (as in the program).
RATIO_CAP = 1_000_000
#: The per-frame state of the program: dropped from what :meth:`DequeueGaps.read` returns.
STATE = ("last_ns", "last_len", "backlogged", "wire_ns", "min_sv", "min_idx", "min_t", "requeues")


def _key(ifname: str) -> bytes:
    raw = ifname.encode()
    if not raw or len(raw) >= IFNAMSIZ:
        raise ValueError(f"interface name {ifname!r} is not 1..15 bytes")
    return raw.ljust(IFNAMSIZ, b"\0")


class DequeueGaps(AttachedProgram):
    """The loaded dequeue-gap program. Use :meth:`load` (or as a context manager); every method
    raises SetupError with libbpf's or the kernel's reason."""

    def __init__(self, lib: Libbpf, obj, link, map_fd: int):
        super().__init__(lib, obj, link)
        self.map_fd = map_fd

    @classmethod
    def load(cls, path: Path = OBJECT) -> "DequeueGaps":
        """Open and load ``build/dequeue.bpf.o`` and attach it to the dequeue tracepoint.

        Raises:
            SetupError: the object is not built, the kernel refused it, or the attach failed.
        """
        lib = Libbpf(WHO)
        obj, link, fds = lib.load_and_attach(path, "fl_deq", {"fl_deq_port": PORT.size})
        return cls(lib, obj, link, fds["fl_deq_port"])

    def watch(self, ifname: str, rate_bps: float) -> None:
        """Start (or restart from zero) counting port ``ifname`` at line rate ``rate_bps``.

        Raises:
            ValueError: a name longer than 15 bytes or a rate below 1 kbit/s.
            SetupError: the map refused the entry.
        """
        rate_kbps = int(round(rate_bps / 1000))
        if rate_kbps < 1:
            raise ValueError(f"rate_bps {rate_bps} is below 1 kbit/s")
        k = ctypes.create_string_buffer(_key(ifname), IFNAMSIZ)
        v = ctypes.create_string_buffer(PORT.pack(rate_kbps, *([0] * (len(FIELDS) - 1 + NBINS))), PORT.size)
        self.lib.check(self.lib.lib.bpf_map_update_elem(self.map_fd, k, v, BPF_ANY), f"watch {ifname}")

    def read(self, ifname: str) -> dict | None:
        """Port ``ifname``'s counters (:data:`FIELDS` without the :data:`STATE`, and ``bins``: NBINS
        counts of gap / frame time in tenths), or None if it is not watched. Times are
        CLOCK_MONOTONIC nanoseconds; ``lead_ns`` is the most the port ran ahead of its line over any
        window of frames (``lead_frames`` frames whose wire time exceeded their ``lead_span_ns``,
        ending at ``lead_t_ns``), 0 if it never did; ``ratio_sum`` and ``ratio_sq`` are the sums of
        each backlogged gap / frame time in permille (at most :data:`RATIO_CAP`) and its square;
        ``requeued`` counts dequeues of a packet the driver had refused (counted once, not twice)."""
        k = ctypes.create_string_buffer(_key(ifname), IFNAMSIZ)
        v = ctypes.create_string_buffer(PORT.size)
        if self.lib.lib.bpf_map_lookup_elem(self.map_fd, k, v) < 0:
            return None
        vals = PORT.unpack(v.raw)
        d = dict(zip(FIELDS, vals[:len(FIELDS)]))
        for state in STATE:
            del d[state]
        d["bins"] = list(vals[len(FIELDS):])
        return d
