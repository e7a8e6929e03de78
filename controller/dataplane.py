"""Every data-plane configuration call of fabriclab: tc (via pyroute2
netlink), ethtool offloads, sysctls in host namespaces and OVS commands.

Errors are raised as :class:`common.errors.SetupError` carrying the kernel's
or the tool's own message, never printed and ignored (cases L1, L2).
Commands are argv lists built from validated values.
"""
from __future__ import annotations

import subprocess
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import tcmsg

from common.errors import SetupError

# pyroute2 ships the pfifo options encoder but not bfifo's; both qdiscs take
# the same ``struct tc_fifo_qopt { __u32 limit; }`` (linux/pkt_sched.h).
tcmsg.plugins.setdefault("bfifo", tcmsg.plugins["pfifo"])

HTB_ROOT = 0x10000     # 1:
HTB_CLASS = 0x10001    # 1:1
FIFO_HANDLE = 0x100000  # 10:


@dataclass(frozen=True)
class PortQueue:
    """The egress queue of one port: an HTB shaper at the link rate over a FIFO.

    Attributes:
        rate_mbps: shaping rate in Mbit/s (the link rate).
        buffer_bytes: FIFO limit in bytes (bfifo), or None.
        buffer_packets: FIFO limit in packets (pfifo), or None.
        burst_bytes: HTB burst and cburst in bytes.

    Exactly one of buffer_bytes / buffer_packets is set.
    """

    rate_mbps: float
    buffer_bytes: int | None = None
    buffer_packets: int | None = None
    burst_bytes: int = 3028

    def __post_init__(self):
        if (self.buffer_bytes is None) == (self.buffer_packets is None):
            raise ValueError("PortQueue needs exactly one of buffer_bytes, buffer_packets")
        if not self.rate_mbps > 0:
            raise ValueError(f"rate_mbps must be > 0, got {self.rate_mbps}")

    @property
    def fifo_kind(self) -> str:
        """``bfifo`` for a byte limit, ``pfifo`` for a packet limit."""
        return "bfifo" if self.buffer_bytes is not None else "pfifo"

    @property
    def fifo_limit(self) -> int:
        """The FIFO limit in its own unit (bytes for bfifo, packets for pfifo)."""
        return self.buffer_bytes if self.buffer_bytes is not None else self.buffer_packets


def _ipr(netns_pid: int | None) -> IPRoute:
    if netns_pid is None:
        return IPRoute()
    return IPRoute(netns=f"/proc/{netns_pid}/ns/net", flags=0)


def install_port_queue(ifname: str, q: PortQueue, netns_pid: int | None = None) -> None:
    """Replace the root qdisc of ``ifname`` with HTB(rate) -> FIFO(limit).

    Args:
        ifname: interface name (in the namespace of ``netns_pid``, or the
            root namespace when None).
        q: the queue to install.
        netns_pid: a process whose network namespace holds ``ifname``.

    Raises:
        SetupError: the interface is missing, the kernel refused a qdisc, or
            the read-back does not show what was asked (case L1/L2).
    """
    rate_bps = int(round(q.rate_mbps * 1e6))
    try:
        with _ipr(netns_pid) as ipr:
            found = ipr.link_lookup(ifname=ifname)
            if not found:
                raise SetupError(f"tc: no interface {ifname!r}")
            idx = found[0]
            ipr.tc("replace", "htb", idx, HTB_ROOT, default=1)
            ipr.tc("replace-class", "htb", idx, HTB_CLASS, parent=HTB_ROOT,
                   rate=f"{rate_bps}bit", ceil=f"{rate_bps}bit",
                   burst=q.burst_bytes, cburst=q.burst_bytes)
            ipr.tc("replace", q.fifo_kind, idx, FIFO_HANDLE, parent=HTB_CLASS, limit=q.fifo_limit)
            kinds = {(m["parent"], m.get_attr("TCA_KIND")) for m in ipr.get_qdiscs(index=idx)}
    except NetlinkError as e:
        raise SetupError(f"tc on {ifname}: kernel refused ({e.code}: {e.args[1] if len(e.args) > 1 else e})") from None
    if (0xFFFFFFFF, "htb") not in kinds or (HTB_CLASS, q.fifo_kind) not in kinds:
        raise SetupError(f"tc on {ifname}: read-back shows {sorted(kinds)}, expected htb root with {q.fifo_kind} under 1:1")


def run(argv: list[str], netns_pid: int | None = None, timeout_s: float = 10.0) -> str:
    """Run ``argv`` (in the network namespace of ``netns_pid`` if given); return stdout.

    Raises:
        SetupError: non-zero exit or timeout; the message carries stderr.
    """
    if netns_pid is not None:
        argv = ["nsenter", "-t", str(netns_pid), "-n", "--"] + list(argv)
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise SetupError(f"{' '.join(argv)}: timed out after {timeout_s} s") from None
    except FileNotFoundError:
        raise SetupError(f"{argv[0]}: not installed (run 'sudo make setup')") from None
    if p.returncode != 0:
        raise SetupError(f"{' '.join(argv)} exited {p.returncode}: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


#: Offloads turned off on every interface (cases T1, L5): with them on, the
#: userspace datapath stalls TCP, and qdiscs see 64 kB super-packets.
OFFLOADS = ("rx", "tx", "tso", "gso", "gro")


def offloads_off(ifname: str, netns_pid: int | None = None) -> None:
    """Turn checksum and segmentation offloads off on ``ifname``; raises SetupError."""
    argv = ["ethtool", "-K", ifname]
    for feat in OFFLOADS:
        argv += [feat, "off"]
    run(argv, netns_pid)


def offload_state(ifname: str, netns_pid: int | None = None) -> dict[str, bool]:
    """Current state of the :data:`OFFLOADS` features as ``{feature: on}``."""
    names = {"rx": "rx-checksumming", "tx": "tx-checksumming", "tso": "tcp-segmentation-offload",
             "gso": "generic-segmentation-offload", "gro": "generic-receive-offload"}
    out = run(["ethtool", "-k", ifname], netns_pid)
    state = {}
    for line in out.splitlines():
        key, _, val = line.partition(":")
        for short, long in names.items():
            if key.strip() == long:
                state[short] = val.strip().startswith("on")
    return state


def set_sysctl(key: str, value: str, netns_pid: int) -> None:
    """Set a sysctl inside the namespace of ``netns_pid`` (per-namespace keys only; case H1)."""
    run(["sysctl", "-q", "-w", f"{key}={value}"], netns_pid)


def get_sysctl(key: str, netns_pid: int | None = None) -> str:
    """Read a sysctl, inside the namespace of ``netns_pid`` if given."""
    return run(["sysctl", "-n", key], netns_pid).strip()


def ovs_bridges() -> list[str]:
    """Names of all OVS bridges (empty if ovsdb is not reachable)."""
    try:
        return [b for b in run(["ovs-vsctl", "--timeout=5", "list-br"]).split() if b]
    except SetupError:
        return []


def ovs_del_bridges(names: list[str]) -> None:
    """Delete the named OVS bridges if they exist, in one ovs-vsctl transaction."""
    if not names:
        return
    argv = ["ovs-vsctl", "--timeout=10"]
    for n in names:
        argv += ["--", "--if-exists", "del-br", n]
    run(argv, timeout_s=20)


def ovs_running() -> bool:
    """True if ovsdb-server and ovs-vswitchd answer."""
    try:
        run(["ovs-vsctl", "--timeout=3", "show"], timeout_s=5)
        return True
    except SetupError:
        return False


def root_links() -> set[str]:
    """Names of all interfaces in the root network namespace."""
    with IPRoute() as ipr:
        return {l.get_attr("IFLA_IFNAME") for l in ipr.get_links()}


def delete_root_links(names: list[str]) -> list[str]:
    """Delete the named interfaces of the root namespace that exist; returns those deleted."""
    deleted = []
    with IPRoute() as ipr:
        for name in names:
            idx = ipr.link_lookup(ifname=name)
            if idx:
                try:
                    ipr.link("del", index=idx[0])
                    deleted.append(name)
                except NetlinkError as e:
                    if e.code != 19:  # ENODEV: its veth peer went first
                        raise SetupError(f"ip link del {name}: {e}") from None
    return deleted
