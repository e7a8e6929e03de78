"""Open vSwitch: bridges, ``ofproto/trace``, interface drop counters, ovs-vswitchd's transmit
socket, QoS rows and a switch's OpenFlow table read back (fingerprint and differences).

Everything here is Open vSwitch's own; the switch-facing seam that chooses a datapath is
:mod:`controller.datapaths`. Errors are raised as :class:`common.errors.SetupError` carrying the
tool's own message.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import socket
import struct
import subprocess
import tempfile

from common.errors import SetupError
from controller.dataplane.hostknobs import expedited_rcu
from controller.dataplane.netlink import run


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


SO_SNDBUFFORCE = 32


SYS_PIDFD_GETFD = 438  # x86_64 and aarch64 (asm-generic) syscall number




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
            once, in skb truesize (ports x buffer_packets x common.units.FRAME_TRUESIZE_BYTES).
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
