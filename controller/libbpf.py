"""The few libbpf 1.x calls fabriclab's BPF programs need, through ctypes.

libbpf is the kernel's own BPF loader library (``libbpf1`` on Debian/Ubuntu;
iproute2 depends on it); ``make setup`` installs ``libbpf-dev`` for the headers
the programs are compiled against.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from pathlib import Path

from common.errors import SetupError

BPF_ANY = 0
BPF_F_LOCK = 4

#: ring_buffer_sample_fn: int (*)(void *ctx, void *data, size_t size)
RING_BUFFER_SAMPLE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class Libbpf:
    """libbpf through ctypes; ``who`` names the program in every error (SetupError)."""

    def __init__(self, who: str):
        self.who = who
        name = ctypes.util.find_library("bpf") or "libbpf.so.1"
        try:
            self.lib = ctypes.CDLL(name, use_errno=True)
        except OSError as e:
            raise SetupError(f"{who}: libbpf is not installed ({e}); run 'sudo make setup'") from None
        L = self.lib
        vp, ip, cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
        for fname, res, args in (
                ("bpf_object__open_file", vp, [cp, vp]),
                ("bpf_object__load", ip, [vp]),
                ("bpf_object__close", None, [vp]),
                ("bpf_object__find_program_by_name", vp, [vp, cp]),
                ("bpf_program__fd", ip, [vp]),
                ("bpf_program__attach", vp, [vp]),
                ("bpf_link__destroy", ip, [vp]),
                ("libbpf_get_error", ctypes.c_long, [vp]),
                ("bpf_object__find_map_fd_by_name", ip, [vp, cp]),
                ("bpf_map_update_elem", ip, [ip, vp, vp, ctypes.c_uint64]),
                ("bpf_map_lookup_elem", ip, [ip, vp, vp]),
                ("bpf_map_lookup_elem_flags", ip, [ip, vp, vp, ctypes.c_uint64]),
                ("bpf_map_delete_elem", ip, [ip, vp]),
                ("bpf_map_get_next_key", ip, [ip, vp, vp]),
                ("bpf_map_get_fd_by_id", ip, [ctypes.c_uint32]),
                ("bpf_obj_get_info_by_fd", ip, [ip, vp, ctypes.POINTER(ctypes.c_uint32)]),
                ("ring_buffer__new", vp, [ip, RING_BUFFER_SAMPLE_FN, vp, vp]),
                ("ring_buffer__poll", ip, [vp, ip]),
                ("ring_buffer__free", None, [vp]),
                ("libbpf_set_print", vp, [vp])):
            f = getattr(L, fname)
            f.restype, f.argtypes = res, args

    def check(self, rc: int, what: str) -> int:
        """``rc`` if >= 0, else SetupError naming ``what`` and the errno."""
        if rc < 0:
            err = -rc if rc != -1 else ctypes.get_errno()
            raise SetupError(f"{self.who}: {what}: {os.strerror(err)}")
        return rc

    def _info(self, fd: int) -> bytes:
        buf = ctypes.create_string_buffer(256)
        n = ctypes.c_uint32(256)
        self.check(self.lib.bpf_obj_get_info_by_fd(fd, buf, ctypes.byref(n)), "get object info")
        return buf.raw

    def obj_id(self, fd: int) -> int:
        """The kernel id of a BPF object (program or map) from its fd (info struct: type, id)."""
        return struct.unpack_from("=II", self._info(fd))[1]

    def map_value_size(self, fd: int) -> int:
        """A map's value size in bytes (struct bpf_map_info: type, id, key_size, value_size)."""
        return struct.unpack_from("=IIII", self._info(fd))[3]

    def load_and_attach(self, path: Path, program: str | tuple[str, ...], maps: dict[str, int]) -> tuple:
        """Open and load the object ``path``, find ``program`` (or each of several) and attach it
        where its section says (a tracepoint, an fexit), and look up ``maps`` (name -> expected
        value size in bytes). Returns ``(obj, link, {name: map fd})``, ``link`` a list of links when
        ``program`` is a tuple; the caller destroys the links and closes the object.

        Raises:
            SetupError: the object is not built, the kernel refused it, a map's value size differs
                from this loader's (an object older than its loader), or the attach failed.
        """
        if not Path(path).exists():
            raise SetupError(f"{self.who}: {path} is not built (run 'sudo make setup'; needs clang, libbpf-dev)")
        obj = self.lib.bpf_object__open_file(str(path).encode(), None)
        if not obj:
            raise SetupError(f"{self.who}: cannot open {path}: {os.strerror(ctypes.get_errno())}")
        try:
            self.check(self.lib.bpf_object__load(obj), f"the kernel refused to load {Path(path).name}")
            names = program if isinstance(program, tuple) else (program,)
            progs = [self.lib.bpf_object__find_program_by_name(obj, n.encode()) for n in names]
            for n, prog in zip(names, progs):
                if not prog:
                    raise SetupError(f"{self.who}: no program {n} in {path}")
            fds = {}
            for name, size in maps.items():
                fds[name] = self.check(self.lib.bpf_object__find_map_fd_by_name(obj, name.encode()), f"map {name}")
                if self.map_value_size(fds[name]) != size:
                    raise SetupError(f"{self.who}: {Path(path).name} has a {name} value of "
                                     f"{self.map_value_size(fds[name])} bytes, this loader expects {size}: "
                                     "rebuild it (make bpf)")
            links = []
            try:
                for n, prog in zip(names, progs):
                    link = self.lib.bpf_program__attach(prog)
                    if not link or self.lib.libbpf_get_error(link):
                        raise SetupError(f"{self.who}: cannot attach {n}: {os.strerror(ctypes.get_errno() or 22)}")
                    links.append(link)
            except BaseException:
                for link in links:
                    self.lib.bpf_link__destroy(link)
                raise
            return obj, (links if isinstance(program, tuple) else links[0]), fds
        except BaseException:
            self.lib.bpf_object__close(obj)
            raise


class AttachedProgram:
    """A loaded BPF object with its attached program or programs (``link``: one link or a list, from
    :meth:`Libbpf.load_and_attach`): a context manager that detaches and unloads it on exit. Subclasses add their maps' reads."""

    def __init__(self, lib: Libbpf, obj, link):
        self.lib, self.obj, self.link = lib, obj, link

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        """Detach and unload (idempotent)."""
        if self.link:
            for link in (self.link if isinstance(self.link, list) else [self.link]):
                self.lib.lib.bpf_link__destroy(link)
            self.link = None
        if self.obj:
            self.lib.lib.bpf_object__close(self.obj)
            self.obj = None
