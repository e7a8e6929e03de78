"""The per-packet ECN marker for kernels without sch_red: loads
``controller/bpf/ecn_marker.bpf.c`` (compiled by ``make setup`` to
``build/ecn_marker.bpf.o``) with libbpf, attaches it as a tc clsact egress
classifier (direct-action) on switch ports, and reads and writes its maps.

libbpf (the kernel's own BPF loader library, ``libbpf1`` on Debian/Ubuntu;
iproute2 depends on it) is called through ctypes; tc attachment goes through
pyroute2. Nothing is pinned in bpffs: the program and its maps live as long as
a port's filter or an open file descriptor holds them, so deleting the
fabric's interfaces frees them (nothing to clean up after a crash). Another
process (the runner) reaches the same maps by id (:meth:`BpfEcnMarker.open_ids`).

Map layout (keyed by ifindex, see the C source): ``fl_ecn_cfg`` holds
:func:`encode_cfg` values, ``fl_ecn_st`` the virtual queue and counters
decoded by :func:`decode_st`.
"""
from __future__ import annotations

import ctypes
import os
import struct
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from common.errors import SetupError
from controller.dataplane import bpfhook
from controller.ecn.policy import EcnProfile
from controller.libbpf import BPF_ANY, BPF_F_LOCK, Libbpf

REPO = Path(__file__).resolve().parents[2]
OBJECT = REPO / "build" / "ecn_marker.bpf.o"
PROG_NAME = b"fl_ecn_mark"
#: The filter's name as ``tc filter show`` lists it.
FILTER_NAME = "fabriclab_ecn"
#: Its tc preference: after the PFC classifier (controller.pfc.accounting.EGRESS_PREF), since the marker ends the chain.
FILTER_PREF = 100

KINDS = {"off": 0, "step": 1, "red": 2}
#: struct fl_ecn_cfg: kind, weight_q16, rate_bytes_per_s, buffer_bytes, full_drain_ns,
#: k_bytes, kmin_bytes, kmax_bytes, pmax_q32, burst_nb.
CFG = struct.Struct("=IIQQQQQQQQ")
#: struct fl_ecn_st: spin lock, pad, then eleven u64 (96 bytes).
ST = struct.Struct("=II11Q")
ST_FIELDS = ("backlog_nb", "avg_q16", "t_last_ns", "packets", "ect", "not_ect", "ce_in", "marked",
             "vq_drops", "max_backlog_bytes", "credit_nb")


def encode_cfg(profile: EcnProfile, rate_bps: float, buffer_bytes: int, burst_bytes: int) -> bytes:
    """The ``fl_ecn_cfg`` value for one port.

    Args:
        profile: the port's profile (``off`` counts packets and never marks).
        rate_bps: the port's shaping rate in bit/s (> 0).
        buffer_bytes: the FIFO's limit in bytes (> 0).
        burst_bytes: the shaper's (HTB's) burst in bytes (>= 0).

    Raises:
        ValueError: non-positive rate or buffer, unknown kind.
    """
    if rate_bps <= 0 or buffer_bytes <= 0:
        raise ValueError(f"rate_bps and buffer_bytes must be positive, got {rate_bps}, {buffer_bytes}")
    rate_Bps = int(rate_bps // 8)
    full_drain_ns = int(buffer_bytes * 1e9 // rate_Bps) + 1
    weight_q16 = int(round(profile.weight * 65536)) if profile.weight else 0
    pmax_q32 = int(round(profile.pmax * 2**32)) if profile.pmax else 0
    return CFG.pack(KINDS[profile.kind], weight_q16, rate_Bps, int(buffer_bytes), full_drain_ns,
                    profile.k_bytes or 0, profile.kmin_bytes or 0, profile.kmax_bytes or 0, pmax_q32,
                    int(burst_bytes) * 10**9)


def decode_st(raw: bytes) -> dict:
    """A ``fl_ecn_st`` value as counters: packets, ect, not_ect, ce_in, marked, vq_drops,
    max_backlog_bytes, backlog_bytes (the virtual queue now)."""
    vals = ST.unpack(raw)[2:]
    d = dict(zip(ST_FIELDS, vals))
    d["backlog_bytes"] = d.pop("backlog_nb") // 10**9
    for k in ("avg_q16", "t_last_ns", "credit_nb"):
        d.pop(k)
    return d


class BpfEcnMarker:
    """The loaded marker program and its two maps.

    Use :meth:`load` (the controller: loads the object file) or
    :meth:`open_ids` (another process: reopens the maps by id). Raises
    SetupError with libbpf's or the kernel's reason on any failure.
    """

    def __init__(self, lib: Libbpf, cfg_fd: int, st_fd: int, prog_fd: int | None = None, obj=None):
        self.lib, self.cfg_fd, self.st_fd, self.prog_fd, self.obj = lib, cfg_fd, st_fd, prog_fd, obj

    @classmethod
    def load(cls, path: Path = OBJECT) -> "BpfEcnMarker":
        """Open and load the compiled marker (``build/ecn_marker.bpf.o``)."""
        if not Path(path).exists():
            raise SetupError(f"BPF ECN marker {path} is not built (run 'sudo make setup'; needs clang, libbpf-dev)")
        lib = Libbpf("BPF ECN marker")
        obj = lib.lib.bpf_object__open_file(str(path).encode(), None)
        if not obj:
            raise SetupError(f"BPF ECN marker: cannot open {path}: {os.strerror(ctypes.get_errno())}")
        lib.check(lib.lib.bpf_object__load(obj), f"the kernel refused to load {path.name}")
        prog = lib.lib.bpf_object__find_program_by_name(obj, PROG_NAME)
        if not prog:
            raise SetupError(f"BPF ECN marker: no program {PROG_NAME.decode()} in {path}")
        prog_fd = lib.check(lib.lib.bpf_program__fd(prog), "program fd")
        cfg_fd = lib.check(lib.lib.bpf_object__find_map_fd_by_name(obj, b"fl_ecn_cfg"), "map fl_ecn_cfg")
        st_fd = lib.check(lib.lib.bpf_object__find_map_fd_by_name(obj, b"fl_ecn_st"), "map fl_ecn_st")
        sizes = (lib.map_value_size(cfg_fd), lib.map_value_size(st_fd))
        if sizes != (CFG.size, ST.size):
            raise SetupError(f"BPF ECN marker: {path.name} has map values of {sizes} bytes, this loader expects "
                             f"{(CFG.size, ST.size)}: rebuild it (make bpf)")
        return cls(lib, cfg_fd, st_fd, prog_fd, obj)

    @classmethod
    def open_ids(cls, ids: dict) -> "BpfEcnMarker":
        """Reopen the maps of a marker another process loaded, from :meth:`ids`."""
        lib = Libbpf("BPF ECN marker")
        cfg_fd = lib.check(lib.lib.bpf_map_get_fd_by_id(ids["cfg_map_id"]), "open fl_ecn_cfg by id")
        st_fd = lib.check(lib.lib.bpf_map_get_fd_by_id(ids["st_map_id"]), "open fl_ecn_st by id")
        return cls(lib, cfg_fd, st_fd)

    def ids(self) -> dict:
        """``{"prog_id", "cfg_map_id", "st_map_id"}``: kernel ids, for the record and :meth:`open_ids`."""
        out = {"cfg_map_id": self.lib.obj_id(self.cfg_fd), "st_map_id": self.lib.obj_id(self.st_fd)}
        if self.prog_fd is not None:
            out["prog_id"] = self.lib.obj_id(self.prog_fd)
        return out

    def configure(self, ifindex: int, profile: EcnProfile, rate_bps: float, buffer_bytes: int,
                  burst_bytes: int, reset: bool = False) -> None:
        """Set (atomically replace) the profile of port ``ifindex``; ``reset`` zeroes its queue and counters."""
        key = ctypes.c_uint32(ifindex)
        if reset or self.read(ifindex) is None:
            zero = ctypes.create_string_buffer(ST.size)
            self.lib.check(self.lib.lib.bpf_map_update_elem(self.st_fd, ctypes.byref(key), zero, BPF_ANY),
                           f"reset counters of ifindex {ifindex}")
        val = ctypes.create_string_buffer(encode_cfg(profile, rate_bps, buffer_bytes, burst_bytes), CFG.size)
        self.lib.check(self.lib.lib.bpf_map_update_elem(self.cfg_fd, ctypes.byref(key), val, BPF_ANY),
                       f"configure ifindex {ifindex}")

    def read(self, ifindex: int) -> dict | None:
        """Counters of port ``ifindex`` (see :func:`decode_st`), read under the map's lock; None if absent."""
        key = ctypes.c_uint32(ifindex)
        buf = ctypes.create_string_buffer(ST.size)
        rc = self.lib.lib.bpf_map_lookup_elem_flags(self.st_fd, ctypes.byref(key), buf, BPF_F_LOCK)
        if rc < 0:
            return None
        return decode_st(buf.raw)

    def attach(self, ifname: str) -> None:
        """Attach the program to ``ifname``'s egress (root namespace), adding a clsact qdisc if needed."""
        if self.prog_fd is None:
            raise SetupError("BPF ECN marker: attach needs the loading process")
        bpfhook.attach_bpf_classifier(ifname, self.prog_fd, FILTER_NAME, FILTER_PREF)

    def detach(self, ifname: str) -> None:
        """Remove the marker from ``ifname`` (deletes its clsact qdisc, with every filter on it)."""
        try:
            with IPRoute() as ipr:
                idx = ipr.link_lookup(ifname=ifname)
                if idx:
                    ipr.tc("del", "clsact", idx[0])
        except NetlinkError as e:
            if e.code not in (2, 22):   # ENOENT / EINVAL: nothing attached
                raise SetupError(f"BPF ECN marker: cannot detach from {ifname}: {e}") from None

    def close(self) -> None:
        """Close this process's fds (attached filters keep the program and maps alive)."""
        if self.obj:
            self.lib.lib.bpf_object__close(self.obj)
            self.obj = None
        else:
            for fd in (self.cfg_fd, self.st_fd):
                os.close(fd)
