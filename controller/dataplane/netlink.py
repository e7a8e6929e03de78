"""Netlink plumbing the data-plane modules share: an ``IPRoute`` per network namespace, interface
lookup, tc handles and their constants, netlink dump framing, running a command with its error
raised, and entering a namespace.

Errors are raised as :class:`common.errors.SetupError` carrying the kernel's or the tool's own
message, never printed and ignored (cases L1, L2). Commands are argv lists built from validated
values.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import struct
import subprocess

from pyroute2 import IPRoute
from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST
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


def ipr_in(netns_pid: int | None) -> IPRoute:
    """An ``IPRoute`` on the network namespace of ``netns_pid`` (None: this process's) that any
    thread may use: pyroute2 opens a socket per thread, each in that namespace through a helper
    process (about 9 ms each here). A socket used only by the thread that opens it is cheaper with
    :func:`ipr_entered`."""
    if netns_pid is None:
        return IPRoute()
    return IPRoute(netns=f"/proc/{netns_pid}/ns/net", flags=0)


@contextlib.contextmanager
def ipr_given_or_in(ipr: IPRoute | None, netns_pid: int | None):
    """``ipr`` itself when a caller passes one it keeps open (a set-up that touches many ports of
    one namespace: opening an ``IPRoute`` costs more than most requests on it), else a new
    :func:`ipr_in` closed on leaving."""
    if ipr is not None:
        yield ipr
        return
    with ipr_in(netns_pid) as own:
        yield own


def ipr_entered(netns_pid: int | None) -> IPRoute:
    """An ``IPRoute`` whose socket is opened with this thread inside the network namespace of
    ``netns_pid`` (:func:`in_netns`; None: this process's), asking for the kernel's own error text
    with each refusal (e.g. ``Specified qdisc kind is unknown``, as ``tc`` prints it; read it with
    :func:`kernel_says`). Opening one in a host's namespace took 1.7-5.9 ms here, where
    :func:`ipr_in`'s helper process took 31-34 ms (median of 30). Only for the thread that opens
    it: pyroute2 gives every other thread a socket of its own, opened in that thread's namespace.

    Raises:
        SetupError: setns refused; OSError: the process is gone.
    """
    return in_netns(netns_pid, lambda: IPRoute(ext_ack=True))


def kernel_says(e: NetlinkError) -> str:
    """A netlink refusal as ``<errno>: <the kernel's message>`` (its extended acknowledgement when
    the socket asked for one, else the errno's name)."""
    return f"{e.code}: {e.args[1] if len(e.args) > 1 and e.args[1] else os.strerror(e.code)}"


#: Flags of a tc request as ``tc qdisc|filter add`` sends them (create; refuse if one is there)
#: and as ``tc qdisc replace`` does (create or replace).
TC_ADD = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL


TC_REPLACE = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE


def tc_message(kind: str, index: int, handle: int, parent: int, options: dict | None = None,
               info: int = 0) -> tcmsg.tcmsg:
    """A tc request's body (``struct tcmsg``, ``TCA_KIND`` and, if given, ``TCA_OPTIONS``) for
    :func:`tc_send`; ``options`` is encoded by pyroute2's plugin for ``kind`` (for a filter,
    ``info`` is its priority << 16 | protocol in network order)."""
    msg = tcmsg.tcmsg()
    msg["index"], msg["handle"], msg["parent"], msg["info"] = index, handle, parent, info
    msg["attrs"] = [["TCA_KIND", kind]] + ([["TCA_OPTIONS", options]] if options is not None else [])
    return msg


def tc_send(ipr: IPRoute, msg: tcmsg.tcmsg, msg_type: int, flags: int) -> None:
    """Send a :func:`tc_message` on ``ipr`` and wait for the kernel's answer.

    Raises:
        NetlinkError: the kernel refused (callers raise SetupError naming the interface).
    """
    msg["header"]["type"], msg["header"]["flags"] = msg_type, flags
    # a batch of one: the synchronous nlm_request of pyroute2 0.9.7 fails on IPRoute (KeyError
    # 'nlm_generator'); the batch sends the message as it is and raises the kernel's refusal
    ipr.nlm_request_batch([msg])


def link_index(ipr: IPRoute, ifname: str, what: str = "tc") -> int:
    """The ifindex of ``ifname`` in ``ipr``'s namespace; SetupError naming ``what`` if it is missing."""
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise SetupError(f"{what}: no interface {ifname!r}")
    return found[0]


def tc_handle_text(h: int) -> str:
    """A tc handle as tc prints it (``1:``, ``1:1``, ``root``)."""
    if h == 0xFFFFFFFF:
        return "root"
    major, minor = h >> 16, h & 0xFFFF
    return f"{major:x}:{minor:x}" if minor else f"{major:x}:"


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


CLONE_NEWNET = 0x40000000


NLMSG_ERROR = 2          # the kernel's answer to a request with NLM_F_ACK (error 0: done)


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


#: rtnetlink message types and attributes a port's tree is read with (linux/rtnetlink.h, pkt_sched.h).
RTM_GETQDISC, RTM_GETTCLASS = 38, 42


NLM_F_DUMP_REQUEST = NLM_F_REQUEST | 0x300


NLMSG_DONE = 3


TCA_KIND, TCA_OPTIONS = 1, 2


TCA_HTB_PARMS, TCA_HTB_RATE64, TCA_HTB_CEIL64 = 1, 6, 7


NLMSG_HEADER = struct.Struct("=IHHII")         # struct nlmsghdr


TCMSG_HEADER = struct.Struct("=BxxxiIII")      # struct tcmsg: family, ifindex, handle, parent, info


RTA_HEADER = struct.Struct("=HH")              # struct rtattr


def nl_attrs(buf: bytes, off: int, end: int) -> dict[int, bytes]:
    """The rtattrs in ``buf[off:end]``: ``{type: payload}`` (the nested flag masked off)."""
    out = {}
    while off + 4 <= end:
        length, kind = RTA_HEADER.unpack_from(buf, off)
        if length < 4:
            break
        out[kind & 0x3FFF] = buf[off + 4:off + length]
        off += (length + 3) & ~3
    return out
