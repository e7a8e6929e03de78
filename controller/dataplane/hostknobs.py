"""Kernel knobs of the machine and of each host namespace: sysctls, a route's minimum RTO,
timer frequency, GSO and checksum offloads, IPv6 off, expedited RCU, link state, and the
fabric's root-namespace links (found and deleted by their recorded group).

Errors are raised as :class:`common.errors.SetupError` carrying the kernel's or the tool's own
message (cases L1, L2).
"""
from __future__ import annotations

import gzip
import os
import socket
from contextlib import contextmanager

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from common.errors import SetupError
from controller.dataplane.netlink import in_netns, ipr_entered, ipr_in, link_index, run


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
        with ipr_entered(netns_pid) as ipr:             # this thread only: no helper process
            idx = link_index(ipr, ifname, "route")
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
    with ipr_in(netns_pid) as ipr:
        return ipr.get_links(link_index(ipr, ifname, "gso_max_segs"))[0].get_attr("IFLA_GSO_MAX_SEGS")


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
    # kept as ethtool: a second reading, independent of portsetup's own ioctl (ETHTOOL_SFEATURES) code
    out = run(["ethtool", "-k", ifname], netns_pid)
    state = {}
    for line in out.splitlines():
        key, _, val = line.partition(":")
        for short, long in names.items():
            if key.strip() == long:
                state[short] = val.strip().startswith("on")
    return state


def _sysctl_path(key: str) -> str:
    """The /proc/sys file of sysctl ``key`` (``net.ipv4.tcp_ecn`` -> ``/proc/sys/net/ipv4/tcp_ecn``)."""
    return "/proc/sys/" + key.replace(".", "/")


def set_sysctls(values: dict[str, str], netns_pid: int | None = None) -> dict[str, str]:
    """Set sysctls ``{key: value}`` and read each back, inside the network namespace of ``netns_pid``
    if given (per-namespace keys; case H1). Written through /proc/sys from this thread in that
    namespace, which the kernel resolves per namespace: no process per key (a ``sysctl`` per key
    and namespace took about 7 ms, half a second a round on eight hosts).

    Returns: ``{key: value read back}`` (whitespace-trimmed text, as ``sysctl -n`` prints it).

    Raises:
        SetupError: no such key, or the kernel refused the value; the message names the key, the
            value and the kernel's reason.
    """
    def apply() -> dict[str, str]:
        got = {}
        for key, value in values.items():
            try:
                with open(_sysctl_path(key), "w") as f:
                    f.write(str(value))
                with open(_sysctl_path(key)) as f:
                    got[key] = " ".join(f.read().split())
            except OSError as e:
                where = f" in the namespace of pid {netns_pid}" if netns_pid is not None else ""
                raise SetupError(f"sysctl {key}={value}{where}: {e.strerror}") from None
        return got
    return in_netns(netns_pid, apply)


def set_sysctl(key: str, value: str, netns_pid: int | None = None) -> None:
    """Set one sysctl, inside the namespace of ``netns_pid`` if given (:func:`set_sysctls`).

    Raises SetupError naming the key if the kernel refuses.
    """
    set_sysctls({key: value}, netns_pid)


def get_sysctl(key: str, netns_pid: int | None = None) -> str:
    """Read a sysctl, inside the namespace of ``netns_pid`` if given (whitespace-trimmed text).

    Raises SetupError naming the key when there is no such key.
    """
    def read() -> str:
        try:
            with open(_sysctl_path(key)) as f:
                return " ".join(f.read().split())
        except OSError as e:
            raise SetupError(f"sysctl {key}: {e.strerror}") from None
    return in_netns(netns_pid, read)


def root_links() -> set[str]:
    """Names of all interfaces in the root network namespace."""
    with IPRoute() as ipr:
        return {l.get_attr("IFLA_IFNAME") for l in ipr.get_links()}


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


def set_link_up(ifname: str, up: bool, netns_pid: int | None = None) -> None:
    """Set ``ifname`` administratively up or down (``ip link set dev IF up|down``). A veth's peer
    loses its carrier while it is down.

    Raises:
        SetupError: the interface is missing or the kernel refused.
    """
    try:
        with ipr_in(netns_pid) as ipr:
            ipr.link("set", index=link_index(ipr, ifname, "link"), state="up" if up else "down")
    except NetlinkError as e:
        raise SetupError(f"link {ifname}: kernel refused to set it {'up' if up else 'down'} ({e})") from None
