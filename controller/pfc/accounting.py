"""PFC buffer accounting in the kernel: loads ``controller/bpf/pfc.bpf.c``
(compiled by ``make setup`` to ``build/pfc.bpf.o``), attaches its classifiers
to ports and its programs to the ``qdisc:qdisc_enqueue``/``qdisc_dequeue``
tracepoints, configures its maps and delivers its XOFF/XON events.

Buffer-accounting model (the C source's header says how): every byte held in
a switch's egress queues is counted against the (ingress port, priority) it
arrived on; XOFF/XON are crossed per (switch, ingress port, priority).

Nothing is pinned: the tracepoint links and the ring buffer live in the
loading process (the controller); the tc filters hold the program until the
fabric's interfaces are deleted. A crashed controller therefore leaves
nothing behind but filters on interfaces that the run's clean-up deletes.
"""
from __future__ import annotations

import ctypes
import os
import struct
import threading
from pathlib import Path
from typing import Callable

from common.errors import SetupError
from controller.dataplane import bpfhook
from controller.libbpf import BPF_ANY, RING_BUFFER_SAMPLE_FN, Libbpf

REPO = Path(__file__).resolve().parents[2]
OBJECT = REPO / "build" / "pfc.bpf.o"
WHO = "BPF PFC accounting"
#: tc filter names and preferences: the PFC classifier runs before the ECN marker (which ends the chain).
FILTER_NAME = "fabriclab_pfc"
EGRESS_PREF = 10
INGRESS_PREF = 10

#: struct fl_pfc_port: sw, port, is_switch
PORT = struct.Struct("=III")
#: struct fl_pfc_occ_key: sw, port (u16), prio (u16)
OCC_KEY = struct.Struct("=IHH")
#: struct fl_pfc_occ: paused, bytes (signed), max_bytes, packets, xoff_events, underflows, drops, storm_drops
OCC = struct.Struct("=QqQQQQQQ")
OCC_FIELDS = ("paused", "bytes", "max_bytes", "packets", "xoff_events", "underflows", "drops", "storm_drops")
#: struct fl_pfc_ctl (written only here, whole values): xoff_bytes, xon_bytes, cap_bytes, corr_bytes, storm_drop
CTL = struct.Struct("=QQQqQ")
CTL_FIELDS = ("xoff_bytes", "xon_bytes", "cap_bytes", "corrected_bytes", "storm_drop")
#: struct fl_pfc_event: t_ns, bytes (signed), sw, port (u16), prio (u8), kind (u8)
EVENT = struct.Struct("=QqIHBB")
EV_XOFF, EV_XON = 1, 2
EVENT_KINDS = {EV_XOFF: "xoff", EV_XON: "xon"}
MAX_SWITCHES = 4095
MAX_PORTS = 255

PROGRAMS = ("fl_pfc_in", "fl_pfc_out", "fl_pfc_host", "fl_pfc_enq", "fl_pfc_deq")
MAPS = ("fl_pfc_port", "fl_pfc_dscp", "fl_pfc_flow", "fl_pfc_occ", "fl_pfc_ctl", "fl_pfc_events")


class PfcBpf:
    """The loaded PFC accounting program (see the module docstring).

    Use :meth:`load`; every method raises SetupError with libbpf's or the kernel's reason.
    """

    def __init__(self, lib: Libbpf, obj, progs: dict, maps: dict):
        self.lib, self.obj, self.progs, self.maps = lib, obj, progs, maps
        self.links: list = []
        self._ctl_lock = threading.Lock()
        self._ctl_cache: dict[bytes, dict] = {}
        self._rb = None
        self._rb_cb = None

    @classmethod
    def load(cls, path: Path = OBJECT) -> "PfcBpf":
        """Open and load ``build/pfc.bpf.o`` and attach its two tracepoint programs."""
        if not Path(path).exists():
            raise SetupError(f"{WHO}: {path} is not built (run 'sudo make setup'; needs clang, libbpf-dev)")
        lib = Libbpf(WHO)
        obj = lib.lib.bpf_object__open_file(str(path).encode(), None)
        if not obj:
            raise SetupError(f"{WHO}: cannot open {path}: {os.strerror(ctypes.get_errno())}")
        lib.check(lib.lib.bpf_object__load(obj), f"the kernel refused to load {Path(path).name}")
        progs, maps = {}, {}
        for name in PROGRAMS:
            p = lib.lib.bpf_object__find_program_by_name(obj, name.encode())
            if not p:
                raise SetupError(f"{WHO}: no program {name} in {path}")
            progs[name] = p
        for name in MAPS:
            maps[name] = lib.check(lib.lib.bpf_object__find_map_fd_by_name(obj, name.encode()), f"map {name}")
        sizes = {n: lib.map_value_size(maps[n]) for n in ("fl_pfc_port", "fl_pfc_occ", "fl_pfc_ctl")}
        want = {"fl_pfc_port": PORT.size, "fl_pfc_occ": OCC.size, "fl_pfc_ctl": CTL.size}
        if sizes != want:
            raise SetupError(f"{WHO}: {Path(path).name} has map values {sizes}, this loader expects {want}: "
                             "rebuild it (make bpf)")
        self = cls(lib, obj, progs, maps)
        try:
            for name in ("fl_pfc_enq", "fl_pfc_deq"):
                link = lib.lib.bpf_program__attach(progs[name])
                if not link or lib.lib.libbpf_get_error(link):
                    raise SetupError(f"{WHO}: cannot attach {name} to its tracepoint: "
                                     f"{os.strerror(ctypes.get_errno() or 22)}")
                self.links.append(link)
        except BaseException:
            self.close()
            raise
        return self

    def prog_fd(self, name: str) -> int:
        """The fd of program ``name`` (one of :data:`PROGRAMS`)."""
        return self.lib.check(self.lib.lib.bpf_program__fd(self.progs[name]), f"fd of {name}")

    def ids(self) -> dict:
        """Kernel ids of the programs and the occupancy map, for the run's record."""
        out = {f"{n}_id": self.lib.obj_id(self.prog_fd(n)) for n in PROGRAMS}
        out["occ_map_id"] = self.lib.obj_id(self.maps["fl_pfc_occ"])
        return out

    # -- configuration ---------------------------------------------------------
    def _update(self, map_name: str, key: bytes, value: bytes, what: str) -> None:
        k = ctypes.create_string_buffer(key, len(key))
        v = ctypes.create_string_buffer(value, len(value))
        self.lib.check(self.lib.lib.bpf_map_update_elem(self.maps[map_name], k, v, BPF_ANY), what)

    def set_dscp_map(self, dscp_map: dict, default_prio: int) -> None:
        """Every DSCP 0..63 -> its priority (``dscp_map``, else ``default_prio``); non-IPv4 -> ``default_prio``."""
        for dscp in range(65):
            self._update("fl_pfc_dscp", struct.pack("=I", dscp), struct.pack("=I", dscp_map.get(dscp, default_prio)),
                         f"DSCP {dscp}")

    def set_port(self, ifindex: int, sw: int, port: int, is_switch: bool) -> None:
        """Describe interface ``ifindex`` (root namespace for switch ports) to the classifier.

        Raises:
            ValueError: switch id outside 1..4095 or port index outside 0..255 (they share the skb mark).
        """
        if not 1 <= sw <= MAX_SWITCHES or not 0 <= port <= MAX_PORTS:
            raise ValueError(f"switch id {sw} (1..{MAX_SWITCHES}) or port index {port} (0..{MAX_PORTS}) out of range")
        self._update("fl_pfc_port", struct.pack("=I", ifindex), PORT.pack(sw, port, int(is_switch)),
                     f"port ifindex {ifindex}")

    def set_thresholds(self, sw: int, port: int, prio: int, xoff_bytes: int, xon_bytes: int,
                       cap_bytes: int = 0) -> None:
        """Start counting (switch ``sw``, ingress ``port``, ``prio``) from zero with these limits
        (see :meth:`set_limits`), no correction and no storm."""
        key = OCC_KEY.pack(sw, port, prio)
        with self._ctl_lock:
            self._update("fl_pfc_ctl", key, CTL.pack(xoff_bytes, xon_bytes, cap_bytes, 0, 0),
                         f"settings of switch {sw} port {port} priority {prio}")
            self._ctl_cache[key] = dict(zip(CTL_FIELDS, (xoff_bytes, xon_bytes, cap_bytes, 0, 0)))
            self._update("fl_pfc_occ", key, OCC.pack(0, 0, 0, 0, 0, 0, 0, 0),
                         f"counter of switch {sw} port {port} priority {prio}")

    def _ctl(self, key: bytes) -> dict | None:
        """A counter's settings: userspace is their only writer, so the copy kept at each write
        serves reads (one syscall less per :meth:`read`); the map for a key not written here."""
        cached = self._ctl_cache.get(key)
        if cached is not None:
            return dict(cached)
        k = ctypes.create_string_buffer(key, OCC_KEY.size)
        v = ctypes.create_string_buffer(CTL.size)
        if self.lib.lib.bpf_map_lookup_elem(self.maps["fl_pfc_ctl"], k, v) < 0:
            return None
        return dict(zip(CTL_FIELDS, CTL.unpack(v.raw)))

    def _set_ctl(self, sw: int, port: int, prio: int, **fields) -> None:
        """Replace some of a counter's settings (read-modify-write under a lock: the pauser, the
        reconciler and requests write from different threads; the kernel only reads)."""
        key = OCC_KEY.pack(sw, port, prio)
        with self._ctl_lock:
            ctl = self._ctl(key)
            if ctl is None:
                raise SetupError(f"{WHO}: no counter for switch {sw} port {port} priority {prio}")
            ctl.update(fields)
            self._update("fl_pfc_ctl", key, CTL.pack(*(ctl[f] for f in CTL_FIELDS)),
                         f"settings of switch {sw} port {port} priority {prio}")
            self._ctl_cache[key] = ctl

    def set_limits(self, sw: int, port: int, prio: int, xoff_bytes: int, xon_bytes: int, cap_bytes: int = 0) -> None:
        """Change a counter's limits now, keeping its count: pause at ``xoff_bytes`` (0: never),
        resume at ``xon_bytes``, drop frames that would take it above ``cap_bytes`` (0: no cap)."""
        self._set_ctl(sw, port, prio, xoff_bytes=xoff_bytes, xon_bytes=xon_bytes, cap_bytes=cap_bytes)

    def set_storm_drop(self, sw: int, port: int, prio: int, on: bool) -> None:
        """While ``on``, frames of (``sw``, ingress ``port``, ``prio``) are dropped (PFC watchdog, action drop)."""
        self._set_ctl(sw, port, prio, storm_drop=int(on))

    def read(self, sw: int, port: int, prio: int) -> dict | None:
        """The counter of (``sw``, ``port``, ``prio``): :data:`OCC_FIELDS` and its settings
        (:data:`CTL_FIELDS`); ``bytes`` is held now, after :meth:`reconcile`'s corrections
        (``corrected_bytes``: their total). None if absent."""
        key = OCC_KEY.pack(sw, port, prio)
        k = ctypes.create_string_buffer(key, OCC_KEY.size)
        v = ctypes.create_string_buffer(OCC.size)
        if self.lib.lib.bpf_map_lookup_elem(self.maps["fl_pfc_occ"], k, v) < 0:
            return None
        d = dict(zip(OCC_FIELDS, OCC.unpack(v.raw)))
        d.update(self._ctl(key) or dict.fromkeys(CTL_FIELDS, 0))
        d["bytes"] -= d["corrected_bytes"]
        return d

    def reconcile(self, sw: int, prio: int, ports: list[int], queues_empty: Callable[[], bool]) -> int:
        """Zero the counters of (``sw``, each of ``ports``, ``prio``) when ``queues_empty()`` says every
        egress queue of that priority on the switch is empty, and nothing moved while it looked;
        returns the bytes corrected (0 when it did nothing).

        Why: on kernel 6.18 a few packets per thousand leave a root qdisc without a dequeue event
        the program sees (see the C source); their bytes would stay counted and, over a long run,
        hold a pause that nothing releases. An empty switch holds nothing: its counters must be 0.
        Userspace is the only writer of the settings map, so no update races the kernel's atomics.
        """
        before = [self.read(sw, p, prio) for p in ports]
        if all(b is None or b["bytes"] == 0 for b in before) or not queues_empty():
            return 0
        after = [self.read(sw, p, prio) for p in ports]
        if any((a or {}).get("packets") != (b or {}).get("packets") or (a or {}).get("bytes") != (b or {}).get("bytes")
               for a, b in zip(after, before)):
            return 0    # something arrived or left while we looked: try again later
        total = 0
        for p, a in zip(ports, after):
            if a is not None and a["bytes"]:
                self._set_ctl(sw, p, prio, corrected_bytes=a["corrected_bytes"] + a["bytes"])
                total += a["bytes"]
        return total

    # -- attachment ------------------------------------------------------------
    def attach(self, ifname: str, netns_pid: int | None = None, switch_port: bool = True, ipr=None) -> None:
        """Attach the classifiers to ``ifname``: a switch port gets the ingress recorder and the
        accounting egress classifier, a host NIC (``switch_port`` False) the class-only one
        (``ipr``: an open ``IPRoute`` on the port's namespace, else one is opened per classifier)."""
        bpfhook.attach_bpf_classifier(ifname, self.prog_fd("fl_pfc_out" if switch_port else "fl_pfc_host"),
                                        FILTER_NAME, EGRESS_PREF, netns_pid=netns_pid, ipr=ipr)
        if switch_port:
            bpfhook.attach_bpf_classifier(ifname, self.prog_fd("fl_pfc_in"), FILTER_NAME, INGRESS_PREF,
                                            ingress=True, netns_pid=netns_pid, ipr=ipr)

    # -- events ----------------------------------------------------------------
    def on_events(self, callback: Callable[[dict], None]) -> None:
        """Deliver each XOFF/XON event to ``callback({"t_ns", "bytes", "sw", "port", "prio", "kind"})``
        from :meth:`poll` (``t_ns`` on CLOCK_MONOTONIC, as ``time.monotonic_ns()``)."""
        def sample(_ctx, data, size):
            if size >= EVENT.size:
                t_ns, nbytes, sw, port, prio, kind = EVENT.unpack(ctypes.string_at(data, EVENT.size))
                callback({"t_ns": t_ns, "bytes": nbytes, "sw": sw, "port": port, "prio": prio,
                          "kind": EVENT_KINDS.get(kind, str(kind))})
            return 0
        self._rb_cb = RING_BUFFER_SAMPLE_FN(sample)
        rb = self.lib.lib.ring_buffer__new(self.maps["fl_pfc_events"], self._rb_cb, None, None)
        if not rb:
            raise SetupError(f"{WHO}: cannot open the event ring buffer: {os.strerror(ctypes.get_errno())}")
        self._rb = rb

    def poll(self, timeout_ms: int) -> int:
        """Wait up to ``timeout_ms`` for events and deliver them; returns how many."""
        if self._rb is None:
            raise SetupError(f"{WHO}: poll before on_events")
        return self.lib.check(self.lib.lib.ring_buffer__poll(self._rb, timeout_ms), "poll the event ring buffer")

    def close(self) -> None:
        """Detach the tracepoints, free the ring buffer, close the object (tc filters stay with their ports)."""
        if self._rb is not None:
            self.lib.lib.ring_buffer__free(self._rb)
            self._rb = None
        for link in self.links:
            self.lib.lib.bpf_link__destroy(link)
        self.links = []
        if self.obj:
            self.lib.lib.bpf_object__close(self.obj)
            self.obj = None
