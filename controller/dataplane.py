"""Every data-plane configuration call of fabriclab: tc (via pyroute2
netlink), ethtool offloads, sysctls in host namespaces and OVS commands.

Errors are raised as :class:`common.errors.SetupError` carrying the kernel's
or the tool's own message, never printed and ignored (cases L1, L2).
Commands are argv lists built from validated values.
"""
from __future__ import annotations

import ctypes
import gzip
import json
import math
import os
import re
import socket
import struct
import subprocess
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import RTM_NEWQDISC, tcmsg
from pyroute2.netlink.rtnl.tcmsg.common import calc_xmittime

from common.errors import SetupError
from common.units import shaper_burst_bytes
from controller import porttree
from controller.timers import shaper_slack_s

# pyroute2 ships the pfifo options encoder but not bfifo's; both qdiscs take
# the same ``struct tc_fifo_qopt { __u32 limit; }`` (linux/pkt_sched.h).
tcmsg.plugins.setdefault("bfifo", tcmsg.plugins["pfifo"])

HTB_ROOT = 0x10000     # 1:
HTB_CLASS = 0x10001    # 1:1
FIFO_HANDLE = 0x100000  # 10:
#: RED's handle under 1:1 (the kernel refuses to replace a qdisc by one of another kind under
#: the same handle, so FIFO and RED alternate between 10: and 20:).
RED_HANDLE = 0x200000  # 20:


@dataclass(frozen=True)
class PortQueue:
    """The egress queue of one port: an HTB shaper at the link rate over a FIFO.

    Attributes:
        rate_mbps: shaping rate in Mbit/s (the link rate).
        buffer_bytes: FIFO limit in bytes (bfifo), or None.
        buffer_packets: FIFO limit in packets (pfifo), or None.
        burst_bytes: HTB burst and cburst in bytes; None: from the rate and the shaper's timer
            slack (:func:`common.units.shaper_burst_bytes`, :func:`controller.timers.shaper_slack_s`).

    Exactly one of buffer_bytes / buffer_packets is set.
    """

    rate_mbps: float
    buffer_bytes: int | None = None
    buffer_packets: int | None = None
    burst_bytes: int | None = None

    def __post_init__(self):
        if (self.buffer_bytes is None) == (self.buffer_packets is None):
            raise ValueError("PortQueue needs exactly one of buffer_bytes, buffer_packets")
        if not self.rate_mbps > 0:
            raise ValueError(f"rate_mbps must be > 0, got {self.rate_mbps}")
        if self.burst_bytes is None:
            object.__setattr__(self, "burst_bytes", shaper_burst_bytes(self.rate_mbps * 1e6, shaper_slack_s()))

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


def _link_index(ipr: IPRoute, ifname: str, what: str = "tc") -> int:
    """The ifindex of ``ifname`` in ``ipr``'s namespace; SetupError naming ``what`` if it is missing."""
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise SetupError(f"{what}: no interface {ifname!r}")
    return found[0]


def _tc_handle(h: int) -> str:
    """A tc handle as tc prints it (``1:``, ``1:1``, ``root``)."""
    if h == 0xFFFFFFFF:
        return "root"
    major, minor = h >> 16, h & 0xFFFF
    return f"{major:x}:{minor:x}" if minor else f"{major:x}:"


class QdiscTrees:
    """Reads every qdisc on each of ``ifnames`` (root namespace) and of ``namespaces`` (interfaces
    inside other network namespaces: the hosts' NICs) with one netlink dump per namespace: calling
    it returns ``{ifname: ("<kind> <handle> parent <parent>", ...)}`` sorted, e.g. ``("bfifo 10:
    parent 1:1", "htb 1: parent root")``; an interface that is gone maps to ``()``. The
    interfaces' indexes are looked up once, at construction, where one netlink socket per other
    namespace is opened and kept until :meth:`close` (opening one costs about 7 ms here, a dump on
    it about 0.15 ms). Measured on the default fabric's 40 switch ports (80 qdiscs): see
    ``bench/bench_watch.py``.

    Args:
        ifnames: interfaces in the root namespace (the switch ports).
        namespaces: ``{ifname: pid}``, an interface inside the network namespace of process
            ``pid`` (a Mininet host's shell).

    Raises:
        SetupError: the kernel refused a dump (construction or call), or a namespace could not
            be entered (construction).
    """

    def __init__(self, ifnames: list[str], namespaces: dict[str, int] | None = None):
        namespaces = dict(namespaces or {})
        self.ifnames = list(ifnames) + [n for n in namespaces if n not in ifnames]
        wanted = set(ifnames)
        self._ns: dict[int, tuple[IPRoute, dict[int, str]]] = {}
        try:
            with IPRoute() as ipr:
                self.names = {m["index"]: m.get_attr("IFLA_IFNAME") for m in ipr.get_links()
                              if m.get_attr("IFLA_IFNAME") in wanted}
            for ifname, pid in namespaces.items():
                if pid not in self._ns:
                    self._ns[pid] = (_ipr(pid), {})
                ipr, names = self._ns[pid]
                names.update({i: ifname for i in ipr.link_lookup(ifname=ifname)})
        except NetlinkError as e:
            self.close()
            raise SetupError(f"ip link: dump refused ({e.code})") from None
        except OSError as e:
            self.close()
            raise SetupError(f"ip link: cannot enter a host's namespace ({e})") from None

    def __call__(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {n: [] for n in self.ifnames}
        try:
            with IPRoute() as ipr:
                self._dump(ipr, self.names, out)
            for ipr, names in self._ns.values():
                self._dump(ipr, names, out)
        except NetlinkError as e:
            raise SetupError(f"tc: qdisc dump refused ({e.code})") from None
        return {n: tuple(sorted(v)) for n, v in out.items()}

    @staticmethod
    def _dump(ipr: IPRoute, names: dict[int, str], out: dict[str, list[str]]) -> None:
        for m in ipr.get_qdiscs():
            name = names.get(m["index"])
            if name is not None:
                out[name].append(f"{m.get_attr('TCA_KIND')} {_tc_handle(m['handle'])} "
                                 f"parent {_tc_handle(m['parent'])}")

    def close(self) -> None:
        """Close the sockets kept in other namespaces (idempotent)."""
        for ipr, _ in self._ns.values():
            ipr.close()
        self._ns = {}


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


#: Route metrics (include/uapi/linux/rtnetlink.h): RTAX_RTO_MIN is honoured only when locked.
RTAX_RTO_MIN = 13
MAIN_TABLE = 254


def set_route_tcp(ifname: str, netns_pid: int | None, rto_min_ms: int | None, quickack: bool) -> list[dict]:
    """Give every IPv4 route of the main table out of ``ifname`` TCP's per-route knobs, as
    ``ip route replace ... rto_min <ms> quickack 1`` would (rto_min locked, which the kernel needs
    before it uses it), and return what the routes read back.

    Args:
        ifname: the host's NIC (in the namespace of ``netns_pid``).
        rto_min_ms: TCP's minimum RTO in ms, or None to leave the kernel's.
        quickack: True: acknowledge every segment at once (no delayed ACKs).

    Returns: per route ``{"dst": "10.0.0.0/8", "rto_min_ms": int | None, "quickack": bool}``.

    Raises:
        SetupError: no such interface, no route out of it, the kernel refused the change, or the
            read-back differs from what was asked.
    """
    metrics = {}
    if rto_min_ms is not None:
        metrics.update(lock=1 << RTAX_RTO_MIN, rto_min=int(rto_min_ms))
    if quickack:
        metrics["quickack"] = 1
    try:
        with _ipr(netns_pid) as ipr:
            idx = _link_index(ipr, ifname, "route")
            routes = ipr.get_routes(family=socket.AF_INET, table=MAIN_TABLE, oif=idx)
            if not routes:
                raise SetupError(f"route on {ifname}: no IPv4 route out of it")
            for r in routes:
                keep = {"dst": f"{r.get_attr('RTA_DST') or '0.0.0.0'}/{r['dst_len']}", "oif": idx,
                        "scope": r["scope"], "proto": r["proto"], "table": MAIN_TABLE}
                if r.get_attr("RTA_PREFSRC"):
                    keep["prefsrc"] = r.get_attr("RTA_PREFSRC")
                if r.get_attr("RTA_GATEWAY"):
                    keep["gateway"] = r.get_attr("RTA_GATEWAY")
                ipr.route("replace", **keep, metrics=metrics)
            seen = []
            for r in ipr.get_routes(family=socket.AF_INET, table=MAIN_TABLE, oif=idx):
                m = dict((r.get_attr("RTA_METRICS") or {}).get("attrs", []))
                seen.append({"dst": f"{r.get_attr('RTA_DST') or '0.0.0.0'}/{r['dst_len']}",
                             "rto_min_ms": m.get("RTAX_RTO_MIN") if m.get("RTAX_LOCK", 0) & (1 << RTAX_RTO_MIN) else None,
                             "quickack": bool(m.get("RTAX_QUICKACK"))})
    except NetlinkError as e:
        raise SetupError(f"route on {ifname}: kernel refused ({e.code}: {e.args[1] if len(e.args) > 1 else e})") from None
    for got in seen:
        if got["rto_min_ms"] != rto_min_ms or got["quickack"] != quickack:
            raise SetupError(f"route on {ifname}: {got['dst']} read back rto_min {got['rto_min_ms']} ms, quickack "
                             f"{got['quickack']}; asked {rto_min_ms} ms, {quickack}")
    return seen


def kernel_hz() -> int | None:
    """The kernel's timer frequency (CONFIG_HZ, from /proc/config.gz or /boot/config-<release>), or
    None when neither is readable. TCP's timers count in jiffies of 1/HZ s."""
    release = os.uname().release
    for path, opener in (("/proc/config.gz", gzip.open), (f"/boot/config-{release}", open)):
        try:
            with opener(path, "rt") as f:
                for line in f:
                    if line.startswith("CONFIG_HZ="):
                        return int(line.split("=", 1)[1])
        except OSError:
            continue
    return None


def gso_max_segs(ifname: str, netns_pid: int | None = None) -> int:
    """The ``gso_max_segs`` of ``ifname`` (1: its qdisc sees single frames)."""
    with _ipr(netns_pid) as ipr:
        return ipr.get_links(_link_index(ipr, ifname, "gso_max_segs"))[0].get_attr("IFLA_GSO_MAX_SEGS")


def ovs_trace_output_port(bridge: str, flow: str) -> int | None:
    """The OpenFlow port Open vSwitch's tables send ``flow`` out of on ``bridge``, by
    ``ovs-appctl ofproto/trace`` (the ECMP ``multipath`` hash evaluated as for a real packet of
    that flow). ``flow``: an ovs-fields match, e.g. ``in_port=1,udp,nw_src=..,nw_dst=..,udp_src=..,udp_dst=..``.
    Returns None when the tables output nowhere (dropped).

    Raises:
        SetupError: ovs-appctl failed (no such bridge, bad flow).
    """
    ports = re.findall(r"^\s*output:(\d+)", run(["ovs-appctl", "ofproto/trace", bridge, flow]), re.MULTILINE)
    return int(ports[-1]) if ports else None


def ovs_trace_hop(bridge: str, flow: str) -> tuple[int | None, dict[str, str]]:
    """:func:`ovs_trace_output_port`, and the Ethernet source the tables leave the packet with
    when they rewrote it (a routing strategy's tag, controller.routing.valiant):
    ``(port or None, {"dl_src": mac} or {})``, from the trace's ``Final flow`` line, so that a
    walk over several switches can hand each the packet as the previous one sent it.

    Raises:
        SetupError: ovs-appctl failed (no such bridge, bad flow).
    """
    text = run(["ovs-appctl", "ofproto/trace", bridge, flow])
    ports = re.findall(r"^\s*output:(\d+)", text, re.MULTILINE)
    final = re.search(r"^Final flow: (.*)$", text, re.MULTILINE)
    src = re.search(r"(?:^|,)dl_src=([0-9a-f:]{17})", final.group(1)) if final else None
    given = re.search(r"(?:^|,)dl_src=([0-9a-f:]{17})", flow)
    unchanged = given.group(1) if given else "00:00:00:00:00:00"
    return (int(ports[-1]) if ports else None), ({"dl_src": src.group(1)} if src and src.group(1) != unchanged else {})


def disable_ipv6(ifname: str) -> bool:
    """Switch IPv6 off on a root-namespace interface (a switch port).

    Without this the root namespace's kernel sends its own IPv6 router
    solicitations and MLD reports out of every switch-side veth, which shows
    up as stray packets in the port counters (cases C4, C5). Returns False if
    the kernel has no IPv6 (nothing to do); raises SetupError if the write fails.
    """
    path = f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6"
    if not os.path.exists(path):
        return False
    try:
        with open(path, "w") as f:
            f.write("1")
    except OSError as e:
        raise SetupError(f"cannot disable IPv6 on {ifname}: {e}") from e
    return True


def offload_state(ifname: str, netns_pid: int | None = None) -> dict[str, bool]:
    """Current state of the offloads fabriclab turns off (rx, tx, tso, gso, gro), as ``ethtool -k``
    shows them: ``{feature: on}`` (an independent check of :mod:`controller.portsetup`)."""
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


def set_sysctl(key: str, value: str, netns_pid: int | None = None) -> None:
    """Set a sysctl, inside the namespace of ``netns_pid`` if given (per-namespace keys; case H1).

    Raises SetupError with sysctl's message if the kernel refuses.
    """
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
    """Delete the named OVS bridges if they exist, in one ovs-vsctl transaction, with the kernel's
    RCU grace periods expedited meanwhile (:func:`expedited_rcu`; 80 bridges of a Fat-Tree k=8 took
    9.6 s without, 2 s with). The wait allowed grows with the bridges (10 s plus 0.5 s each).

    Raises:
        SetupError: ovs-vsctl failed or timed out.
    """
    if not names:
        return
    wait_s = 10 + int(0.5 * len(names))
    argv = ["ovs-vsctl", f"--timeout={wait_s}"]
    for n in names:
        argv += ["--", "--if-exists", "del-br", n]
    with expedited_rcu():
        run(argv, timeout_s=wait_s + 10)


def root_links() -> set[str]:
    """Names of all interfaces in the root network namespace."""
    with IPRoute() as ipr:
        return {l.get_attr("IFLA_IFNAME") for l in ipr.get_links()}


def ifb_available() -> bool:
    """True if the kernel can make an ifb device (tried with fabriclab's own throwaway ``flprobeifb``)."""
    subprocess.run(["ip", "link", "del", "flprobeifb"], capture_output=True, timeout=10)
    p = subprocess.run(["ip", "link", "add", "flprobeifb", "type", "ifb"], capture_output=True, timeout=10)
    subprocess.run(["ip", "link", "del", "flprobeifb"], capture_output=True, timeout=10)
    return p.returncode == 0


def delay_line_limit_packets(rate_mbps: float, delay_us: int, jitter_us: int = 0) -> int:
    """netem's limit for a delay line: every minimum-size frame (64 B + 20 B of preamble and gap)
    the link can have in flight over the longest delay, with half again as margin, at least 1000."""
    in_flight = rate_mbps * 1e6 * (delay_us + jitter_us) * 1e-6 / (84 * 8)
    return max(1000, int(1.5 * in_flight) + 1)


def install_delay_line(ifname: str, ifb_name: str, delay_us: int, jitter_us: int, limit_packets: int,
                       netns_pid: int | None = None) -> None:
    """Delay every frame arriving on ``ifname`` by ``delay_us`` (+- ``jitter_us``, uniform): its tc
    ingress hook redirects each frame to the new ifb device ``ifb_name``, whose root qdisc is
    netem, and ifb hands it back to ``ifname``'s receive path when its time has come. The sending
    port's shaper and buffer are untouched, so the delay line never holds buffer (case L3).

    Args:
        ifname: the receiving end of a link (in the namespace of ``netns_pid``, or the root one).
        ifb_name: a new interface name (1-15 characters), created here.
        delay_us, jitter_us: netem's delay and jitter in microseconds.
        limit_packets: netem's limit (:func:`delay_line_limit_packets`).

    Raises:
        SetupError: a command failed (no ifb or netem in the kernel, a name taken), with its message.
    """
    run(["ip", "link", "add", ifb_name, "type", "ifb"], netns_pid)
    run(["ip", "link", "set", ifb_name, "up"], netns_pid)
    netem = ["tc", "qdisc", "replace", "dev", ifb_name, "root", "handle", "1:", "netem", "limit", str(limit_packets),
             "delay", f"{delay_us}us"] + ([f"{jitter_us}us"] if jitter_us else [])
    run(netem, netns_pid)
    try:
        run(["tc", "qdisc", "add", "dev", ifname, "clsact"], netns_pid)
    except SetupError as e:
        if "File exists" not in str(e) and "Exclusivity flag on" not in str(e):
            raise
    run(["tc", "filter", "add", "dev", ifname, "ingress", "pref", "1", "protocol", "all", "u32", "match", "u32",
         "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb_name], netns_pid)


#: The kernel's switch between normal and expedited RCU grace periods (Documentation/RCU).
RCU_EXPEDITED = "/sys/kernel/rcu_expedited"


def rcu_expedited(value: int | None = None) -> int | None:
    """Read (and, with ``value``, first set) the kernel's ``rcu_expedited`` switch; None where the
    kernel has none.

    Why fabriclab touches it: Open vSwitch's userspace datapath closes one AF_PACKET socket per
    port when its bridge is deleted, and the kernel waits for an RCU grace period at each close
    (``synchronize_net()`` in ``packet_release()``); a Fat-Tree k=8's 640 ports took 9.7 s here
    with normal grace periods and 2.1 s with expedited ones. Set for the bridges' deletion only,
    recorded for the run record's cleanup, and put back at once.

    Raises:
        SetupError: the write was refused.
    """
    try:
        if value is not None:
            with open(RCU_EXPEDITED, "w") as f:
                f.write(str(int(value)))
        with open(RCU_EXPEDITED) as f:
            return int(f.read().strip())
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SetupError(f"{RCU_EXPEDITED}: {e}") from None


@contextmanager
def expedited_rcu(remember=None, forget=None):
    """While inside: the kernel's RCU grace periods expedited (:func:`rcu_expedited` says why),
    then put back as they were. Does nothing where the kernel has no such switch or it is on
    already. ``remember(before)`` is called before the change and ``forget()`` after it is undone
    (a run record's :meth:`experiments.state.RunState.remember` / ``forget``).

    Raises:
        SetupError: the kernel refused the write.
    """
    before = rcu_expedited()
    if before != 0:
        yield
        return
    if remember is not None:
        remember(before)
    rcu_expedited(1)
    try:
        yield
    finally:
        rcu_expedited(before)
        if forget is not None:
            forget()


#: First link group number tried for a bulk delete (``ip link del group N``); fabriclab moves
#: only its own interfaces into a group no other interface is in, then deletes the group.
LINK_GROUP_BASE = 0x466C0000


def delete_root_links(names: list[str]) -> list[str]:
    """Delete the named interfaces of the root namespace that exist; returns those deleted.

    All in one request, so the kernel waits for one RCU grace period for all of them instead of one
    per interface (a Fat-Tree k=8's 640 switch ports took about 10 s one by one): the interfaces
    are moved into a link group that no other interface is in, the group is read back to hold
    exactly them, and the group is deleted (``ip link delete group N``). A veth's peer goes with
    it, wherever it is. Should another interface be in that group by the time of the read-back,
    the named ones are deleted one by one instead.

    Raises:
        SetupError: the kernel refused a deletion (other than ``ENODEV``: a peer went first).
    """
    wanted = set(names)
    try:
        with IPRoute() as ipr:
            links = ipr.get_links()
            present = {m.get_attr("IFLA_IFNAME"): m["index"] for m in links if m.get_attr("IFLA_IFNAME") in wanted}
            if not present:
                return []
            used = {m.get_attr("IFLA_GROUP") for m in links}
            group = next(g for g in range(LINK_GROUP_BASE, LINK_GROUP_BASE + len(used) + 1) if g not in used)
            for name, idx in list(present.items()):
                try:
                    ipr.link("set", index=idx, group=group)
                except NetlinkError as e:
                    if e.code != 19:  # ENODEV: gone meanwhile (a peer, or a namespace that ended)
                        raise
                    del present[name]
            members = {m.get_attr("IFLA_IFNAME") for m in ipr.get_links() if m.get_attr("IFLA_GROUP") == group}
            if members <= set(present):
                for _ in range(3):
                    try:
                        if members:
                            ipr.link("del", group=group)
                        return sorted(members)
                    except NetlinkError as e:
                        if e.code != 19:   # ENODEV: every member went meanwhile, or some did: look again
                            raise
                        if not {m.get_attr("IFLA_IFNAME") for m in ipr.get_links()
                                if m.get_attr("IFLA_GROUP") == group}:
                            return sorted(members)
            deleted = []
            for name, idx in present.items():
                try:
                    ipr.link("del", index=idx)
                    deleted.append(name)
                except NetlinkError as e:
                    if e.code != 19:  # ENODEV: its veth peer went first
                        raise
            return deleted
    except NetlinkError as e:
        raise SetupError(f"ip link del ({len(wanted)} interfaces): kernel refused ({e.code}: "
                         f"{e.args[1] if len(e.args) > 1 else e})") from None


def ovs_interface_drops(names: list[str] | None = None) -> dict[str, dict]:
    """Open vSwitch's own drop counters per interface: ``{name: {"rx_dropped", "tx_dropped"}}``
    (``ovs-vsctl list Interface``; absent counters are 0). On the userspace datapath
    ``tx_dropped`` counts frames OVS could not hand to a port's socket (they never reach a
    qdisc, so no qdisc counter has them). ``names`` None: every interface.

    Raises:
        SetupError: ovs-vsctl failed.
    """
    out = json.loads(run(["ovs-vsctl", "--format=json", "--columns=name,statistics", "list", "Interface"]))
    res = {}
    for name, stats in out.get("data", []):
        if names is not None and name not in names:
            continue
        d = dict(stats[1]) if isinstance(stats, list) and stats and stats[0] == "map" else {}
        res[name] = {"rx_dropped": int(d.get("rx_dropped", 0)), "tx_dropped": int(d.get("tx_dropped", 0))}
    return res


# -- Open vSwitch userspace datapath: its shared transmit socket ---------------
#
# With datapath_type=netdev, ovs-vswitchd transmits on every Linux port through
# ONE non-blocking AF_PACKET socket (lib/netdev-linux.c, af_packet_sock()),
# created with the default send buffer (net.core.wmem_default, 212992 bytes).
# A packet sitting in any port's qdisc is charged to that socket, so the whole
# fabric can hold only ~93 full-size frames (truesize ~2304 B each) in all its
# queues together; past that, sendmmsg fails with ENOBUFS and OVS drops the
# packet before it reaches a qdisc (no qdisc drop counter moves). fabriclab
# raises that socket's send buffer for the run, through pidfd_getfd(2) and
# SO_SNDBUFFORCE, and restores it afterwards. The kernel datapath does not
# have this socket.

SO_SNDBUFFORCE = 32
SYS_PIDFD_GETFD = 438  # x86_64 and aarch64 (asm-generic) syscall number
#: Upper bound of an skb's truesize for one full-size frame, in bytes.
FRAME_TRUESIZE_BYTES = 4096


def ovs_vswitchd_pid() -> int:
    """Pid of ovs-vswitchd from its pidfile; SetupError if it is not running."""
    for path in ("/var/run/openvswitch/ovs-vswitchd.pid", "/run/openvswitch/ovs-vswitchd.pid"):
        try:
            pid = int(open(path).read().strip())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            continue
    raise SetupError("ovs-vswitchd is not running (run 'sudo make setup')")


def _ovs_tx_socket_fd(pid: int) -> int | None:
    """fd number, in ``pid``, of its unbound protocol-0 AF_PACKET socket (the transmit socket)."""
    inodes = set()
    with open(f"/proc/{pid}/net/packet") as f:
        next(f)
        for line in f:
            cols = line.split()
            # sk RefCnt Type Proto Iface R Rmem User Inode
            if len(cols) >= 9 and cols[3] == "0000" and cols[4] == "0":
                inodes.add(cols[8])
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return int(fd)
    return None


def ovs_tx_socket_exists() -> bool:
    """Whether ovs-vswitchd has opened its transmit socket (it does on the first packet it sends; a
    restarted ovs-vswitchd has a new one at the default size). SetupError if it is not running."""
    return _ovs_tx_socket_fd(ovs_vswitchd_pid()) is not None


def _on_ovs_tx_socket(fn):
    """Call ``fn(sock)`` on a duplicate (pidfd_getfd) of ovs-vswitchd's transmit socket."""
    pid = ovs_vswitchd_pid()
    fd = _ovs_tx_socket_fd(pid)
    if fd is None:
        raise OSError("ovs-vswitchd has no transmit socket yet")
    pidfd = os.pidfd_open(pid)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        local = libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
        if local < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"pidfd_getfd: {os.strerror(err)}")
    finally:
        os.close(pidfd)
    s = socket.socket(fileno=local)
    try:
        return fn(s)
    finally:
        s.close()   # closes our duplicate only; ovs-vswitchd keeps its socket


def set_ovs_tx_sndbuf(size_bytes: int) -> int:
    """Set ovs-vswitchd's transmit socket send buffer to ``size_bytes`` as reported by SO_SNDBUF.

    (SO_SNDBUFFORCE doubles what it is given, so half is passed.) Returns
    the size read back. Raises OSError/SetupError if OVS or its socket is
    not there.
    """

    def apply(s):
        s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, max(1, size_bytes // 2))
        return s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    return _on_ovs_tx_socket(apply)


class OvsTxBuffer:
    """Context manager: give ovs-vswitchd's shared transmit socket at least ``min_bytes`` of send buffer.

    Args:
        min_bytes: the send buffer needed: every switch port's FIFO full at
            once, in skb truesize (ports x buffer_packets x FRAME_TRUESIZE_BYTES).
        state: a experiments.state.RunState; the original size is recorded there
            before the change, so a killed run's cleanup puts it back.

    Attributes after enter: ``before_bytes``, ``after_bytes`` (as the kernel
    reports them, i.e. doubled by SO_SNDBUFFORCE), ``applied`` (bool) and
    ``reason`` (why not, if not applied). The socket exists once OVS has
    forwarded a packet: enter after the first ping.
    """

    def __init__(self, min_bytes: int, state=None):
        self.min_bytes = int(min_bytes)
        self.state = state
        self.before_bytes = None
        self.after_bytes = None
        self.applied = False
        self.reason = ""

    def __enter__(self):
        try:
            self.before_bytes = _on_ovs_tx_socket(lambda s: s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
            if self.before_bytes >= self.min_bytes:
                self.after_bytes = self.before_bytes
                self.reason = "already large enough"
                return self
            if self.state is not None:
                self.state.remember("ovs_tx_sndbuf_bytes", self.before_bytes)
            self.after_bytes = set_ovs_tx_sndbuf(2 * self.min_bytes)
            self.applied = self.after_bytes >= self.min_bytes
        except (OSError, SetupError) as e:
            self.reason = str(e)
        return self

    def __exit__(self, *exc):
        if self.applied and self.before_bytes:
            try:
                set_ovs_tx_sndbuf(self.before_bytes)
                if self.state is not None:
                    self.state.forget("ovs_tx_sndbuf_bytes")
            except (OSError, SetupError):
                pass   # left in the record: the recorded cleanup retries
        return False

    def record(self) -> dict:
        """What was found and done, for environment.json."""
        return {"min_bytes": self.min_bytes, "before_bytes": self.before_bytes, "after_bytes": self.after_bytes,
                "applied": self.applied, "note": self.reason}


# -- ECN marking with the kernel's RED (stock kernels) -------------------------

def red_wlog(weight: float | None) -> int:
    """RED's EWMA exponent: weight = 2**-Wlog. None (instantaneous) -> the smallest ``tc`` accepts, 1.

    Raises ValueError if ``weight`` is not a power of two in (0, 1/2] (the kernel's RED
    keeps the weight as a shift; the scenario must say a weight it can have).
    """
    if weight is None:
        return 1
    wlog = -math.log2(weight)
    if wlog < 1 or abs(wlog - round(wlog)) > 1e-9 or wlog > 23:
        raise ValueError(f"kernel RED takes weights 2**-n for n = 1..23, got {weight}")
    return int(round(wlog))


def red_burst_for_wlog(kmin_bytes: int, avpkt: int, wlog: int) -> int:
    """The ``burst`` (packets) for which tc's ``tc_red_eval_ewma`` (iproute2 tc/tc_red.c) chooses ``wlog``.

    tc picks the smallest Wlog >= 1 with ``burst + 1 - kmin/avpkt <= (1 - (1 - W)**burst) / W``;
    this searches ``burst`` upward from the smallest tc accepts. Raises ValueError if none gives ``wlog``.
    """
    def tc_wlog(burst):
        a = burst + 1 - kmin_bytes / avpkt
        if a < 1.0:
            return -1
        w = 0.5
        for wl in range(1, 32):
            if a <= (1 - (1 - w) ** burst) / w:
                return wl
            w /= 2
        return -1
    start = max(1, int(kmin_bytes // avpkt))
    for burst in range(start, start + 100000):
        got = tc_wlog(burst)
        if got == wlog:
            return burst
        if got > wlog:
            break
    raise ValueError(f"no RED burst gives Wlog {wlog} for Kmin {kmin_bytes} B")


def red_tc_probability(pmax: float) -> float:
    """The ``probability`` to give Linux RED so that its marking rate at Kmax is ``pmax``.

    Linux RED (net/sched/sch_red.c, include/net/red.h) does not mark each packet with the
    linear probability p: like RED's paper (Floyd and Jacobson 1993, section 7) it spaces
    marks so the gap is uniform, marking once ``count x p`` passes a uniform random number.
    The gap then averages 1/(2p) + 1/2 packets, a per-packet rate of 2p / (1 + p) - nearly
    twice p for small p (measured in the VM lane with probability 0.2: 0.101, 0.170, 0.235,
    0.298 against a line of 0.061, 0.100, 0.140, 0.180). Giving ``P' = pmax / (2 - pmax)``
    makes the rate exactly ``pmax`` at Kmax; inside the region the rate 2P'x / (1 + P'x)
    (x = (q - Kmin)/(Kmax - Kmin)) stays above the line by at most
    :func:`red_line_deviation` (0.005 for Pmax 0.2, 0.036 for 0.5, 0.17 for 1).
    """
    return pmax / (2.0 - pmax)


def red_line_deviation(pmax: float, steps: int = 1000) -> float:
    """Largest gap between Linux RED's marking rate (with :func:`red_tc_probability`) and the line."""
    p = red_tc_probability(pmax)
    return max(2 * p * x / (1 + p * x) - pmax * x for x in (i / steps for i in range(steps + 1)))


def red_argv(ifname: str, rate_bps: float, limit_bytes: int, profile, avpkt: int = 1514) -> list[str]:
    """``tc qdisc replace`` argv putting RED (ecn, nodrop) under the port's HTB class 1:1.

    step K -> min K, max K+1 byte, probability 1 (the DCTCP set-up of the Mininet-HiFi
    experiments); red -> min Kmin, max Kmax, probability :func:`red_tc_probability` (Pmax).
    ``nodrop``: Not-ECT packets are queued, not dropped early (they meet only the ``limit``;
    case L2's "never silently change behaviour"). ``limit`` is the port's buffer in bytes.
    """
    if profile.kind == "step":
        qmin, qmax, prob = profile.k_bytes, profile.k_bytes + 1, 1.0
    else:
        qmin, qmax, prob = profile.kmin_bytes, profile.kmax_bytes, red_tc_probability(profile.pmax)
    burst = red_burst_for_wlog(qmin, avpkt, red_wlog(profile.weight))
    return ["tc", "qdisc", "replace", "dev", ifname, "parent", "1:1", "handle", f"{RED_HANDLE >> 16:x}:", "red",
            "limit", str(int(limit_bytes)), "min", str(int(qmin)), "max", str(int(qmax)),
            "avpkt", str(avpkt), "burst", str(burst), "bandwidth", f"{int(rate_bps)}bit",
            "probability", repr(float(prob)), "ecn", "nodrop"]


def install_red(ifname: str, rate_bps: float, limit_bytes: int, profile) -> None:
    """Replace the FIFO under ``ifname``'s HTB class with RED for ``profile`` (step or red).

    Raises SetupError with tc's message if refused, or if ``tc -d -j`` reads it back without
    ``ecn``/``nodrop`` (case L2). RED's probability does not read back as written, so it is
    checked by behaviour in the tests.
    """
    run(red_argv(ifname, rate_bps, limit_bytes, profile))
    shown = json.loads(run(["tc", "-d", "-j", "qdisc", "show", "dev", ifname, "parent", "1:1"]) or "[]")
    red = [q for q in shown if q.get("kind") == "red"]
    if not red:
        raise SetupError(f"tc on {ifname}: RED did not take effect (read back {shown})")
    opts = red[0].get("options", {})
    if not red_flags_ok(opts):
        raise SetupError(f"tc on {ifname}: RED read back without ecn/nodrop: {opts}")


def red_flags_ok(opts: dict) -> bool:
    """True if ``tc -d -j`` RED options show both ``ecn`` and ``nodrop`` (iproute2 6.x prints
    them as booleans; older versions as a ``flags`` string)."""
    flags = opts.get("flags", "")
    flags = " ".join(flags) if isinstance(flags, list) else str(flags or "")
    return all(opts.get(f) is True or f in flags.split() for f in ("ecn", "nodrop"))


def install_fifo_leaf(ifname: str, fifo_kind: str, limit: int) -> None:
    """Put the port's plain FIFO back under its HTB class (a round without ECN on a RED port).

    Args:
        fifo_kind: ``bfifo`` (``limit`` in bytes) or ``pfifo`` (``limit`` in packets), as
            :attr:`PortQueue.fifo_kind` / :attr:`PortQueue.fifo_limit` give them.

    Raises SetupError with the kernel's message."""
    try:
        with IPRoute() as ipr:
            idx = _link_index(ipr, ifname)
            ipr.tc("replace", fifo_kind, idx, FIFO_HANDLE, parent=HTB_CLASS, limit=limit)
    except NetlinkError as e:
        raise SetupError(f"tc on {ifname}: kernel refused the FIFO ({e})") from None


def red_counters(ifname: str) -> dict | None:
    """RED's counters on ``ifname`` from ``tc -s -j``: marked, early (dropped early), pdrop (over limit),
    other; None if the port has no RED."""
    for q in json.loads(run(["tc", "-s", "-j", "qdisc", "show", "dev", ifname]) or "[]"):
        if q.get("kind") == "red":
            return {k: q.get(k) for k in ("marked", "early", "pdrop", "other", "drops", "packets")}
    return None


# -- priority queues and PFC pause gates (issue 6) ------------------------------------------

#: A paused gate still owns a token bucket: 8 kbit/s with a one-frame burst. pyroute2 encodes
#: slower TBF rates with a 1514-byte burst wrongly (the kernel saw 429 bytes and dropped every
#: packet), and TBF needs a burst of at least one frame. See docs/pfc-dataplane.md.
PAUSED_RATE_BPS = 8000
CLONE_NEWNET = 0x40000000
PAUSED_BURST_BYTES = 1514


def prio_class(prio: int) -> int:
    """The HTB class ``1:1p`` (minor 0x10 + prio) that holds priority ``prio``'s queue."""
    return HTB_ROOT | (0x10 + prio)


def prio_gate_handle(prio: int) -> int:
    """The handle ``(0x10+prio):`` of priority ``prio``'s TBF pause gate (its bfifo is the gate's child)."""
    return (0x10 + prio) << 16


@dataclass(frozen=True)
class PriorityQueues:
    """The egress queues of one port with a queue per priority (issue 6).

    ``htb 1:`` -> ``1:1`` (the link rate) -> ``1:1p`` per priority (strict: HTB prio 7-p with a
    token guaranteed rate, so the highest priority number is served first; weighted: guaranteed
    rates in proportion to the weights, all borrowing up to the link) -> a TBF gate at the link
    rate (closed to pause) -> its bfifo.

    Attributes:
        rate_bps: the link rate in bit/s.
        fifo_bytes: ``{prio: bfifo limit in bytes}``; its keys are the port's priorities.
        default_prio: the class of frames no classifier placed.
        weights: ``{prio: weight}`` for weighted scheduling, None for strict priority.
        burst_bytes: HTB burst and cburst (and the open gate's burst) in bytes; None: from the
            rate and the shaper's timer slack (:func:`common.units.shaper_burst_bytes`,
            :func:`controller.timers.shaper_slack_s`).
    """
    rate_bps: float
    fifo_bytes: dict
    default_prio: int = 0
    weights: dict | None = None
    burst_bytes: int | None = None

    def __post_init__(self):
        if self.burst_bytes is None:
            object.__setattr__(self, "burst_bytes", shaper_burst_bytes(self.rate_bps, shaper_slack_s()))

    def class_rate_bps(self, prio: int) -> int:
        """Guaranteed rate of priority ``prio``'s class (the rest is borrowed up to the link)."""
        if self.weights:
            return max(8000, int(self.rate_bps * self.weights[prio] / sum(self.weights.values())))
        return max(8000, int(self.rate_bps / 1000))

    def gate_burst_bytes(self) -> int:
        """The open gate's burst: :data:`OPEN_GATE_BURST_FRAMES` full frames, never below HTB's. The
        HTB classes above already hold the port to its rate, so an open gate only has to pass
        what they hand it; a TBF with a burst as small as HTB's loses tokens whenever the qdisc
        runs late (timer slack, a busy CPU). In the VM lane the default experiment's ECN round
        measured a queue median of 36 packets (K = 20) with a 2-frame gate burst, 28 with this."""
        return max(self.burst_bytes, OPEN_GATE_BURST_FRAMES * 1514)


NLMSG_ERROR = 2          # the kernel's answer to a request with NLM_F_ACK (error 0: done)

#: Burst of an open pause gate in full frames (see PriorityQueues.gate_burst_bytes).
OPEN_GATE_BURST_FRAMES = 32


def install_priority_queues(ifname: str, q: PriorityQueues, netns_pid: int | None = None) -> None:
    """Replace the root qdisc of ``ifname`` with the tree of :class:`PriorityQueues`.

    Raises:
        SetupError: the interface is missing, the kernel refused a qdisc or class, or the
            read-back lacks one of them.
    """
    rate = int(round(q.rate_bps))
    try:
        with _ipr(netns_pid) as ipr:
            idx = _link_index(ipr, ifname)
            ipr.tc("replace", "htb", idx, HTB_ROOT, default=0x10 + q.default_prio)
            ipr.tc("replace-class", "htb", idx, HTB_CLASS, parent=HTB_ROOT, rate=f"{rate}bit", ceil=f"{rate}bit",
                   burst=q.burst_bytes, cburst=q.burst_bytes)
            for prio, limit in sorted(q.fifo_bytes.items()):
                ipr.tc("replace-class", "htb", idx, prio_class(prio), parent=HTB_CLASS,
                       rate=f"{q.class_rate_bps(prio)}bit", ceil=f"{rate}bit", burst=q.burst_bytes,
                       cburst=q.burst_bytes, prio=0 if q.weights else 7 - prio)
                ipr.tc("replace", "tbf", idx, prio_gate_handle(prio), parent=prio_class(prio), rate=f"{rate}bit",
                       burst=q.gate_burst_bytes(), limit=int(limit))
            kinds = {(m["parent"], m.get_attr("TCA_KIND")) for m in ipr.get_qdiscs(index=idx)}
    except NetlinkError as e:
        raise SetupError(f"tc on {ifname}: kernel refused ({e.code}: {e.args[1] if len(e.args) > 1 else e})") from None
    missing = [p for p in q.fifo_bytes if (prio_class(p), "tbf") not in kinds]
    if (0xFFFFFFFF, "htb") not in kinds or missing:
        raise SetupError(f"tc on {ifname}: read-back shows {sorted(kinds)}; no gate for priorities {missing}")


class PauseGates:
    """Closes and opens the TBF pause gates of one port (the upstream transmitter of a link).

    Holds a netlink socket in the port's namespace and a packet socket for the kick: a TBF gate
    that reopens does not make the port's qdisc run (its watchdog was armed at the paused rate:
    the first held frame left 0.79 s later), so each resume enqueues one 60-byte PFC frame with
    pause time 0 (MAC Control; the peer drops it) on the port, which runs the qdisc at once.

    The change messages are encoded once per (priority, rate, burst, limit) and sent on a raw
    netlink socket: a change costs ~4 us that way, against ~0.26 ms through pyroute2's request
    path (measured on a veth here, median of 300), whose encoding runs under the interpreter
    lock: during an incast's burst of XOFFs the gate threads queued behind each other for it
    (gate change p99 7.2 ms).

    Raises (all methods): SetupError with the kernel's message.
    """

    def __init__(self, ifname: str, q: PriorityQueues, netns_pid: int | None = None, kick_frame: bytes = b""):
        self.ifname, self.q, self.kick_frame = ifname, q, kick_frame
        self.limits = dict(q.fifo_bytes)
        self.closed: set[int] = set()
        with _ipr(netns_pid) as ipr:
            self.idx = _link_index(ipr, ifname, "pause gate")
        self.sock = None
        self.nl = in_netns(netns_pid, lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW,
                                                               socket.NETLINK_ROUTE))
        self.nl.bind((0, 0))
        self._msgs: dict[tuple, bytes] = {}
        self._seq = 0
        self._lock = threading.RLock()   # the pauser and the port's gate thread both change gates
        if kick_frame:
            self.sock = in_netns(netns_pid, lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))
            self.sock.bind((ifname, 0))
            self.sock.setblocking(False)

    def _message(self, prio: int, rate_bps: int, burst_bytes: int, limit_bytes: int) -> bytes:
        """The RTM_NEWQDISC change of ``prio``'s TBF gate, encoded by pyroute2 once and kept."""
        key = (prio, rate_bps, burst_bytes, limit_bytes)
        if key not in self._msgs:
            msg = tcmsg.tcmsg()
            msg["index"], msg["handle"], msg["parent"] = self.idx, prio_gate_handle(prio), prio_class(prio)
            opts = tcmsg.plugins["tbf"].get_parameters({"rate": f"{rate_bps}bit", "burst": burst_bytes, "limit": limit_bytes})
            msg["attrs"] = [["TCA_KIND", "tbf"], ["TCA_OPTIONS", opts]]
            msg["header"]["type"] = RTM_NEWQDISC
            msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK
            msg.encode()
            self._msgs[key] = bytes(msg.data)
        return self._msgs[key]

    def _set(self, prio: int, rate_bps: int, burst_bytes: int) -> None:
        with self._lock:      # the pauser and the port's gate thread share the socket: one request at a time
            msg = bytearray(self._message(prio, rate_bps, burst_bytes, int(self.limits[prio])))
            self._seq += 1
            struct.pack_into("=I", msg, 8, self._seq)              # nlmsghdr.nlmsg_seq
            try:
                self.nl.send(msg)
                while True:
                    reply = self.nl.recv(65536)
                    kind, seq = struct.unpack_from("=H", reply, 4)[0], struct.unpack_from("=I", reply, 8)[0]
                    if kind == NLMSG_ERROR and seq == self._seq:
                        break
            except OSError as e:
                raise SetupError(f"pause gate {self.ifname} priority {prio}: netlink: {e}") from None
        err = -struct.unpack_from("=i", reply, 16)[0]
        if err:
            raise SetupError(f"pause gate {self.ifname} priority {prio}: kernel refused ({err}: "
                             f"{os.strerror(err)})")

    def close_gate(self, prio: int) -> None:
        """Pause ``prio``: its packets wait in its bfifo (at most the frame already granted leaves)."""
        with self._lock:
            self._set(prio, PAUSED_RATE_BPS, PAUSED_BURST_BYTES)
            self.closed.add(prio)

    def set_limit(self, prio: int, limit_bytes: int) -> None:
        """Change ``prio``'s FIFO limit, keeping the gate as it is (TBF passes a change's limit to its FIFO)."""
        with self._lock:
            self.limits[prio] = int(limit_bytes)
            if prio in self.closed:
                self._set(prio, PAUSED_RATE_BPS, PAUSED_BURST_BYTES)
            else:
                self._set(prio, int(round(self.q.rate_bps)), self.q.gate_burst_bytes())

    def open_gate(self, prio: int) -> None:
        """Resume ``prio`` at the link rate and make the port's qdisc run now."""
        with self._lock:
            self._set(prio, int(round(self.q.rate_bps)), self.q.gate_burst_bytes())
            self.closed.discard(prio)
        if self.sock is not None:
            try:
                self.sock.send(self.kick_frame)
            except OSError:
                pass   # a full lossy queue: it is running anyway

    def close(self) -> None:
        """Close the sockets (the gates keep their state)."""
        self.nl.close()
        if self.sock is not None:
            self.sock.close()


def in_netns(netns_pid: int | None, make):
    """Call ``make()`` with this thread in the network namespace of ``netns_pid`` (None: as it is)
    and return what it returns: sockets keep the namespace they were created in. The thread
    returns to its own namespace after.

    Raises:
        SetupError: the namespace could not be entered (the process is gone, no permission).
    """
    if netns_pid is None:
        return make()
    libc = ctypes.CDLL(None, use_errno=True)    # os.setns arrives with Python 3.12

    def setns(fd):
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise SetupError(f"setns into the namespace of pid {netns_pid}: {os.strerror(ctypes.get_errno())}")
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(f"/proc/{netns_pid}/ns/net", os.O_RDONLY)
        try:
            setns(target)
            try:
                return make()
            finally:
                setns(own)
        finally:
            os.close(target)
    finally:
        os.close(own)


#: tc parents of a clsact qdisc's two hooks.
CLSACT_EGRESS, CLSACT_INGRESS = "ffff:fff3", "ffff:fff2"


def attach_bpf_classifier(ifname: str, prog_fd: int, name: str, pref: int, ingress: bool = False,
                          netns_pid: int | None = None) -> None:
    """Attach a loaded direct-action BPF classifier (``prog_fd``) to ``ifname``'s egress (or ingress)
    hook at tc preference ``pref`` (lower runs first), adding the clsact qdisc if it is missing.

    Raises:
        SetupError: the interface is missing or tc refused the filter (the kernel's message).
    """
    try:
        with _ipr(netns_pid) as ipr:
            idx = _link_index(ipr, ifname)
            if "clsact" not in {m.get_attr("TCA_KIND") for m in ipr.get_qdiscs(index=idx)}:
                ipr.tc("add", "clsact", idx)
            ipr.tc("add-filter", "bpf", idx, ":1", fd=prog_fd, name=name,
                   parent=CLSACT_INGRESS if ingress else CLSACT_EGRESS, classid=1, direct_action=True, prio=pref)
    except NetlinkError as e:
        raise SetupError(f"tc refused the BPF filter {name} on {ifname}: {e}") from None


# --- faults: a port's shaping rate, its link state, its counters -------------------------------

@dataclass(frozen=True)
class HtbClass:
    """An HTB class's parameters as the kernel holds them (``TCA_HTB_PARMS``).

    Attributes:
        rate_bps, ceil_bps: guaranteed and ceiling rates in bit/s.
        buffer_ticks, cbuffer_ticks: burst and cburst as the kernel stores them (psched ticks).
        burst_bytes, cburst_bytes: the bursts in bytes that give those ticks at those rates.
        quantum: bytes per round among siblings; prio: the class's priority.
    """
    rate_bps: int
    ceil_bps: int
    buffer_ticks: int
    cbuffer_ticks: int
    burst_bytes: int
    cburst_bytes: int
    quantum: int
    prio: int


def _burst_for_ticks(rate_bps: int, ticks: int) -> int:
    """The burst in bytes that pyroute2's HTB encoder turns into exactly ``ticks`` at ``rate_bps``
    (its ``calc_xmittime`` truncates: the inverse is searched near the real quotient)."""
    rate_Bps = rate_bps / 8
    guess = max(1, round(ticks * 1_000_000 / max(1, calc_xmittime(rate_Bps, 1_000_000))))
    for b in sorted(range(max(1, guess - 64), guess + 64), key=lambda b: abs(b - guess)):
        if calc_xmittime(rate_Bps, b) == ticks:
            return b
    return guess


def htb_class(ifname: str, netns_pid: int | None = None, classid: int = HTB_CLASS) -> HtbClass:
    """The parameters of ``ifname``'s HTB class ``classid`` (default ``1:1``, every shaped port's
    link-rate class).

    Raises:
        SetupError: the interface or the class is missing.
    """
    try:
        with _ipr(netns_pid) as ipr:
            idx = _link_index(ipr, ifname)
            for m in ipr.get_classes(index=idx):
                if m["handle"] == classid and m.get_attr("TCA_KIND") == "htb":
                    p = m.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS")
                    rate64 = m.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_RATE64")
                    ceil64 = m.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_CEIL64")
                    rate = (rate64 or p["rate"]) * 8
                    ceil = (ceil64 or p["ceil"]) * 8
                    return HtbClass(rate, ceil, p["buffer"], p["cbuffer"], _burst_for_ticks(rate, p["buffer"]),
                                    _burst_for_ticks(ceil, p["cbuffer"]), p["quantum"], p["prio"])
    except NetlinkError as e:
        raise SetupError(f"tc on {ifname}: cannot read its classes ({e})") from None
    raise SetupError(f"tc on {ifname}: no HTB class {_tc_handle(classid)} (is the port shaped?)")


def set_htb_class(ifname: str, cls: HtbClass, netns_pid: int | None = None, classid: int = HTB_CLASS,
                  parent: int = HTB_ROOT) -> HtbClass:
    """Change ``ifname``'s HTB class ``classid`` to ``cls`` (rate, ceil, bursts, quantum, prio);
    returns the class as the kernel holds it afterwards.

    Raises:
        SetupError: the interface is missing or the kernel refused the change (its message).
    """
    try:
        with _ipr(netns_pid) as ipr:
            idx = _link_index(ipr, ifname)
            ipr.tc("change-class", "htb", idx, classid, parent=parent, rate=f"{cls.rate_bps}bit",
                   ceil=f"{cls.ceil_bps}bit", burst=cls.burst_bytes, cburst=cls.cburst_bytes,
                   quantum=cls.quantum, prio=cls.prio)
    except NetlinkError as e:
        raise SetupError(f"tc on {ifname}: kernel refused the class change ({e})") from None
    return htb_class(ifname, netns_pid, classid)


def set_link_up(ifname: str, up: bool, netns_pid: int | None = None) -> None:
    """Set ``ifname`` administratively up or down (``ip link set dev IF up|down``). A veth's peer
    loses its carrier while it is down.

    Raises:
        SetupError: the interface is missing or the kernel refused.
    """
    try:
        with _ipr(netns_pid) as ipr:
            ipr.link("set", index=_link_index(ipr, ifname, "link"), state="up" if up else "down")
    except NetlinkError as e:
        raise SetupError(f"link {ifname}: kernel refused to set it {'up' if up else 'down'} ({e})") from None


#: The link statistics a port counter reads (struct rtnl_link_stats64's names).
LINK_STATS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_errors", "tx_errors", "rx_dropped",
              "tx_dropped")


def link_counters(names: set[str] | None = None, netns_pid: int | None = None) -> dict[str, dict]:
    """Every interface's (or those in ``names``) counters and state in one netlink dump:
    ``{ifname: {"index", "operstate", "up" (administratively), "carrier", "carrier_changes" (the
    kernel's count of carrier transitions), and LINK_STATS}}``.

    Raises:
        SetupError: the namespace cannot be read.
    """
    out: dict[str, dict] = {}
    try:
        with _ipr(netns_pid) as ipr:
            for m in ipr.get_links():
                name = m.get_attr("IFLA_IFNAME")
                if names is not None and name not in names:
                    continue
                st = m.get_attr("IFLA_STATS64") or m.get_attr("IFLA_STATS") or {}
                out[name] = {"index": m["index"], "operstate": m.get_attr("IFLA_OPERSTATE"),
                             "up": bool(m["flags"] & 1), "carrier": bool(m.get_attr("IFLA_CARRIER")),
                             "carrier_changes": int(m.get_attr("IFLA_CARRIER_CHANGES") or 0),
                             **{k: int(st.get(k, 0)) for k in LINK_STATS}}
    except NetlinkError as e:
        raise SetupError(f"link counters: {e}") from None
    return out


def _index_names(ipr: IPRoute) -> dict[int, str]:
    """``{ifindex: ifname}`` of every interface in ``ipr``'s namespace."""
    return {m["index"]: m.get_attr("IFLA_IFNAME") for m in ipr.get_links()}


def root_qdisc_stats(names: set[str] | None = None, netns_pid: int | None = None) -> dict[str, dict]:
    """Each interface's root qdisc (or those of ``names``): ``{ifname: {"kind", "drops", "backlog_bytes",
    "backlog_packets", "packets", "bytes"}}`` in one dump (the root HTB's drops count its leaves').

    Raises:
        SetupError: the namespace cannot be read.
    """
    out: dict[str, dict] = {}
    try:
        with _ipr(netns_pid) as ipr:
            index_name = _index_names(ipr)
            for m in ipr.get_qdiscs():
                name = index_name.get(m["index"])
                if m["parent"] != 0xFFFFFFFF or name is None or (names is not None and name not in names):
                    continue
                st = m.get_attr("TCA_STATS2")
                basic = st.get_attr("TCA_STATS_BASIC") if st else None
                queue = st.get_attr("TCA_STATS_QUEUE") if st else None
                out[name] = {"kind": m.get_attr("TCA_KIND"), "drops": int(queue["drops"]) if queue else 0,
                             "backlog_bytes": int(queue["backlog"]) if queue else 0,
                             "backlog_packets": int(queue["qlen"]) if queue else 0,
                             "packets": int(basic["packets"]) if basic else 0,
                             "bytes": int(basic["bytes"]) if basic else 0}
    except NetlinkError as e:
        raise SetupError(f"qdisc counters: {e}") from None
    return out


def htb_ceilings_mbps(names: set[str], netns_pid: int | None = None, classid: int = HTB_CLASS) -> dict[str, float]:
    """``{ifname: ceiling of its HTB class classid in Mbit/s}`` for the interfaces in ``names``
    that have one (one class dump per interface, one socket for all).

    Raises:
        SetupError: the namespace cannot be read.
    """
    out: dict[str, float] = {}
    try:
        with _ipr(netns_pid) as ipr:
            for idx, name in _index_names(ipr).items():
                if name not in names:
                    continue
                for m in ipr.get_classes(index=idx):
                    if m["handle"] == classid and m.get_attr("TCA_KIND") == "htb":
                        opts = m.get_attr("TCA_OPTIONS")
                        ceil = opts.get_attr("TCA_HTB_CEIL64") or opts.get_attr("TCA_HTB_PARMS")["ceil"]
                        out[name] = ceil * 8 / 1e6
    except NetlinkError as e:
        raise SetupError(f"class rates: {e}") from None
    return out


# --- the intended data plane, verified and put back before each round -----------------------

#: rtnetlink message types and attributes a port's tree is read with (linux/rtnetlink.h, pkt_sched.h).
RTM_GETQDISC, RTM_GETTCLASS = 38, 42
NLM_F_DUMP_REQUEST = NLM_F_REQUEST | 0x300
NLMSG_DONE = 3
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_HTB_PARMS, TCA_HTB_RATE64, TCA_HTB_CEIL64 = 1, 6, 7
_NLMSG = struct.Struct("=IHHII")         # struct nlmsghdr
_TCMSG = struct.Struct("=BxxxiIII")      # struct tcmsg: family, ifindex, handle, parent, info
_RTA = struct.Struct("=HH")              # struct rtattr


def _attrs(buf: bytes, off: int, end: int) -> dict[int, bytes]:
    """The rtattrs in ``buf[off:end]``: ``{type: payload}`` (the nested flag masked off)."""
    out = {}
    while off + 4 <= end:
        length, kind = _RTA.unpack_from(buf, off)
        if length < 4:
            break
        out[kind & 0x3FFF] = buf[off + 4:off + length]
        off += (length + 3) & ~3
    return out


class PortTrees:
    """Reads every qdisc and HTB class of the named interfaces as :mod:`controller.porttree` nodes
    (a FIFO with its limit, an HTB class with its rate and ceiling): calling it returns ``{ifname:
    sorted nodes}``, an interface that is gone mapping to ``()``. One raw netlink socket per
    namespace, opened once with the interfaces' indexes; a call is one qdisc dump per namespace
    and one class dump per interface with an HTB root (the kernel dumps classes per device
    only), decoding only the kind, the handles and those few options: pyroute2 decoding every
    attribute of a Fat-Tree k=4's 96 ports and 16 namespaces took 360-530 ms a reading here
    (``bench/bench_restore.py`` measures this one).

    Args:
        namespaces: ``{netns_pid or None (the root namespace): [ifname, ...]}``.

    Raises:
        SetupError: a namespace could not be entered, or the kernel refused a dump.
    """

    def __init__(self, namespaces: dict[int | None, list[str]]):
        self._ns: list[tuple[socket.socket, dict[int, str]]] = []
        self.ifnames = [n for names in namespaces.values() for n in names]
        try:
            for pid, names in namespaces.items():
                sock = in_netns(pid, lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE))
                self._ns.append((sock, {}))
                sock.bind((0, 0))
                for n in names:
                    try:
                        self._ns[-1][1][in_netns(pid, lambda n=n: socket.if_nametoindex(n))] = n
                    except OSError:
                        pass          # gone: it reads as ()
        except OSError as e:
            self.close()
            raise SetupError(f"tc: cannot read a namespace's qdiscs ({e})") from None
        self._seq = 0

    def _dump(self, sock: socket.socket, kind: int, ifindex: int = 0):
        """Yield ``(tcmsg fields, attrs)`` of one dump request."""
        self._seq += 1
        sock.send(_NLMSG.pack(_NLMSG.size + _TCMSG.size, kind, NLM_F_DUMP_REQUEST, self._seq, 0)
                  + _TCMSG.pack(0, ifindex, 0, 0, 0))
        while True:
            buf = sock.recv(1 << 16)
            off = 0
            while off + _NLMSG.size <= len(buf):
                length, mtype, _flags, seq, _pid = _NLMSG.unpack_from(buf, off)
                if length < _NLMSG.size:
                    return
                if seq == self._seq:
                    if mtype == NLMSG_DONE:
                        return
                    if mtype == NLMSG_ERROR:
                        err = -struct.unpack_from("=i", buf, off + _NLMSG.size)[0]
                        if err:
                            raise SetupError(f"tc: dump refused ({err}: {os.strerror(err)})")
                        return
                    tc = _TCMSG.unpack_from(buf, off + _NLMSG.size)
                    yield tc, _attrs(buf, off + _NLMSG.size + _TCMSG.size, off + length)
                off += (length + 3) & ~3

    def __call__(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {n: [] for n in self.ifnames}
        try:
            for sock, names in self._ns:
                htb = []
                for (_fam, idx, handle, parent, _info), at in self._dump(sock, RTM_GETQDISC):
                    name = names.get(idx)
                    if name is None:
                        continue
                    kind = at.get(TCA_KIND, b"").rstrip(b"\0").decode()
                    opts = at.get(TCA_OPTIONS)
                    limit = struct.unpack_from("=I", opts)[0] if kind in porttree.FIFO_KINDS and opts else None
                    out[name].append(porttree.qdisc_node(kind, _tc_handle(handle), _tc_handle(parent), limit))
                    if kind == "htb":
                        htb.append(idx)
                for idx in htb:
                    for (_fam, _i, handle, parent, _info), at in self._dump(sock, RTM_GETTCLASS, idx):
                        if at.get(TCA_KIND, b"").rstrip(b"\0") != b"htb" or TCA_OPTIONS not in at:
                            continue
                        o = _attrs(at[TCA_OPTIONS], 0, len(at[TCA_OPTIONS]))
                        parms = o.get(TCA_HTB_PARMS, b"")
                        if len(parms) < 24:
                            continue
                        rate = struct.unpack_from("=Q", o[TCA_HTB_RATE64])[0] if TCA_HTB_RATE64 in o else \
                            struct.unpack_from("=I", parms, 8)[0]          # tc_ratespec.rate, bytes/s
                        ceil = struct.unpack_from("=Q", o[TCA_HTB_CEIL64])[0] if TCA_HTB_CEIL64 in o else \
                            struct.unpack_from("=I", parms, 20)[0]
                        out[names[idx]].append(porttree.class_node("htb", _tc_handle(handle), _tc_handle(parent),
                                                                   rate * 8, ceil * 8))
        except OSError as e:
            raise SetupError(f"tc: qdisc dump failed ({e})") from None
        return {n: tuple(sorted(v)) for n, v in out.items()}

    def close(self) -> None:
        """Close the sockets (idempotent)."""
        for sock, _ in self._ns:
            sock.close()
        self._ns = []


def port_trees(namespaces: dict[int | None, list[str]]) -> dict[str, tuple[str, ...]]:
    """One reading of :class:`PortTrees` (sockets opened and closed around it)."""
    trees = PortTrees(namespaces)
    try:
        return trees()
    finally:
        trees.close()


def delete_port_qdiscs(ifname: str, netns_pid: int | None = None, root: bool = True, hooks: bool = False) -> None:
    """Delete ``ifname``'s root qdisc (with every class and qdisc under it; the kernel puts its
    default back) and, with ``hooks``, its clsact/ingress qdisc (with every filter on it). A qdisc
    that is not there is no error.

    Raises:
        SetupError: the interface is missing or the kernel refused (its message).
    """
    try:
        with _ipr(netns_pid) as ipr:
            idx = _link_index(ipr, ifname)
            present = {(m["parent"], m.get_attr("TCA_KIND")) for m in ipr.get_qdiscs(index=idx)}
            for parent, kind in sorted(present):
                if (root and parent == 0xFFFFFFFF and kind != "noqueue") or (hooks and kind in porttree.HOOK_KINDS):
                    ipr.tc("del", kind, idx, parent=parent)
    except NetlinkError as e:
        raise SetupError(f"tc on {ifname}: kernel refused to delete its qdiscs ({e})") from None


#: The Open vSwitch columns that make it install qdiscs on a port of its own accord: a port's QoS
#: (egress queues: it replaces the root qdisc) and an interface's ingress policing (an ingress
#: qdisc with a policer). fabriclab sets neither.
OVS_QOS_COLUMNS = ("qos", "ingress_policing_rate", "ingress_policing_burst")


def ovs_port_qos(names: list[str]) -> dict[str, dict]:
    """What Open vSwitch is asked to do to the queues of the named ports, in one ovs-vsctl call:
    ``{port: {"qos": QoS row uuid or None, "queues": {queue id: Queue uuid} of that QoS,
    "ingress_policing_rate": kbit/s, "ingress_policing_burst": kbit}}`` (ports it does not know
    are absent).

    Raises:
        SetupError: ovs-vsctl failed.
    """
    text = run(["ovs-vsctl", "--timeout=5", "--format=json", "--columns=name,qos", "list", "Port",
                "--", "--columns=name,ingress_policing_rate,ingress_policing_burst", "list", "Interface",
                "--", "--columns=_uuid,queues", "list", "QoS"])
    out = [json.loads(line) for line in text.splitlines() if line.strip()]   # one table per line
    ports, ifaces, qos = (t.get("data", []) for t in out)
    queues = {row[0][1]: {k: v[1] for k, v in row[1][1]} for row in qos}
    wanted = set(names)
    res = {}
    for name, q in ports:
        if name in wanted:
            uuid = q[1] if isinstance(q, list) and q[0] == "uuid" else None
            res[name] = {"qos": uuid, "queues": queues.get(uuid, {}) if uuid else {},
                         "ingress_policing_rate": 0, "ingress_policing_burst": 0}
    for name, rate, burst in ifaces:
        if name in res:
            res[name].update(ingress_policing_rate=int(rate), ingress_policing_burst=int(burst))
    return res


def ovs_clear_qos(names: list[str]) -> None:
    """Take the named ports' QoS away and their interfaces' ingress policing off, in one
    transaction (ovs-vsctl waits until ovs-vswitchd has applied it: it removes the qdiscs it
    installed). The QoS and Queue rows themselves stay in the database, unreferenced.

    Raises:
        SetupError: ovs-vsctl failed.
    """
    if not names:
        return
    argv = ["ovs-vsctl", "--timeout=10"]
    for n in names:
        argv += ["--", "clear", "Port", n, "qos", "--", "set", "Interface", n, "ingress_policing_rate=0",
                 "ingress_policing_burst=0"]
    run(argv, timeout_s=20)


def _flows_file(flows: list[str]) -> str:
    """A temporary file holding ``flows``, one per line; the caller removes it."""
    f = tempfile.NamedTemporaryFile("w", prefix="fabriclab-flows-", suffix=".txt", delete=False)
    f.write("\n".join(flows) + "\n")
    f.close()
    return f.name


def ovs_flow_differences(bridge: str, flows: list[str]) -> list[str]:
    """How ``bridge``'s flow tables differ from ``flows`` (ovs-ofctl lines, OpenFlow 1.3): the lines
    of ``ovs-ofctl diff-flows`` (``-`` an intended entry missing or changed, ``+`` one found that is
    not intended); empty when they are the same.

    Raises:
        SetupError: ovs-ofctl failed (no such bridge, a line it cannot parse).
    """
    path = _flows_file(flows)
    try:
        p = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "diff-flows", path, bridge],
                           capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        raise SetupError(f"ovs-ofctl diff-flows {bridge}: timed out after 10 s") from None
    finally:
        os.unlink(path)
    if p.returncode not in (0, 2):
        raise SetupError(f"ovs-ofctl diff-flows {bridge} exited {p.returncode}: {p.stderr.strip()}")
    return [line for line in p.stdout.splitlines() if line.strip()]


def ovs_replace_flows(bridge: str, flows: list[str]) -> None:
    """Make ``bridge``'s flow tables exactly ``flows`` (``ovs-ofctl replace-flows``: only the
    entries that differ are added, changed or deleted; OpenFlow 1.3).

    Raises:
        SetupError: ovs-ofctl failed.
    """
    path = _flows_file(flows)
    try:
        run(["ovs-ofctl", "-O", "OpenFlow13", "replace-flows", bridge, path])
    finally:
        os.unlink(path)


#: Where ovs-vswitchd listens for OpenFlow on each bridge (``ovs-ofctl`` connects there too).
OVS_RUNDIRS = ("/var/run/openvswitch", "/run/openvswitch")
_OFP = struct.Struct("!BBHI")            # struct ofp_header: version, type, length, xid
OFP13, OFPT_HELLO, OFPT_MULTIPART_REQUEST, OFPT_MULTIPART_REPLY, OFPMP_FLOW = 4, 0, 18, 19, 1


def ovs_flow_fingerprint(bridge: str, timeout_s: float = 5.0) -> bytes:
    """A fingerprint of ``bridge``'s flow tables: every entry of an OpenFlow 1.3 flow-stats reply
    (on the bridge's management socket, as ``ovs-ofctl`` talks to it) with its age and counters
    zeroed, sorted and concatenated. Equal fingerprints: the same entries (match, priority,
    timeouts, flags, cookie, instructions). About a millisecond per bridge, against ~6 ms for an
    ``ovs-ofctl`` process: a round's check compares it with the fingerprint of the tables last
    verified against the plan, and only reads them with ``ovs-ofctl diff-flows`` when it differs.

    Raises:
        SetupError: no management socket, a refused or malformed exchange, or a timeout.
    """
    path = next((f"{d}/{bridge}.mgmt" for d in OVS_RUNDIRS if os.path.exists(f"{d}/{bridge}.mgmt")), None)
    if path is None:
        raise SetupError(f"Open vSwitch bridge {bridge}: no management socket in {' or '.join(OVS_RUNDIRS)}")
    entries = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(path)
            body = struct.pack("!HH4xB3xII4xQQHH4x", OFPMP_FLOW, 0, 0xFF, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0, 1, 4)
            s.sendall(_OFP.pack(OFP13, OFPT_HELLO, 8, 1)
                      + _OFP.pack(OFP13, OFPT_MULTIPART_REQUEST, _OFP.size + len(body), 2) + body)
            buf = b""
            while True:
                while len(buf) < 8 or len(buf) < _OFP.unpack_from(buf)[2]:
                    chunk = s.recv(1 << 16)
                    if not chunk:
                        raise SetupError(f"Open vSwitch bridge {bridge}: connection closed during the flow dump")
                    buf += chunk
                version, mtype, length, xid = _OFP.unpack_from(buf)
                msg, buf = buf[:length], buf[length:]
                if mtype == 1:                                   # OFPT_ERROR
                    raise SetupError(f"Open vSwitch bridge {bridge}: OpenFlow error answering the flow dump "
                                     f"(type {struct.unpack_from('!H', msg, 8)[0]})")
                if mtype != OFPT_MULTIPART_REPLY or xid != 2:
                    continue
                _kind, flags = struct.unpack_from("!HH", msg, 8)
                off = 16
                while off + 2 <= len(msg):
                    n = struct.unpack_from("!H", msg, off)[0]
                    if n < 56:
                        raise SetupError(f"Open vSwitch bridge {bridge}: malformed flow-stats entry")
                    e = bytearray(msg[off:off + n])
                    e[4:12] = bytes(8)                           # duration_sec, duration_nsec
                    e[32:48] = bytes(16)                         # packet_count, byte_count
                    entries.append(bytes(e))
                    off += n
                if not flags & 1:                                # OFPMPF_REPLY_MORE
                    break
    except OSError as e:
        raise SetupError(f"Open vSwitch bridge {bridge}: flow dump failed ({e})") from None
    return b"".join(sorted(entries))
