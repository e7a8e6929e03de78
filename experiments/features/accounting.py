"""Every UDP datagram of a round accounted for (a round's ``accounting`` section).

In a round whose traffic is UDP, the hosts' kernels count every datagram they sent and what
became of every one that arrived (/proc/net/snmp of each host's namespace, read before and after
the round); what did not arrive must have been dropped somewhere the run counts: a switch
queue, a PFC cap, or (on the userspace datapath) a frame Open vSwitch discarded after a full
queue, all in ``total_drops``. The section says:

    lost in the network = sent - arrived (to a socket, to no socket, or refused by a full one)
    gap                 = lost in the network - total_drops

A positive gap is a loss no counter saw, and is warned about; a negative one is other traffic
(ARP, end markers of other transports) among the drops. A datagram the sender's own NIC queue
refused is not sent (the kernel counts it as a send-buffer error), so it is not lost here.
"""
from __future__ import annotations

import time

from experiments.context import RoundRecord
from experiments.features.base import Feature

#: The end counters are read once nothing arrived for this long (frames still in flight: a paused
#: NIC's queue, a full switch queue draining at 10 Mbit/s, arrive within it) ...
QUIET_S = 0.3
#: ... or after this long at most (then the section says ``settled``: false).
SETTLE_MAX_S = 3.0
#: The /proc/net/snmp Udp columns kept.
UDP_FIELDS = ("OutDatagrams", "InDatagrams", "NoPorts", "InErrors", "RcvbufErrors", "SndbufErrors")


def parse_udp_snmp(text: str) -> dict[str, int]:
    """The ``Udp:`` counters of a /proc/net/snmp text (:data:`UDP_FIELDS`).

    Raises:
        ValueError: the text has no Udp header and value lines.
    """
    lines = [line.split() for line in text.splitlines() if line.startswith("Udp:")]
    if len(lines) < 2:
        raise ValueError("no Udp lines in /proc/net/snmp")
    row = dict(zip(lines[0][1:], (int(x) for x in lines[1][1:])))
    return {k: row.get(k, 0) for k in UDP_FIELDS}


def read_hosts(pids: dict[str, int]) -> dict[str, dict[str, int]]:
    """Every host's UDP counters (host name -> :func:`parse_udp_snmp`), read from the
    /proc/<pid>/net/snmp of a process in its namespace; a host that cannot be read is left out."""
    out = {}
    for name, pid in pids.items():
        try:
            with open(f"/proc/{pid}/net/snmp") as f:
                out[name] = parse_udp_snmp(f.read())
        except (OSError, ValueError):
            continue
    return out


def _arrived(counters: dict) -> int:
    return sum(c["InDatagrams"] + c["NoPorts"] + c["InErrors"] for c in counters.values())


def settled_read(pids: dict[str, int], read=read_hosts, clock=time.monotonic, sleep=time.sleep) -> tuple[dict, bool]:
    """The hosts' counters once no datagram arrived anywhere for :data:`QUIET_S` (at most
    :data:`SETTLE_MAX_S`): ``(counters, settled)``; ``read``, ``clock`` and ``sleep`` are for tests."""
    last = read(pids)
    deadline = clock() + SETTLE_MAX_S
    while clock() < deadline:
        sleep(QUIET_S)
        cur = read(pids)
        if _arrived(cur) == _arrived(last):
            return cur, True
        last = cur
    return last, False


def accounting_section(before: dict, after: dict, total_drops: int | None, settled: bool = True,
                       fault_drops: int = 0) -> dict:
    """The round's ``accounting`` section from the hosts' counters before and after it.

    Args:
        before, after: :func:`read_hosts` at the round's start and end.
        total_drops: every drop the run counted in the round (switch queues, PFC caps, the
            userspace datapath's discards), or None when unknown.
        settled: whether the end counters were read once nothing more arrived (a gap without it
            may be frames still in flight).
        fault_drops: frames the round's faults dropped (corrupt, drop), counted with the drops.

    Returns: ``{"udp_sent", "udp_arrived": {to_a_socket, to_no_socket, refused_by_socket},
    "udp_lost_in_network", "total_drops", "gap", "settled", "hosts_read", "warnings"}`` (datagrams).
    """
    def total(field):
        return sum(after[h][field] - before[h][field] for h in after if h in before)
    sent = total("OutDatagrams")
    arrived = {"to_a_socket": total("InDatagrams"), "to_no_socket": total("NoPorts"),
               "refused_by_socket": total("InErrors")}
    lost = sent - sum(arrived.values())
    counted = total_drops + fault_drops if total_drops is not None else None
    gap = lost - counted if counted is not None else None
    warnings = []
    if gap is not None and gap > 0:
        warnings.append(f"accounting: {gap} UDP datagram(s) lost in no counter (sent {sent}, arrived "
                        f"{sum(arrived.values())}, dropped where the run counts {counted})"
                        + ("" if settled else f"; frames still arrived {SETTLE_MAX_S:g} s after the traffic"))
    return {"udp_sent": sent, "udp_arrived": arrived, "udp_lost_in_network": lost, "total_drops": total_drops,
            **({"fault_drops": fault_drops} if fault_drops else {}),
            "gap": gap, "settled": settled, "hosts_read": len([h for h in after if h in before]),
            "warnings": warnings}


class Accounting(Feature):
    """Reconciles a UDP round's lost datagrams with the drops the run counted (module docstring)."""
    name = "accounting"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.before: dict = {}

    @staticmethod
    def _udp(rnd: RoundRecord) -> bool:
        return rnd.round.traffic.transport == "udp"

    def before_round(self, lf, rnd: RoundRecord) -> dict:
        """The hosts' UDP counters at the round's start (UDP rounds only)."""
        self.before = read_hosts({h.name: h.pid for h in lf.net.hosts}) if self._udp(rnd) else {}
        return {}

    def after_round(self, lf, rnd: RoundRecord) -> dict | None:
        """The counters at the start and at the end, once nothing more arrives (:func:`settled_read`)."""
        if not self._udp(rnd):
            return None
        after, settled = settled_read({h.name: h.pid for h in lf.net.hosts})
        return {"before": self.before, "after": after, "settled": settled}

    def summarize(self, rnd: RoundRecord, summary: dict) -> None:
        """``summary["accounting"]`` (:func:`accounting_section`)."""
        rec = rnd.features.get(self.name)
        if rec:
            summary["accounting"] = accounting_section(rec["before"], rec["after"], summary.get("total_drops"),
                                                       rec.get("settled", True), summary.get("fault_dropped_frames", 0))

    def warnings(self, summary: dict) -> list[str]:
        """A loss no counter saw."""
        return list((summary.get("accounting") or {}).get("warnings", []))

    def report(self, summary: dict) -> str | None:
        """``accounting: 2024 UDP datagrams sent, 567 arrived, 1457 lost in the network, 1457 counted as drops: gap 0``."""
        a = summary.get("accounting")
        if not a:
            return None
        return (f"accounting: {a['udp_sent']} UDP datagrams sent, {sum(a['udp_arrived'].values())} arrived, "
                f"{a['udp_lost_in_network']} lost in the network, {a['total_drops']} counted as drops"
                + (f" and {a['fault_drops']} as frames the faults dropped" if a.get("fault_drops") else "")
                + f": gap {a['gap']}")
