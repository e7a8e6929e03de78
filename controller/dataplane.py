"""Every data-plane configuration call of fabriclab: tc (via pyroute2
netlink), ethtool offloads, sysctls in host namespaces and OVS commands.

Errors are raised as :class:`common.errors.SetupError` carrying the kernel's
or the tool's own message, never printed and ignored (cases L1, L2).
Commands are argv lists built from validated values.
"""
from __future__ import annotations

import os
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


def _on_ovs_tx_socket(fn):
    """Call ``fn(sock)`` on a duplicate (pidfd_getfd) of ovs-vswitchd's transmit socket."""
    import ctypes
    import socket
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
    import socket

    def apply(s):
        s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, max(1, size_bytes // 2))
        return s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    return _on_ovs_tx_socket(apply)


class OvsTxBuffer:
    """Context manager: give ovs-vswitchd's shared transmit socket at least ``min_bytes`` of send buffer.

    Args:
        min_bytes: the send buffer needed: every switch port's FIFO full at
            once, in skb truesize (ports x buffer_packets x FRAME_TRUESIZE_BYTES).
        state: a common.state.RunState; the original size is recorded there
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
        import socket
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
    import math
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
    import json as _json
    run(red_argv(ifname, rate_bps, limit_bytes, profile))
    shown = _json.loads(run(["tc", "-d", "-j", "qdisc", "show", "dev", ifname, "parent", "1:1"]) or "[]")
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
            idx = ipr.link_lookup(ifname=ifname)
            if not idx:
                raise SetupError(f"tc: no interface {ifname!r}")
            ipr.tc("replace", fifo_kind, idx[0], FIFO_HANDLE, parent=HTB_CLASS, limit=limit)
    except NetlinkError as e:
        raise SetupError(f"tc on {ifname}: kernel refused the FIFO ({e})") from None


def red_counters(ifname: str) -> dict | None:
    """RED's counters on ``ifname`` from ``tc -s -j``: marked, early (dropped early), pdrop (over limit),
    other; None if the port has no RED."""
    import json as _json
    for q in _json.loads(run(["tc", "-s", "-j", "qdisc", "show", "dev", ifname]) or "[]"):
        if q.get("kind") == "red":
            return {k: q.get(k) for k in ("marked", "early", "pdrop", "other", "drops", "packets")}
    return None
