"""Fast queue sampler: one netlink qdisc dump per tick, decoding only the stats.

Why not pyroute2 here: pyroute2 decodes every attribute of every qdisc in
Python, which caps a whole-fabric dump at ~140/s on these machines
(measured on a 2-core machine); the sampler needs 200 Hz for every switch port while sharing
two cores with Open vSwitch. This module sends ``RTM_GETQDISC`` with
``NLM_F_DUMP`` on a plain ``AF_NETLINK`` socket and reads only the fixed
``struct tc_stats`` attribute (``TCA_STATS``, linux/pkt_sched.h) of each root
qdisc on the interfaces asked for. Configuration stays in pyroute2
(:mod:`controller.dataplane`).

The netlink dump's cost grows with every port on the host, busy or idle (about 2 us per port
per tick here, so a Fat-Tree k=8's 640 ports could not be read 200 times a second). Where the
kernel allows it, :class:`BpfQueueReader` is used instead: a BPF program at the qdisc enqueue and
dequeue tracepoints keeps each watched port's root-qdisc counters in a memory-mapped array
(``controller/bpf/qsample.bpf.c``), and a tick is one copy of that array, with no system call.
Neither is free: the BPF program runs at every enqueue and dequeue, inside the thread that
forwards the packet (on the userspace datapath, Open vSwitch's one forwarding thread: measured
here, a k=4 Fat-Tree permutation at 100 Mbit/s links forwarded 612 Mbit/s of switch hops with it
against 652 without, 6% less), while the netlink dump runs on the other core. So ``auto`` keeps
the netlink dump while its estimated cost (:func:`netlink_cpu_estimate`) stays within
:data:`AUTO_NETLINK_MAX_CORE` of one core, and takes the BPF reader beyond (a Fat-Tree k=6's 270
ports, a k=8's 640). The sampler records the reader it used (``method``) and why
(``method_reason``).

Run as a process (``python -m controller.qstats``) so its CPU cost can be
measured apart from the runner's: it samples until SIGTERM/SIGINT, then
writes the samples as CSV and a JSON with its achieved rate and CPU time.
"""
from __future__ import annotations

import argparse
import csv
import ctypes
import json
import mmap
import os
import resource
import signal
import socket
import struct
import sys
import time
from pathlib import Path

import numpy as np

from common.errors import SetupError
from controller.libbpf import BPF_ANY, AttachedProgram, Libbpf

NETLINK_ROUTE = 0
RTM_GETQDISC = 38
RTM_NEWQDISC = 36
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
TC_H_ROOT = 0xFFFFFFFF
TCA_STATS = 3

_NLH = struct.Struct("=IHHII")          # len, type, flags, seq, pid
_TCM = struct.Struct("=BxxxiIII")       # family, ifindex, handle, parent, info
_RTA = struct.Struct("=HH")             # len, type
_TC_STATS = struct.Struct("=QIIIIIII")  # bytes, packets, drops, overlimits, bps, pps, qlen, backlog

#: Columns of one sample row (per interface), units in the names.
COLUMNS = ("t_unix_s", "intf", "backlog_bytes", "backlog_packets", "drops_total",
           "tx_bytes_total", "tx_packets_total")


REPO = Path(__file__).resolve().parent.parent
#: The sampler's BPF object (``make setup`` compiles controller/bpf/qsample.bpf.c to it).
QS_OBJECT = REPO / "build" / "qsample.bpf.o"
#: One entry of the BPF program's port array (struct fl_qs_port): seq, backlog_bytes,
#: backlog_packets, drops, tx_bytes, tx_packets, events, pad; all unsigned 64-bit.
QS_PORT_WORDS = 8
QS_MAX_PORTS = 4096
IFNAMSIZ = 16
#: The netlink reader's cost per tick, fitted to ``bench/bench_sampler.py`` here (2-core VM,
#: 2026-12-03): 165 us on 40 shaped ports, 1.42 ms on 640, so a fixed part plus a part per port.
NL_FIXED_US = 81.0
NL_PER_PORT_US = 2.1
#: ``auto`` reads by netlink while that costs at most this share of one core.
AUTO_NETLINK_MAX_CORE = 0.10


def netlink_cpu_estimate(ports: int, hz: float) -> float:
    """The netlink reader's estimated CPU, as a share of one core, for ``ports`` ports at ``hz``
    (:data:`NL_FIXED_US`, :data:`NL_PER_PORT_US`): 0.033 for 40 ports at 200 Hz, 0.29 for 640."""
    return hz * (NL_FIXED_US + NL_PER_PORT_US * ports) * 1e-6


class QdiscStatsReader:
    """Dumps root-qdisc counters of chosen interfaces in one netlink round trip.

    Args:
        ifindexes: mapping ifindex -> interface name, all in this process's
            network namespace.

    :meth:`read` returns ``{ifname: (backlog_bytes, backlog_packets,
    drops_total, tx_bytes_total, tx_packets_total)}``; interfaces without a
    root qdisc are absent. With ``handle`` the counters are those of each
    interface's qdisc with that handle instead of its root. Raises OSError on a
    netlink error.
    """

    method = "netlink"

    def __init__(self, ifindexes: dict[int, str], handle: int | None = None):
        self.ifindexes = dict(ifindexes)
        self.handle = handle
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 2**20)
        self.sock.bind((0, 0))
        self.buf = bytearray(256 * 1024)
        self.seq = 0

    def close(self) -> None:
        """Close the netlink socket."""
        self.sock.close()

    def read(self) -> dict[str, tuple[int, int, int, int, int]]:
        """One dump: counters of every watched interface's root qdisc."""
        self.seq += 1
        req = _NLH.pack(_NLH.size + _TCM.size, RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0) \
            + _TCM.pack(0, 0, 0, 0, 0)
        self.sock.send(req)
        return self._collect()

    def _collect(self):
        out: dict = {}
        while True:
            n = self.sock.recv_into(self.buf)
            if parse_qdisc_dump(memoryview(self.buf)[:n], self.seq, self.ifindexes, out, self.handle):
                return out

    def read_raw(self) -> dict[str, tuple[int, int, int, int, int]]:
        """One tick's record for :meth:`decode`: here the decoded dump itself (:meth:`read`)."""
        return self.read()

    @staticmethod
    def decode(raw: dict) -> dict[str, tuple[int, int, int, int, int]]:
        """A tick's record from :meth:`read_raw` as :meth:`read` returns it (here: unchanged)."""
        return raw


class BpfQueueReader:
    """Root-qdisc counters of the named ports from the sampler's BPF program: one copy of a
    memory-mapped array per tick, whatever the number of ports.

    Args:
        names: the ports to watch (at most 4096), in this process's network namespace; each port
            counts from its first enqueue or dequeue after the program is attached.
        seed: ``{name: counters}`` as :meth:`QdiscStatsReader.read` gives them, read after this
            reader was constructed and before :meth:`read_raw` is first used (:meth:`seed_from`):
            what a port shows until its first event. A port's counters change only at those
            events (``controller/bpf/qsample.bpf.c`` says why), so this is exact.

    :meth:`read_raw` returns an ``(n_ports, 6)`` uint64 array (backlog_bytes, backlog_packets,
    drops, tx_bytes, tx_packets, events); :meth:`decode` turns it into ``{ifname: (backlog_bytes,
    backlog_packets, drops_total, tx_bytes_total, tx_packets_total)}`` as
    :meth:`QdiscStatsReader.read` does.

    Raises:
        SetupError: the object is not built, the kernel refused it (no BTF, no qdisc_enqueue
            tracepoint), a map refused an entry, or the array could not be mapped.
        ValueError: more than 4096 names, or a name longer than 15 bytes.
    """

    method = "bpf"
    #: Attempts at copying an entry the kernel was writing at that instant.
    TORN_RETRIES = 8

    def __init__(self, names: list[str], path: Path = QS_OBJECT):
        if len(names) > QS_MAX_PORTS:
            raise ValueError(f"{len(names)} ports; the sampler's BPF array holds {QS_MAX_PORTS}")
        self.names = list(names)
        self.seed = np.zeros((len(names), 6), dtype=np.uint64)
        lib = Libbpf("BPF queue sampler")
        obj, links, fds = lib.load_and_attach(path, ("fl_qs_enq", "fl_qs_deq"),
                                              {"fl_qs_slot": 4, "fl_qs_port": 8 * QS_PORT_WORDS})
        self.prog = AttachedProgram(lib, obj, links)
        try:
            for slot, name in enumerate(self.names):
                raw = name.encode()
                if not raw or len(raw) >= IFNAMSIZ:
                    raise ValueError(f"interface name {name!r} is not 1..15 bytes")
                k = ctypes.create_string_buffer(raw.ljust(IFNAMSIZ, b"\0"), IFNAMSIZ)
                v = ctypes.c_uint32(slot)
                lib.check(lib.lib.bpf_map_update_elem(fds["fl_qs_slot"], k, ctypes.byref(v), BPF_ANY),
                          f"watch {name}")
            size = QS_MAX_PORTS * 8 * QS_PORT_WORDS
            size = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
            try:
                self.mm = mmap.mmap(fds["fl_qs_port"], size, mmap.MAP_SHARED, mmap.PROT_READ)
            except OSError as e:
                raise SetupError(f"BPF queue sampler: cannot map the port array ({e})") from None
            self.view = np.frombuffer(self.mm, dtype=np.uint64, count=len(self.names) * QS_PORT_WORDS
                                      ).reshape(len(self.names), QS_PORT_WORDS)
        except BaseException:
            self.prog.close()
            raise
        self.torn_rereads = 0

    def seed_from(self, counters: dict[str, tuple[int, int, int, int, int]]) -> None:
        """Set what each port shows until its first event (``counters`` as
        :meth:`QdiscStatsReader.read` gives them; ports absent stay zero)."""
        for i, name in enumerate(self.names):
            if name in counters:
                self.seed[i, :5] = counters[name]

    def read_raw(self) -> np.ndarray:
        """One tick: a copy of every watched port's entry, ``(n_ports, 6)`` uint64."""
        snap = self.view.copy()
        torn = np.flatnonzero(snap[:, 0] & 1)
        for _ in range(self.TORN_RETRIES):
            if not torn.size:
                break
            self.torn_rereads += int(torn.size)
            snap[torn] = self.view[torn]
            torn = torn[snap[torn, 0] & 1 == 1]
        return snap[:, 1:7]

    def decode(self, raw: np.ndarray) -> dict[str, tuple[int, int, int, int, int]]:
        """A tick from :meth:`read_raw` as ``{ifname: (backlog_bytes, backlog_packets, drops_total,
        tx_bytes_total, tx_packets_total)}``; a port without an event yet shows its seed."""
        vals = np.where((raw[:, 5] == 0)[:, None], self.seed, raw)[:, :5].tolist()
        return {name: tuple(v) for name, v in zip(self.names, vals)}

    def read(self) -> dict[str, tuple[int, int, int, int, int]]:
        """:meth:`decode` of :meth:`read_raw`."""
        return self.decode(self.read_raw())

    def close(self) -> None:
        """Unmap the array, detach and unload the program (idempotent)."""
        if getattr(self, "view", None) is not None:
            self.view = None
            self.mm.close()
        self.prog.close()


def open_reader(names: list[str], method: str = "auto", hz: float = 200.0):
    """The sampler's reader for ``names`` (this namespace's interfaces): ``bpf``
    (:class:`BpfQueueReader`), ``netlink`` (:class:`QdiscStatsReader`) or ``auto`` (netlink while
    :func:`netlink_cpu_estimate` at ``hz`` is within :data:`AUTO_NETLINK_MAX_CORE`, else bpf,
    else netlink). Returns ``(reader, why)``, ``why`` a sentence saying why this reader (None
    when the method was asked for and used).

    Raises:
        SetupError: ``bpf`` asked for and not possible; a netlink socket refused.
        ValueError: an unknown method.
    """
    if method not in ("auto", "bpf", "netlink"):
        raise ValueError(f"unknown sampler method {method!r}")
    idx = ifindexes_for(names)
    why = None
    if method == "auto":
        est = netlink_cpu_estimate(len(idx), hz)
        if est <= AUTO_NETLINK_MAX_CORE:
            return QdiscStatsReader(idx), (f"auto: {len(idx)} ports, netlink estimated at {100 * est:.1f}% of a core "
                                           f"at {hz:g} Hz (at most {100 * AUTO_NETLINK_MAX_CORE:.0f}%), no BPF "
                                           "program in the forwarding path")
        why = f"auto: {len(idx)} ports, netlink estimated at {100 * est:.1f}% of a core at {hz:g} Hz"
    if method in ("auto", "bpf"):
        try:
            reader = BpfQueueReader([n for n in names if n in idx.values()])
        except (SetupError, ValueError) as e:
            if method == "bpf":
                raise
            why = f"{why}; the BPF reader failed: {e}"
        else:
            nl = QdiscStatsReader(idx)
            try:
                reader.seed_from(nl.read())
            finally:
                nl.close()
            return reader, why
    return QdiscStatsReader(idx), why


def parse_qdisc_dump(mv, seq: int, watched: dict[int, str], out: dict, handle: int | None = None) -> bool:
    """Parse one netlink datagram of an RTM_GETQDISC dump.

    Adds ``{ifname: (backlog_bytes, backlog_packets, drops_total,
    tx_bytes_total, tx_packets_total)}`` for root qdiscs of ``watched``
    interfaces to ``out`` (or, with ``handle``, for their qdiscs of that handle,
    e.g. a PFC pause gate). Returns True when the dump's NLMSG_DONE was seen.
    Raises OSError on an NLMSG_ERROR or a malformed message.
    """
    off, n = 0, len(mv)
    while off + 16 <= n:
        msg_len, msg_type, _flags, mseq, _pid = _NLH.unpack_from(mv, off)
        if msg_len < 16:
            raise OSError("malformed netlink message")
        if msg_type == NLMSG_DONE:
            return True
        if msg_type == NLMSG_ERROR:
            (err,) = struct.unpack_from("=i", mv, off + 16)
            if err:
                raise OSError(-err, os.strerror(-err))
        elif msg_type == RTM_NEWQDISC and mseq == seq:
            _fam, ifindex, qhandle, parent, _info = _TCM.unpack_from(mv, off + 16)
            if (qhandle == handle if handle is not None else parent == TC_H_ROOT) and ifindex in watched:
                a = off + 16 + _TCM.size
                end = off + msg_len
                while a + 4 <= end:
                    alen, atype = _RTA.unpack_from(mv, a)
                    if alen < 4:
                        break
                    if atype == TCA_STATS:
                        (tx_bytes, tx_pkts, drops, _ovl, _bps, _pps, qlen,
                         backlog) = _TC_STATS.unpack_from(mv, a + 4)
                        out[watched[ifindex]] = (backlog, qlen, drops, tx_bytes, tx_pkts)
                        break
                    a += (alen + 3) & ~3
        off += (msg_len + 3) & ~3
    return False


def ifindexes_for(names: list[str]) -> dict[int, str]:
    """Map the named interfaces of this namespace to their ifindex; missing names are skipped."""
    out = {}
    for name in names:
        try:
            out[socket.if_nametoindex(name)] = name
        except OSError:
            pass
    return out


def sample_loop(reader, hz: float, stop, duration_s: float | None = None):
    """Sample ``reader`` (:class:`QdiscStatsReader` or :class:`BpfQueueReader`) at ``hz`` until
    ``stop()`` is true or ``duration_s`` passes.

    Ticks are scheduled on the monotonic clock; a late tick is not made up
    with a burst (the schedule restarts from now). Returns a list of
    ``(t_unix_s, record)``, each record as the reader's ``read_raw`` gives it (decode with its
    ``decode``: the loop itself decodes nothing).
    """
    period = 1.0 / hz
    samples = []
    t0 = time.monotonic()
    nxt = t0
    while not stop():
        now = time.monotonic()
        if duration_s is not None and now - t0 >= duration_s:
            break
        if nxt > now:
            time.sleep(nxt - now)
        samples.append((time.time(), reader.read_raw()))
        nxt += period
        now = time.monotonic()
        if now - nxt > period:
            nxt = now
    return samples


def write_samples(samples, path: str, decode=None) -> int:
    """Write samples in long form (one row per interface per tick); returns rows written.
    ``samples``: ``(t_unix_s, record)`` pairs, each record ``{intf: counters}`` or, with
    ``decode``, turned into that by it (a reader's ``decode``)."""
    rows = 0
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for t, per in samples:
            if decode is not None:
                per = decode(per)
            ts = f"{t:.6f}"
            for intf, c in per.items():
                w.writerow((ts, intf) + c)
                rows += 1
    return rows


def main(argv=None) -> int:
    """CLI: ``python -m controller.qstats --intfs a,b --hz 200 --out q.csv --meta m.json
    [--method auto|bpf|netlink]``.

    Samples until SIGTERM/SIGINT (or ``--duration-s``), then writes the CSV
    and a JSON ``{"ticks", "achieved_hz", "target_hz", "duration_s",
    "cpu_s", "cpu_fraction_of_one_core", "interfaces", "method", "method_reason"}``
    (CPU while sampling, not while writing). Prints ``READY`` once the first read succeeded.
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--intfs", required=True, help="comma-separated interface names")
    ap.add_argument("--hz", type=float, default=200.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--meta", required=True)
    ap.add_argument("--duration-s", type=float, default=None)
    ap.add_argument("--method", choices=("auto", "bpf", "netlink"), default="auto",
                    help="bpf: the BPF program's mapped array; netlink: one qdisc dump per tick; "
                         "auto (default): netlink while it costs at most 10%% of a core, else bpf")
    args = ap.parse_args(argv)
    names = [n for n in args.intfs.split(",") if n]
    idx = ifindexes_for(names)
    missing = sorted(set(names) - set(idx.values()))
    if missing:
        print(f"qstats: interfaces not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        reader, why = open_reader(names, args.method, args.hz)
    except (SetupError, ValueError) as e:
        print(f"qstats: {e}", file=sys.stderr)
        return 2
    reader.read_raw()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))
    print("READY", flush=True)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    w0 = time.monotonic()
    samples = sample_loop(reader, args.hz, lambda: bool(stopping), args.duration_s)
    wall = time.monotonic() - w0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    write_samples(samples, args.out, reader.decode)
    reader.close()
    meta = {"ticks": len(samples), "target_hz": args.hz, "duration_s": wall,
            "achieved_hz": len(samples) / wall if wall > 0 else 0.0,
            "cpu_s": cpu_s, "cpu_fraction_of_one_core": cpu_s / wall if wall > 0 else 0.0,
            "interfaces": len(idx), "method": reader.method, "method_reason": why}
    with open(args.meta, "w") as f:
        json.dump(meta, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
