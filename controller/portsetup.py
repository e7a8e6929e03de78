"""Shaping a whole fabric's ports in time linear in their number: one netlink socket per network
namespace for every port in it, offloads switched off by ``SIOCETHTOOL`` on that socket (no
``ethtool`` process per port), qdiscs installed by netlink, and everything read back at the end
with one dump per namespace instead of one per port.

Why: shaping port by port with a fresh socket, one ``ethtool`` process and a read-back that dumps
every qdisc on the host made a Fat-Tree k=8 spend 32 s here (640 switch ports and 128 host NICs),
growing faster than the number of ports. ``bench/bench_fabric_up.py`` prints the phase per shape.

Errors are raised as :class:`common.errors.SetupError` with the kernel's reason, naming the
interface (cases L1, L2).
"""
from __future__ import annotations

import ctypes
import fcntl
import fnmatch
import struct
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from common.errors import SetupError
from controller.dataplane import hostknobs, netlink
from controller.dataplane.netlink import FIFO_HANDLE, HTB_CLASS, HTB_ROOT
from controller.dataplane.tcqdisc import PortQueue

SIOCETHTOOL = 0x8946
ETHTOOL_GSSET_INFO = 0x37
ETHTOOL_GSTRINGS = 0x1B
ETHTOOL_GFEATURES = 0x3A
ETHTOOL_SFEATURES = 0x3B
ETH_SS_FEATURES = 4
ETH_GSTRING_LEN = 32
IFNAMSIZ = 16
#: struct ifreq is 40 bytes on 64-bit Linux (16-byte name, 24-byte union holding ifr_data).
IFREQ_BYTES = 40

#: The kernel's feature names that ``ethtool -K IF rx off tx off tso off gso off gro off`` turns
#: off (ethtool's own table of these short names; cases T1, L5), as shell patterns.
OFFLOAD_PATTERNS = {"rx": ("rx-checksum",), "tx": ("tx-checksum-*",), "tso": ("tx-tcp*segmentation",),
                    "gso": ("tx-generic-segmentation",), "gro": ("rx-gro",)}


def _ethtool(fd: int, ifname: str, buf: ctypes.Array) -> None:
    """One ``SIOCETHTOOL`` request on socket ``fd`` for ``ifname``; ``buf`` holds the command
    and receives the answer. Raises OSError with the kernel's errno."""
    ifr = struct.pack("16sP", ifname.encode(), ctypes.addressof(buf)).ljust(IFREQ_BYTES, b"\0")
    fcntl.ioctl(fd, SIOCETHTOOL, ifr)


def feature_names(fd: int, ifname: str) -> list[str]:
    """The kernel's netdev feature names (``ETH_SS_FEATURES``), in bit order, as seen through
    interface ``ifname`` of socket ``fd``'s namespace. Raises OSError."""
    info = ctypes.create_string_buffer(struct.pack("=IIQI", ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_FEATURES, 0), 20)
    _ethtool(fd, ifname, info)
    count = struct.unpack_from("=I", info.raw, 16)[0]
    strings = ctypes.create_string_buffer(struct.pack("=III", ETHTOOL_GSTRINGS, ETH_SS_FEATURES, count)
                                          + bytes(count * ETH_GSTRING_LEN))
    _ethtool(fd, ifname, strings)
    raw = strings.raw[12:12 + count * ETH_GSTRING_LEN]
    return [raw[i:i + ETH_GSTRING_LEN].split(b"\0", 1)[0].decode() for i in range(0, len(raw), ETH_GSTRING_LEN)]


def offload_bits(names: list[str]) -> dict[str, list[int]]:
    """``{short name: [feature bit, ...]}`` of :data:`OFFLOAD_PATTERNS` among ``names`` (the
    kernel's feature names in bit order)."""
    return {short: [i for i, n in enumerate(names) if any(fnmatch.fnmatchcase(n, p) for p in pats)]
            for short, pats in OFFLOAD_PATTERNS.items()}


def active_features(fd: int, ifname: str, nbits: int) -> int:
    """The active feature bits of ``ifname`` as one integer (``ETHTOOL_GFEATURES``). Raises OSError."""
    blocks = (nbits + 31) // 32
    buf = ctypes.create_string_buffer(struct.pack("=II", ETHTOOL_GFEATURES, blocks) + bytes(16 * blocks))
    _ethtool(fd, ifname, buf)
    active = 0
    for b in range(blocks):
        _avail, _req, act, _never = struct.unpack_from("=IIII", buf.raw, 8 + 16 * b)
        active |= act << (32 * b)
    return active


def set_features_off(fd: int, ifname: str, bits: list[int], nbits: int) -> None:
    """Ask the kernel to turn the feature ``bits`` of ``ifname`` off (``ETHTOOL_SFEATURES``; the
    kernel also drops what depends on them). Raises OSError."""
    blocks = (nbits + 31) // 32
    valid = [0] * blocks
    for bit in bits:
        valid[bit // 32] |= 1 << (bit % 32)
    body = b"".join(struct.pack("=II", v, 0) for v in valid)
    _ethtool(fd, ifname, ctypes.create_string_buffer(struct.pack("=II", ETHTOOL_SFEATURES, blocks) + body))


@dataclass(frozen=True)
class PortPlan:
    """What to do to one interface.

    Attributes:
        ifname: the interface (in its namespace).
        queue: the egress queue to install (HTB at the link rate over a FIFO), or None to leave
            the qdiscs alone (the controller installs PFC's own).
        switch_port: True for a switch port in the root namespace (its IPv6 is switched off so the
            kernel's own solicitations do not show in the port counters; cases C4, C5).
    """

    ifname: str
    queue: PortQueue | None = None
    switch_port: bool = False


class NamespacePorts:
    """Configures many interfaces of one network namespace over one netlink socket.

    Args:
        netns_pid: a process whose network namespace holds the interfaces (a Mininet host's
            shell), or None for the root namespace.

    Use as a context manager; :meth:`configure` then :meth:`verify`. Raises SetupError (entering
    the namespace, the kernel refusing a request, a read-back that differs).
    """

    def __init__(self, netns_pid: int | None = None):
        self.netns_pid = netns_pid
        self.ipr: IPRoute = netlink.in_netns(netns_pid, IPRoute)
        self.fd = self.ipr.fileno()
        self.index = {m.get_attr("IFLA_IFNAME"): m["index"] for m in self.ipr.get_links()}
        self._bits: dict[str, list[int]] | None = None
        self._nbits = 0
        self.plans: list[PortPlan] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        """Close the namespace's socket (idempotent)."""
        self.ipr.close()

    def _idx(self, ifname: str) -> int:
        try:
            return self.index[ifname]
        except KeyError:
            raise SetupError(f"port set-up: no interface {ifname!r}") from None

    def _offload_bits(self, ifname: str) -> dict[str, list[int]]:
        if self._bits is None:
            names = feature_names(self.fd, ifname)
            self._bits, self._nbits = offload_bits(names), len(names)
        return self._bits

    def offloads_off(self, ifname: str) -> None:
        """Checksum, segmentation and receive offloads off, as ``ethtool -K IF rx off tx off tso
        off gso off gro off`` would (with them on, the userspace datapath stalls TCP and qdiscs see
        64 kB super-packets; cases T1, L5), and ``gso_max_segs`` 1, so that every packet the
        qdisc sees is one frame.

        Why the second: since Linux 4.19 TCP builds GSO packets whatever the device's ``gso``
        setting ("tcp: switch to GSO being always on") and software GSO cuts them into frames only
        after the qdisc. With ``gso off`` alone this machine's kernel handed a 10 Mbit/s port's HTB
        16 kB packets (11 frames each), which the shaper then sent back to back at veth speed; with
        one segment per packet the same port's gaps between dequeues were within 10% of one frame
        time for 99.7% of its frames (docs/how-it-works.md, "Serialisation").

        Raises:
            SetupError: the interface is missing or the kernel refused a setting.
        """
        idx = self._idx(ifname)
        try:
            bits = self._offload_bits(ifname)
            set_features_off(self.fd, ifname, [b for bs in bits.values() for b in bs], self._nbits)
            self.ipr.link("set", index=idx, gso_max_segs=1)
        except OSError as e:   # NetlinkError is an OSError
            raise SetupError(f"offloads on {ifname}: kernel refused ({e})") from None

    def install_queue(self, ifname: str, q: PortQueue) -> None:
        """Replace the root qdisc of ``ifname`` with HTB(rate) -> FIFO(limit); read back by
        :meth:`verify`. Raises SetupError naming the interface and the kernel's reason."""
        idx = self._idx(ifname)
        rate_bps = int(round(q.rate_mbps * 1e6))
        try:
            self.ipr.tc("replace", "htb", idx, HTB_ROOT, default=1)
            self.ipr.tc("replace-class", "htb", idx, HTB_CLASS, parent=HTB_ROOT,
                        rate=f"{rate_bps}bit", ceil=f"{rate_bps}bit", burst=q.burst_bytes, cburst=q.burst_bytes)
            self.ipr.tc("replace", q.fifo_kind, idx, FIFO_HANDLE, parent=HTB_CLASS, limit=q.fifo_limit)
        except NetlinkError as e:
            raise SetupError(f"tc on {ifname}: kernel refused ({e.code}: {e.args[1] if len(e.args) > 1 else e})") from None

    def configure(self, plans: list[PortPlan]) -> None:
        """Apply ``plans`` (offloads off, IPv6 off on switch ports, the queue). Raises SetupError."""
        for p in plans:
            self.offloads_off(p.ifname)
            if p.switch_port:
                hostknobs.disable_ipv6(p.ifname)
            if p.queue is not None:
                self.install_queue(p.ifname, p.queue)
        self.plans.extend(plans)

    def verify(self) -> None:
        """Read back every configured interface with one link dump and one qdisc dump: offloads
        off, one segment per GSO packet, the HTB root with its FIFO under 1:1.

        Raises:
            SetupError: naming the first interface whose state differs from its plan.
        """
        if not self.plans:
            return
        try:
            links = {m["index"]: m for m in self.ipr.get_links()}
            kinds: dict[int, set] = {}
            for m in self.ipr.get_qdiscs():
                kinds.setdefault(m["index"], set()).add((m["parent"], m.get_attr("TCA_KIND")))
        except NetlinkError as e:
            raise SetupError(f"port set-up read-back: kernel refused a dump ({e.code})") from None
        mask = 0
        for bs in (self._bits or {}).values():
            for b in bs:
                mask |= 1 << b
        for p in self.plans:
            idx = self._idx(p.ifname)
            segs = links[idx].get_attr("IFLA_GSO_MAX_SEGS") if idx in links else None
            if segs != 1:
                raise SetupError(f"gso_max_segs on {p.ifname}: read back {segs}, asked 1")
            try:
                on = active_features(self.fd, p.ifname, self._nbits) & mask
            except OSError as e:
                raise SetupError(f"offloads on {p.ifname}: read-back refused ({e})") from None
            if on:
                names = sorted(s for s, bs in (self._bits or {}).items() if any(on >> b & 1 for b in bs))
                raise SetupError(f"offloads on {p.ifname}: still on after switching off: {', '.join(names)}")
            if p.queue is None:
                continue
            got = kinds.get(idx, set())
            if (0xFFFFFFFF, "htb") not in got or (HTB_CLASS, p.queue.fifo_kind) not in got:
                raise SetupError(f"tc on {p.ifname}: read-back shows {sorted(got)}, expected htb root "
                                 f"with {p.queue.fifo_kind} under 1:1")


def configure_ports(plans: dict[int | None, list[PortPlan]]) -> None:
    """Configure every port of a fabric: ``{netns_pid or None: [PortPlan, ...]}``, one socket and
    one read-back per namespace.

    Raises:
        SetupError: as :class:`NamespacePorts`, naming the interface.
    """
    for pid, plans in plans.items():
        with NamespacePorts(pid) as ns:
            ns.configure(plans)
            ns.verify()
