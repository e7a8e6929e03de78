"""Frames Open vSwitch's userspace datapath discards without a counter: loads
``controller/bpf/ovstx.bpf.c`` (compiled by ``make setup`` to ``build/ovstx.bpf.o``) at the exit
of sendmmsg(2) and counts, per output interface, what ovs-vswitchd asked to send, what was sent,
the batches cut short by a full queue and the frames it then freed (the C source's header says
how, from Open vSwitch's lib/netdev-linux.c).

Nothing is pinned: the fexit link lives in the loading process, so a crashed run leaves nothing
behind.
"""
from __future__ import annotations

import ctypes
import struct
from pathlib import Path

from controller.libbpf import BPF_ANY, AttachedProgram, Libbpf

REPO = Path(__file__).resolve().parent.parent
OBJECT = REPO / "build" / "ovstx.bpf.o"
WHO = "BPF Open vSwitch transmit count"
#: struct fl_ovstx_port: seven u64 counters.
FIELDS = ("calls", "messages", "sent", "retried", "refused_first", "discarded", "other_errors")
PORT = struct.Struct(f"={len(FIELDS)}Q")
U32 = struct.Struct("=I")


class OvsTxCounts(AttachedProgram):
    """The loaded program, counting one process's (ovs-vswitchd's) sendmmsg calls. Use
    :meth:`load` (or as a context manager); every method raises SetupError with libbpf's or the
    kernel's reason."""

    def __init__(self, lib: Libbpf, obj, link, fds: dict):
        super().__init__(lib, obj, link)
        self.cfg_fd, self.port_fd = fds["fl_ovstx_cfg"], fds["fl_ovstx_port"]

    @classmethod
    def load(cls, tgid: int, path: Path = OBJECT) -> "OvsTxCounts":
        """Load and attach ``build/ovstx.bpf.o``, counting the sendmmsg calls of process ``tgid``.

        Raises:
            SetupError: the object is not built, the kernel refused it (no fexit support, or no
                ``__sys_sendmmsg`` of this signature), or the attach failed.
        """
        lib = Libbpf(WHO)
        obj, link, fds = lib.load_and_attach(path, "fl_ovstx", {"fl_ovstx_cfg": U32.size,
                                                                 "fl_ovstx_port": PORT.size})
        self = cls(lib, obj, link, fds)
        try:
            k = ctypes.create_string_buffer(U32.pack(0), U32.size)
            v = ctypes.create_string_buffer(U32.pack(tgid), U32.size)
            lib.check(lib.lib.bpf_map_update_elem(self.cfg_fd, k, v, BPF_ANY), "set the counted process")
        except BaseException:
            self.close()
            raise
        return self

    def read(self) -> dict[int, dict]:
        """Counters so far per interface index: ``{ifindex: {field: count}}`` (:data:`FIELDS`)."""
        out = {}
        key = ctypes.create_string_buffer(U32.size)
        nxt = ctypes.create_string_buffer(U32.size)
        val = ctypes.create_string_buffer(PORT.size)
        prev = None
        while self.lib.lib.bpf_map_get_next_key(self.port_fd, prev, nxt) == 0:
            ctypes.memmove(key, nxt, U32.size)
            if self.lib.lib.bpf_map_lookup_elem(self.port_fd, key, val) == 0:
                out[U32.unpack(key.raw)[0]] = dict(zip(FIELDS, PORT.unpack(val.raw)))
            prev = key
        return out
