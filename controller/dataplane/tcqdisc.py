"""A port's qdiscs: the HTB shaper and its FIFO or RED leaf, delay lines on ifb devices, reading
every port's qdisc tree back and deleting it.

Every request goes over netlink (pyroute2), encoded as iproute2's ``tc`` and ``ip`` encode it;
errors are raised as :class:`common.errors.SetupError` naming the interface and carrying the
kernel's own message (cases L1, L2).
"""
from __future__ import annotations

import errno
import os
import socket
import struct
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST, nla
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import RTM_DELQDISC, RTM_NEWQDISC, RTM_NEWTFILTER, tcmsg
from pyroute2.netlink.rtnl.tcmsg.common import calc_xmittime, tick_in_usec
from pyroute2.netlink.rtnl.tcmsg.common import stats2 as tc_stats2
from pyroute2.netlink.rtnl.tcmsg.common_act import get_tca_action

from common.errors import SetupError
from common.redparams import (red_burst_for_wlog, red_eval_ewma, red_eval_plog, red_idle_damping, red_max_p,
                              red_tc_probability, red_wlog)
from common.units import shaper_burst_bytes
from controller import porttree
from controller.dataplane.counters import index_names
from controller.dataplane.netlink import (
    FIFO_HANDLE, HTB_CLASS, HTB_ROOT, NLMSG_DONE, NLMSG_ERROR, NLMSG_HEADER, NLM_F_DUMP_REQUEST, RED_HANDLE,
    RTM_GETQDISC, RTM_GETTCLASS, TC_ADD, TC_REPLACE, TCA_HTB_CEIL64, TCA_HTB_PARMS, TCA_HTB_RATE64, TCA_KIND,
    TCA_OPTIONS, TCMSG_HEADER, in_netns, ipr_entered, ipr_in, kernel_says, link_index, nl_attrs, tc_handle_text,
    tc_message, tc_send)
from controller.timers import shaper_slack_s


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


#: fabriclab's own throwaway ifb device, made and deleted by :func:`ifb_available`.
PROBE_IFB = "flprobeifb"


def ifb_available() -> bool:
    """True if the kernel can make an ifb device (tried with :data:`PROBE_IFB` in the root
    namespace; a stale one is deleted first, and the new one at once)."""
    with IPRoute() as ipr:
        for idx in ipr.link_lookup(ifname=PROBE_IFB):
            try:
                ipr.link("del", index=idx)
            except NetlinkError:
                pass            # gone meanwhile: the add below says what the kernel can do
        try:
            ipr.link("add", ifname=PROBE_IFB, kind="ifb")
        except NetlinkError:
            return False
        for idx in ipr.link_lookup(ifname=PROBE_IFB):
            try:
                ipr.link("del", index=idx)
            except NetlinkError:
                pass
        return True


def probe_qdisc_message(kind: str, index: int):
    """The request the environment probe tries ``kind`` with: what ``tc qdisc add dev IF root
    handle 1: <kind> [args]`` sends for the probe's former arguments (``tc qdisc add dev IF
    clsact`` for clsact), read from iproute2 6.1 with strace. The same bytes as tc for htb, pfifo,
    bfifo, red, netem, fq_codel and clsact; prio without tc's trailing empty attribute (the kernel
    reads only ``struct tc_prio_qopt``); tbf as pyroute2 encodes the TBF gates (its rate table
    without tc's link-layer byte and ``TCA_TBF_BURST``), which every kernel with tbf accepts.

    Raises:
        KeyError: a kind the probe does not know.
    """
    options = {
        "htb": lambda: tcmsg.plugins["htb"].get_parameters({"default": 0}),
        "tbf": lambda: tcmsg.plugins["tbf"].get_parameters({"rate": "10mbit", "burst": 10 * 1024, "latency": 50_000}),
        "pfifo": lambda: None,
        "bfifo": lambda: None,
        "prio": lambda: {"bands": 3, "priomap": (1, 2, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)},
        "red": lambda: RedPlugin.get_parameters({"limit": 400_000, "min": 30_000, "max": 90_000, "avpkt": 1000,
                                                 "burst": 55, "bandwidth": 10_000_000, "probability": 0.1,
                                                 "ecn": True}),
        "netem": lambda: tcmsg.plugins["netem"].get_parameters({"delay": 1000}),
        "fq_codel": lambda: {"attrs": []},
        "clsact": lambda: None,
    }[kind]()
    if kind == "clsact":
        return tc_message("clsact", index, CLSACT_HANDLE, TC_H_CLSACT)
    return tc_message(kind, index, 0x10000, 0xFFFFFFFF, options)


def qdisc_kinds_accepted(ifname: str, peer: str, kinds) -> dict[str, bool]:
    """Which of ``kinds`` (experiments.probe's list, each one :func:`probe_qdisc_message` knows) the
    kernel accepts, as ``{kind: bool}`` in their order: each is added as the root qdisc (clsact: as
    itself) of a throwaway veth pair ``ifname``/``peer`` in this namespace and deleted again; a
    stale pair is deleted first, and the pair always afterwards. Every kind reads False if the
    pair cannot be made."""
    with IPRoute() as ipr:
        def drop_pair():
            for idx in ipr.link_lookup(ifname=ifname):
                try:
                    ipr.link("del", index=idx)
                except NetlinkError:
                    pass
        drop_pair()
        try:
            ipr.link("add", ifname=ifname, kind="veth", peer=peer)
            idx = link_index(ipr, ifname, "qdisc probe")
        except (NetlinkError, SetupError):
            return {k: False for k in kinds}
        try:
            found = {}
            for kind in kinds:
                try:
                    tc_send(ipr, probe_qdisc_message(kind, idx), RTM_NEWQDISC, TC_ADD)
                    found[kind] = True
                except NetlinkError:
                    found[kind] = False
                try:                   # as tc qdisc del dev IF root (clsact: dev IF clsact)
                    tc_send(ipr, tc_message(kind, idx, 0, TC_H_CLSACT if kind == "clsact" else 0xFFFFFFFF),
                            RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK)
                except NetlinkError:
                    pass
            return found
        finally:
            drop_pair()


def delay_line_limit_packets(rate_mbps: float, delay_us: int, jitter_us: int = 0) -> int:
    """netem's limit for a delay line: every minimum-size frame (64 B + 20 B of preamble and gap)
    the link can have in flight over the longest delay, with half again as margin, at least 1000."""
    in_flight = rate_mbps * 1e6 * (delay_us + jitter_us) * 1e-6 / (84 * 8)
    return max(1000, int(1.5 * in_flight) + 1)


#: tc's parents of a clsact qdisc and of its ingress hook (TC_H_CLSACT, TC_H_MAKE(TC_H_CLSACT,
#: TC_H_MIN_INGRESS)), and the handle the kernel gives clsact (ffff:).
TC_H_CLSACT, CLSACT_INGRESS_PARENT, CLSACT_HANDLE = 0xFFFFFFF1, 0xFFFFFFF2, 0xFFFF0000


#: ETH_P_ALL in network byte order: ``protocol all`` in a filter's tcm_info.
ETH_P_ALL_BE = socket.htons(0x0003)


def netem_message(ifb_index: int, delay_us: int, jitter_us: int, limit_packets: int):
    """The request ``tc qdisc replace dev <ifb> root handle 1: netem limit L delay Dus [Jus]``
    sends (iproute2 6.1, read with strace): ``struct tc_netem_qopt`` with the delay and jitter in
    psched ticks, no loss, no duplication, no distribution table (the jitter is uniform)."""
    return tc_message("netem", ifb_index, 0x10000, 0xFFFFFFFF, tcmsg.plugins["netem"].get_parameters(
        {"delay": int(delay_us), "jitter": int(jitter_us), "limit": int(limit_packets)}))


def redirect_filter_message(index: int, ifb_index: int):
    """The request ``tc filter add dev <if> ingress pref 1 protocol all u32 match u32 0 0 action
    mirred egress redirect dev <ifb>`` sends (iproute2 6.1, read with strace): a u32 filter with
    one all-matching key and no class, whose one action (mirred, stolen) hands every arriving
    frame to ``ifb_index``."""
    action = {"kind": "mirred", "direction": "egress", "action": "redirect", "ifindex": ifb_index}
    options = {"attrs": [["TCA_U32_ACT", get_tca_action({"action": action})],
                         ["TCA_U32_SEL", {"keys": ["0x0/0x0+0"]}]]}
    return tc_message("u32", index, 0, CLSACT_INGRESS_PARENT, options, info=(1 << 16) | ETH_P_ALL_BE)


def install_delay_line(ifname: str, ifb_name: str, delay_us: int, jitter_us: int, limit_packets: int,
                       netns_pid: int | None = None) -> None:
    """Delay every frame arriving on ``ifname`` by ``delay_us`` (+- ``jitter_us``, uniform): its tc
    ingress hook redirects each frame to the new ifb device ``ifb_name``, whose root qdisc is
    netem, and ifb hands it back to ``ifname``'s receive path when its time has come. The sending
    port's shaper and buffer are untouched, so the delay line never holds buffer (case L3).

    Over one netlink socket, in ``ip``'s and ``tc``'s order: the ifb device, up, netem on it
    (:func:`netem_message`), ``ifname``'s clsact qdisc (one already there is kept), the redirect
    (:func:`redirect_filter_message`).

    Args:
        ifname: the receiving end of a link (in the namespace of ``netns_pid``, or the root one).
        ifb_name: a new interface name (1-15 characters), created here.
        delay_us, jitter_us: netem's delay and jitter in microseconds.
        limit_packets: netem's limit (:func:`delay_line_limit_packets`).

    Raises:
        SetupError: naming the interface and the step, with the kernel's message (no ifb or netem
            in the kernel, a name taken), or naming a missing interface (then nothing is made), or
            a namespace that cannot be entered.
    """
    step = f"ip link add {ifb_name} type ifb"
    try:
        with ipr_entered(netns_pid) as ipr:
            idx = link_index(ipr, ifname, "delay line")
            ipr.link("add", ifname=ifb_name, kind="ifb")
            step = f"ip link set {ifb_name} up"
            ifb = link_index(ipr, ifb_name, "delay line")
            ipr.link("set", index=ifb, state="up")
            step = f"netem on {ifb_name}"
            tc_send(ipr, netem_message(ifb, delay_us, jitter_us, limit_packets), RTM_NEWQDISC, TC_REPLACE)
            step = f"clsact on {ifname}"
            try:
                tc_send(ipr, tc_message("clsact", idx, CLSACT_HANDLE, TC_H_CLSACT), RTM_NEWQDISC, TC_ADD)
            except NetlinkError as e:
                if e.code != errno.EEXIST:     # already there (a BPF hook's, or an earlier run's)
                    raise
            step = f"redirect from {ifname}'s ingress to {ifb_name}"
            tc_send(ipr, redirect_filter_message(idx, ifb), RTM_NEWTFILTER, TC_ADD)
    except NetlinkError as e:
        raise SetupError(f"delay line on {ifname}: {step}: kernel refused ({kernel_says(e)})") from None
    except OSError as e:
        raise SetupError(f"delay line on {ifname}: cannot enter the namespace of pid {netns_pid} ({e})") from None


#: RED's flags (linux/pkt_sched.h): ECN marks ECT packets instead of dropping them early; NODROP
#: queues Not-ECT packets instead of dropping them early; SUPPORTED is tc's selector (the three
#: historic flags and NODROP).
TC_RED_ECN, TC_RED_HARDDROP, TC_RED_ADAPTATIVE, TC_RED_NODROP, TC_RED_SUPPORTED = 1, 2, 4, 8, 0x0F


class RedPlugin:
    """pyroute2's tc plugin for the RED qdisc, which pyroute2 (0.9) does not ship: its options as
    ``tc qdisc ... red`` builds them (iproute2 tc/q_red.c, the maths in :mod:`common.redparams`)
    and the classes that decode a dump's options and RED's statistics. Registered as ``red`` in
    :data:`pyroute2.netlink.rtnl.tcmsg.plugins` when this module is imported."""

    parent = 0xFFFFFFFF

    @staticmethod
    def get_parameters(kwarg: dict) -> dict:
        """``TCA_OPTIONS`` for ``limit``, ``min``, ``max``, ``avpkt`` (bytes), ``burst`` (packets),
        ``bandwidth`` (bit/s), ``probability`` and the flags ``ecn``, ``harddrop``, ``nodrop``,
        ``adaptive`` (booleans): the thresholds, Wlog (from the burst), Plog, Scell_log and the
        idle-damping table, ``max_P`` and the flags as a ``TCA_RED_FLAGS`` bitfield, in tc's order.

        Raises:
            ValueError: with tc's words, where tc refuses (no EWMA constant, probability or damping
                table fits).
        """
        qmin, qmax, avpkt = int(kwarg["min"]), int(kwarg["max"]), int(kwarg["avpkt"])
        prob = float(kwarg["probability"])
        rate_Bps = int(int(kwarg["bandwidth"]) / 8)          # tc's get_rate: bit/s over 8, truncated
        wlog = red_eval_ewma(qmin, int(kwarg["burst"]), avpkt)
        if wlog < 0:
            raise ValueError("RED: failed to calculate EWMA constant")
        plog = red_eval_plog(qmin, qmax, prob)
        if plog < 0:
            raise ValueError("RED: failed to calculate probability")
        scell_log, stab = red_idle_damping(wlog, avpkt, rate_Bps, tick_in_usec)
        if scell_log < 0:
            raise ValueError("RED: failed to calculate idle damping table")
        flags = sum(bit for key, bit in (("ecn", TC_RED_ECN), ("harddrop", TC_RED_HARDDROP),
                                         ("adaptive", TC_RED_ADAPTATIVE), ("nodrop", TC_RED_NODROP))
                    if kwarg.get(key))
        return {"attrs": [
            ["TCA_RED_PARMS", {"limit": int(kwarg["limit"]), "qth_min": qmin, "qth_max": qmax, "Wlog": wlog,
                               "Plog": plog, "Scell_log": scell_log, "flags": 0}],
            ["TCA_RED_STAB", stab],
            ["TCA_RED_MAX_P", red_max_p(prob)],
            ["TCA_RED_FLAGS", {"flags": flags, "selector": TC_RED_SUPPORTED}]]}

    class options(nla):
        """RED's ``TCA_OPTIONS`` (linux/pkt_sched.h ``TCA_RED_*``)."""
        nla_map = (("TCA_RED_UNSPEC", "none"),
                   ("TCA_RED_PARMS", "qopt"),
                   ("TCA_RED_STAB", "cdata"),
                   ("TCA_RED_MAX_P", "uint32"),
                   ("TCA_RED_FLAGS", "flags_bf"),
                   ("TCA_RED_EARLY_DROP_BLOCK", "uint32"),
                   ("TCA_RED_MARK_BLOCK", "uint32"))

        class qopt(nla):
            fields = (("limit", "I"), ("qth_min", "I"), ("qth_max", "I"), ("Wlog", "B"), ("Plog", "B"),
                      ("Scell_log", "B"), ("flags", "B"))

        class flags_bf(nla):
            """``struct nla_bitfield32`` (its ``value`` named ``flags``: pyroute2 reads a field
            named ``value`` as the whole attribute's value)."""
            fields = (("flags", "I"), ("selector", "I"))

    class stats(nla):
        """``struct tc_red_xstats`` (``TCA_XSTATS``)."""
        fields = (("early", "I"), ("pdrop", "I"), ("other", "I"), ("marked", "I"))

    class stats2(tc_stats2):
        """``TCA_STATS2`` with RED's statistics as its application part and 64-bit packet counts."""
        nla_map = tc_stats2.nla_map + (("TCA_STATS_RATE_EST64", "hex"), ("TCA_STATS_PAD", "hex"),
                                       ("TCA_STATS_BASIC_HW", "hex"), ("TCA_STATS_PKT64", "uint64"))

        class stats_app(nla):
            fields = (("early", "I"), ("pdrop", "I"), ("other", "I"), ("marked", "I"))


# Registered over any pyroute2 may bring: fabriclab's RED requests and read-backs mean tc's.
tcmsg.plugins["red"] = RedPlugin


def red_parameters(rate_bps: float, limit_bytes: int, profile, avpkt: int = 1514) -> dict:
    """The ``tc qdisc ... red`` parameters for ``profile`` on a port of ``rate_bps`` bit/s and
    ``limit_bytes`` of buffer (the keywords of :meth:`RedPlugin.get_parameters`).

    step K -> min K, max K+1 byte, probability 1 (the DCTCP set-up of the Mininet-HiFi
    experiments); red -> min Kmin, max Kmax, probability :func:`red_tc_probability` (Pmax).
    The burst is the one for which tc's EWMA rule gives the profile's weight
    (:func:`common.redparams.red_burst_for_wlog`). ``ecn``: ECT packets are marked; ``nodrop``:
    Not-ECT packets are queued, not dropped early (they meet only the ``limit``; case L2's "never
    silently change behaviour"). ``limit`` is the port's buffer in bytes.

    Raises:
        ValueError: no burst gives the profile's weight.
    """
    if profile.kind == "step":
        qmin, qmax, prob = profile.k_bytes, profile.k_bytes + 1, 1.0
    else:
        qmin, qmax, prob = profile.kmin_bytes, profile.kmax_bytes, red_tc_probability(profile.pmax)
    burst = red_burst_for_wlog(qmin, avpkt, red_wlog(profile.weight))
    return {"limit": int(limit_bytes), "min": int(qmin), "max": int(qmax), "avpkt": avpkt, "burst": burst,
            "bandwidth": int(rate_bps), "probability": float(prob), "ecn": True, "nodrop": True}


def red_message(index: int, rate_bps: float, limit_bytes: int, profile, avpkt: int = 1514):
    """The request ``tc qdisc replace dev <if> parent 1:1 handle 20: red ...`` sends for
    :func:`red_parameters` (the bytes iproute2 6.1 sends, read with strace: tests/unit/test_ecn_plan.py).

    Raises:
        ValueError: as :func:`red_parameters` and :meth:`RedPlugin.get_parameters`.
    """
    return tc_message("red", index, RED_HANDLE, HTB_CLASS,
                      RedPlugin.get_parameters(red_parameters(rate_bps, limit_bytes, profile, avpkt)))


def red_shown(m) -> dict:
    """A dumped RED qdisc's options as ``tc -d -j qdisc show`` prints them: limit, min, max, the
    flags (ecn, harddrop, adaptive, nodrop: booleans), ewma, probability (or Plog), Scell_log.
    ``TCA_RED_FLAGS``, where the kernel sends it, holds the flags (as tc reads them)."""
    opts = m.get_attr("TCA_OPTIONS")
    p = opts.get_attr("TCA_RED_PARMS") if opts else None
    if p is None:
        return {}
    bf = opts.get_attr("TCA_RED_FLAGS")
    flags = bf["flags"] if bf else p["flags"]
    max_p = opts.get_attr("TCA_RED_MAX_P") or 0
    return {"limit": p["limit"], "min": p["qth_min"], "max": p["qth_max"],
            "ecn": bool(flags & TC_RED_ECN), "harddrop": bool(flags & TC_RED_HARDDROP),
            "adaptive": bool(flags & TC_RED_ADAPTATIVE), "nodrop": bool(flags & TC_RED_NODROP),
            "ewma": p["Wlog"], **({"probability": max_p / 2 ** 32} if max_p else {"Plog": p["Plog"]}),
            "Scell_log": p["Scell_log"]}


def install_red(ifname: str, rate_bps: float, limit_bytes: int, profile) -> None:
    """Replace the FIFO under ``ifname``'s HTB class with RED for ``profile`` (step or red):
    :func:`red_message`, then the qdiscs under 1:1 read back on the same socket.

    Raises SetupError naming the interface with the kernel's message if refused, with tc's words
    if the parameters have no RED form, or if the read-back has no RED or one without
    ``ecn``/``nodrop`` (case L2). RED's probability does not read back as written, so it is
    checked by behaviour in the tests.
    """
    try:
        with ipr_entered(None) as ipr:
            idx = link_index(ipr, ifname)
            tc_send(ipr, red_message(idx, rate_bps, limit_bytes, profile), RTM_NEWQDISC, TC_REPLACE)
            shown = [m for m in ipr.get_qdiscs(index=idx) if m["index"] == idx and m["parent"] == HTB_CLASS]
    except NetlinkError as e:
        raise SetupError(f"tc on {ifname}: kernel refused RED ({kernel_says(e)})") from None
    except ValueError as e:
        raise SetupError(f"tc on {ifname}: {e}") from None
    red = [m for m in shown if m.get_attr("TCA_KIND") == "red"]
    if not red:
        raise SetupError(f"tc on {ifname}: RED did not take effect (read back "
                         f"{[(m.get_attr('TCA_KIND'), tc_handle_text(m['handle'])) for m in shown]})")
    opts = red_shown(red[0])
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
            idx = link_index(ipr, ifname)
            ipr.tc("replace", fifo_kind, idx, FIFO_HANDLE, parent=HTB_CLASS, limit=limit)
    except NetlinkError as e:
        raise SetupError(f"tc on {ifname}: kernel refused the FIFO ({e})") from None


def red_counters(ifname: str) -> dict | None:
    """RED's counters on ``ifname``, as ``tc -s -j qdisc show`` names them: marked, early (dropped
    early), pdrop (over limit), other, drops, packets; None if the port has no RED.

    Raises:
        SetupError: the interface is missing or the kernel refused the dump.
    """
    try:
        with IPRoute() as ipr:
            idx = link_index(ipr, ifname)
            for m in ipr.get_qdiscs(index=idx):
                if m["index"] == idx and m.get_attr("TCA_KIND") == "red":
                    return red_stats(m)
    except NetlinkError as e:
        raise SetupError(f"tc on {ifname}: cannot read its qdiscs ({kernel_says(e)})") from None
    return None


def red_stats(m) -> dict:
    """A dumped RED qdisc's counters (:func:`red_counters`): RED's own from ``TCA_STATS2``'s
    application part (``TCA_XSTATS`` if absent), drops from its queue part, packets from its
    basic part (the 64-bit count where the kernel sends one, as tc prefers it)."""
    st = m.get_attr("TCA_STATS2")
    app = (st.get_attr("TCA_STATS_APP") if st else None) or m.get_attr("TCA_XSTATS")
    basic = st.get_attr("TCA_STATS_BASIC") if st else None
    queue = st.get_attr("TCA_STATS_QUEUE") if st else None
    pkt64 = st.get_attr("TCA_STATS_PKT64") if st else None
    out = {k: (int(app[k]) if app else None) for k in ("marked", "early", "pdrop", "other")}
    out["drops"] = int(queue["drops"]) if queue else None
    out["packets"] = int(pkt64) if pkt64 else (int(basic["packets"]) if basic else None)
    return out


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
        with ipr_in(netns_pid) as ipr:
            idx = link_index(ipr, ifname)
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
    raise SetupError(f"tc on {ifname}: no HTB class {tc_handle_text(classid)} (is the port shaped?)")


def set_htb_class(ifname: str, cls: HtbClass, netns_pid: int | None = None, classid: int = HTB_CLASS,
                  parent: int = HTB_ROOT) -> HtbClass:
    """Change ``ifname``'s HTB class ``classid`` to ``cls`` (rate, ceil, bursts, quantum, prio);
    returns the class as the kernel holds it afterwards.

    Raises:
        SetupError: the interface is missing or the kernel refused the change (its message).
    """
    try:
        with ipr_in(netns_pid) as ipr:
            idx = link_index(ipr, ifname)
            ipr.tc("change-class", "htb", idx, classid, parent=parent, rate=f"{cls.rate_bps}bit",
                   ceil=f"{cls.ceil_bps}bit", burst=cls.burst_bytes, cburst=cls.cburst_bytes,
                   quantum=cls.quantum, prio=cls.prio)
    except NetlinkError as e:
        raise SetupError(f"tc on {ifname}: kernel refused the class change ({e})") from None
    return htb_class(ifname, netns_pid, classid)


def root_qdisc_stats(names: set[str] | None = None, netns_pid: int | None = None,
                     index_name: dict[int, str] | None = None) -> dict[str, dict]:
    """Each interface's root qdisc (or those of ``names``): ``{ifname: {"kind", "drops", "backlog_bytes",
    "backlog_packets", "packets", "bytes"}}`` in one dump (the root HTB's drops count its leaves').
    ``index_name``: ``{ifindex: ifname}`` of the interfaces wanted, when the caller has it (a links
    dump decoded by pyroute2 costs about as much as the qdisc dump itself); else dumped here.

    Raises:
        SetupError: the namespace cannot be read.
    """
    out: dict[str, dict] = {}
    try:
        with ipr_in(netns_pid) as ipr:
            index_name = index_names(ipr) if index_name is None else index_name
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


def htb_ceilings_mbps(names: set[str], netns_pid: int | None = None, classid: int = HTB_CLASS,
                      index_name: dict[int, str] | None = None) -> dict[str, float]:
    """``{ifname: ceiling of its HTB class classid in Mbit/s}`` for the interfaces in ``names``
    that have one (one class dump per interface, one socket for all). ``index_name``: ``{ifindex:
    ifname}`` when the caller has it (as :func:`root_qdisc_stats`).

    Raises:
        SetupError: the namespace cannot be read.
    """
    out: dict[str, float] = {}
    try:
        with ipr_in(netns_pid) as ipr:
            for idx, name in (index_names(ipr) if index_name is None else index_name).items():
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
        sock.send(NLMSG_HEADER.pack(NLMSG_HEADER.size + TCMSG_HEADER.size, kind, NLM_F_DUMP_REQUEST, self._seq, 0)
                  + TCMSG_HEADER.pack(0, ifindex, 0, 0, 0))
        while True:
            buf = sock.recv(1 << 16)
            off = 0
            while off + NLMSG_HEADER.size <= len(buf):
                length, mtype, _flags, seq, _pid = NLMSG_HEADER.unpack_from(buf, off)
                if length < NLMSG_HEADER.size:
                    return
                if seq == self._seq:
                    if mtype == NLMSG_DONE:
                        return
                    if mtype == NLMSG_ERROR:
                        err = -struct.unpack_from("=i", buf, off + NLMSG_HEADER.size)[0]
                        if err:
                            raise SetupError(f"tc: dump refused ({err}: {os.strerror(err)})")
                        return
                    tc = TCMSG_HEADER.unpack_from(buf, off + NLMSG_HEADER.size)
                    yield tc, nl_attrs(buf, off + NLMSG_HEADER.size + TCMSG_HEADER.size, off + length)
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
                    out[name].append(porttree.qdisc_node(kind, tc_handle_text(handle), tc_handle_text(parent), limit))
                    if kind == "htb":
                        htb.append(idx)
                for idx in htb:
                    for (_fam, _i, handle, parent, _info), at in self._dump(sock, RTM_GETTCLASS, idx):
                        if at.get(TCA_KIND, b"").rstrip(b"\0") != b"htb" or TCA_OPTIONS not in at:
                            continue
                        o = nl_attrs(at[TCA_OPTIONS], 0, len(at[TCA_OPTIONS]))
                        parms = o.get(TCA_HTB_PARMS, b"")
                        if len(parms) < 24:
                            continue
                        rate = struct.unpack_from("=Q", o[TCA_HTB_RATE64])[0] if TCA_HTB_RATE64 in o else \
                            struct.unpack_from("=I", parms, 8)[0]          # tc_ratespec.rate, bytes/s
                        ceil = struct.unpack_from("=Q", o[TCA_HTB_CEIL64])[0] if TCA_HTB_CEIL64 in o else \
                            struct.unpack_from("=I", parms, 20)[0]
                        out[names[idx]].append(porttree.class_node("htb", tc_handle_text(handle), tc_handle_text(parent),
                                                                   rate * 8, ceil * 8))
        except OSError as e:
            raise SetupError(f"tc: qdisc dump failed ({e})") from None
        return {n: tuple(sorted(v)) for n, v in out.items()}

    def close(self) -> None:
        """Close the sockets (idempotent)."""
        for sock, _ in self._ns:
            sock.close()
        self._ns = []


class QdiscTrees(PortTrees):
    """Reads every qdisc on each of ``ifnames`` (root namespace) and of ``namespaces`` (interfaces
    inside other network namespaces: the hosts' NICs) with one netlink dump per namespace: calling
    it returns ``{ifname: ("<kind> <handle> parent <parent>", ...)}`` sorted, e.g. ``("bfifo 10:
    parent 1:1", "htb 1: parent root")``; an interface that is gone maps to ``()``. One raw
    netlink socket per namespace (:class:`PortTrees`'), opened at construction from inside the
    namespace and kept until :meth:`close`: any thread may call it (the control-plane watcher's
    does), where pyroute2 opened a socket per calling thread and namespace through a helper
    process, about 9 ms each, twice a round per host. Measured on the default fabric's 40 switch
    ports (80 qdiscs): see ``bench/bench_watch.py``.

    Args:
        ifnames: interfaces in the root namespace (the switch ports).
        namespaces: ``{ifname: pid}``, an interface inside the network namespace of process
            ``pid`` (a Mininet host's shell).

    Raises:
        SetupError: the kernel refused a dump (call), or a namespace could not be entered
            (construction).
    """

    def __init__(self, ifnames: list[str], namespaces: dict[str, int] | None = None):
        by_ns: dict[int | None, list[str]] = {None: list(ifnames)}
        for ifname, pid in (namespaces or {}).items():
            if ifname not in ifnames:
                by_ns.setdefault(pid, []).append(ifname)
        super().__init__(by_ns)

    def __call__(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {n: [] for n in self.ifnames}
        try:
            for sock, names in self._ns:
                for (_fam, idx, handle, parent, _info), at in self._dump(sock, RTM_GETQDISC):
                    name = names.get(idx)
                    if name is not None:
                        kind = at.get(TCA_KIND, b"").rstrip(b"\0").decode()
                        out[name].append(f"{kind} {tc_handle_text(handle)} parent {tc_handle_text(parent)}")
        except OSError as e:
            raise SetupError(f"tc: qdisc dump failed ({e})") from None
        return {n: tuple(sorted(v)) for n, v in out.items()}


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
        with ipr_in(netns_pid) as ipr:
            idx = link_index(ipr, ifname)
            present = {(m["parent"], m.get_attr("TCA_KIND")) for m in ipr.get_qdiscs(index=idx)}
            for parent, kind in sorted(present):
                if (root and parent == 0xFFFFFFFF and kind != "noqueue") or (hooks and kind in porttree.HOOK_KINDS):
                    ipr.tc("del", kind, idx, parent=parent)
    except NetlinkError as e:
        raise SetupError(f"tc on {ifname}: kernel refused to delete its qdiscs ({e})") from None
