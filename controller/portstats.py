"""Port counters like a switch's: per switch port, frames and bytes received and sent, queue
drops, receive errors, the link's current rate and state. Read during a run through the
controller's REST API (``GET /fabriclab/ports``), printed in ``ovs-ofctl dump-ports`` style by
``python -m experiments ports``, and recorded at the end of each round (``ports.csv``).

Where each figure comes from (one netlink dump each, root namespace, where the switch ports live):

- ``rx_*``, ``tx_*``: the interface's own counters (``IFLA_STATS64``). A veth counts as received
  every frame its peer sent, including frames a fault dropped on arrival; a corrupt fault's
  frames are therefore taken out of ``rx_packets``/``rx_bytes`` and shown as ``rx_errors`` (a
  switch counts a frame with a bad checksum as an error, not as received); a drop fault's frames
  stay in ``rx_packets``: the switch received them and lost them without a trace.
- ``tx_dropped``: the port's queue drops, its root qdisc's drop counter (the egress buffer full).
- ``rate_mbps``: the link's speed as the port reports it: its link-rate HTB class ``1:1`` as the
  kernel holds it now, and the speed of a link a degrade fault slowed (both its ports report it,
  as both ends of a link that trained down do); ``state``: ``up`` or ``down`` (the interface's
  operational state); ``carrier_changes``: the kernel's count of the port's carrier transitions
  (a flap is two).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from common.lazy import lazy_module

if TYPE_CHECKING:
    from controller.dataplane import counters, tcqdisc
else:    # read only by read_ports (the live half): the columns and tables import without netlink
    counters = lazy_module("controller.dataplane.counters")
    tcqdisc = lazy_module("controller.dataplane.tcqdisc")

#: The columns of a port's counters, in order (ports.csv, the REST answer).
COLUMNS = ("switch", "port", "intf", "peer", "rx_packets", "rx_bytes", "rx_errors", "tx_packets", "tx_bytes",
           "tx_dropped", "carrier_changes", "rate_mbps", "nominal_mbps", "state")


def switch_ports(fabric_map: dict) -> list[dict]:
    """Every switch port of the map: ``{"switch", "port", "intf", "peer", "nominal_mbps"}``, by
    switch then port."""
    return [{"switch": s["name"], "port": p["port"], "intf": p["intf"], "peer": p["peer"],
             "nominal_mbps": float(p["rate_mbps"])}
            for s in fabric_map["switches"] for p in sorted(s["ports"], key=lambda p: p["port"])]


def port_table(ports: list[dict], links: dict, qdiscs: dict, rates_mbps: dict, rx_errors: dict,
               speeds: dict | None = None) -> list[dict]:
    """The counters of ``ports`` (from :func:`switch_ports`) from the raw readings (pure).

    Args:
        links: ``{intf: link counters}`` (controller.dataplane.counters.link_counters).
        qdiscs: ``{intf: root qdisc stats}`` (controller.dataplane.tcqdisc.root_qdisc_stats).
        rates_mbps: ``{intf: the link-rate class's ceiling in Mbit/s}``; a port without one shows None.
        rx_errors: ``{intf: frames a corrupt fault dropped on arrival}`` (cumulative).
        speeds: ``{intf: Mbit/s}`` of links a fault slowed (controller.faultports.FaultPorts.link_speeds).

    Returns:
        One dict per port with :data:`COLUMNS`; a port missing from ``links`` has None counters and
        state ``absent``.
    """
    out = []
    for p in ports:
        ln = links.get(p["intf"])
        q = qdiscs.get(p["intf"], {})
        err = int(rx_errors.get(p["intf"], 0))
        if ln is None:
            row = {k: None for k in COLUMNS[4:]}
            row.update(state="absent", nominal_mbps=p["nominal_mbps"])
        else:
            # a corrupt fault's frames were counted as received; the bytes are estimated at the
            # port's mean frame size (the program counts them exactly per fault, in faults.csv)
            mean = ln["rx_bytes"] / ln["rx_packets"] if ln["rx_packets"] else 0
            row = {"rx_packets": max(0, ln["rx_packets"] - err),
                   "rx_bytes": max(0, int(ln["rx_bytes"] - err * mean)), "rx_errors": err + ln["rx_errors"],
                   "tx_packets": ln["tx_packets"], "tx_bytes": ln["tx_bytes"],
                   "tx_dropped": int(q.get("drops", 0)) + ln["tx_dropped"],
                   "carrier_changes": ln.get("carrier_changes", 0),
                   "rate_mbps": _speed(rates_mbps.get(p["intf"]), (speeds or {}).get(p["intf"])),
                   "nominal_mbps": p["nominal_mbps"],
                   "state": "up" if ln["operstate"] == "UP" else "down"}
        out.append({"switch": p["switch"], "port": p["port"], "intf": p["intf"], "peer": p["peer"], **row})
    return out


def _speed(shaped: float | None, link: float | None) -> float | None:
    if shaped is None:
        return link
    return shaped if link is None else min(shaped, link)


def read_ports(fabric_map: dict, rx_errors: Callable[[], dict] = dict, speeds: Callable[[], dict] = dict) -> list[dict]:
    """Every switch port's counters now (:func:`port_table` over one dump of links and of qdiscs
    and each port's class). ``rx_errors``: () -> the fault manager's receive errors per interface;
    ``speeds``: () -> the speeds of links a fault slowed.

    Raises:
        SetupError: netlink refused a dump.
    """
    ports = switch_ports(fabric_map)
    names = {p["intf"] for p in ports}
    links = counters.link_counters(names)
    index_name = {v["index"]: k for k, v in links.items()}      # one links dump serves all three
    qdiscs = tcqdisc.root_qdisc_stats(names, index_name=index_name)
    rates = tcqdisc.htb_ceilings_mbps(names, index_name=index_name)
    return port_table(ports, links, qdiscs, rates, rx_errors(), speeds())


def dump_ports_text(rows: list[dict], switch: str | None = None) -> str:
    """The counters in ``ovs-ofctl dump-ports`` style, one block per switch (or only ``switch``)::

        p0a1: 4 ports
          port  1 (p0a1-eth1, to p0e1): rx pkts=120, bytes=180000, errs=0
                   tx pkts=118, bytes=177000, drop=0
                   rate=10 Mbit/s of 10, state=up
    """
    lines = []
    by_switch: dict[str, list[dict]] = {}
    for r in rows:
        if switch is None or r["switch"] == switch:
            by_switch.setdefault(r["switch"], []).append(r)
    for sw, rs in by_switch.items():
        lines.append(f"{sw}: {len(rs)} ports")
        for r in rs:
            def v(k):
                return "?" if r[k] is None else r[k]
            rate = "?" if r["rate_mbps"] is None else f"{r['rate_mbps']:g}"
            lines.append(f"  port {r['port']:>2} ({r['intf']}, to {r['peer']}): rx pkts={v('rx_packets')}, "
                         f"bytes={v('rx_bytes')}, errs={v('rx_errors')}")
            lines.append(f"           tx pkts={v('tx_packets')}, bytes={v('tx_bytes')}, drop={v('tx_dropped')}")
            lines.append(f"           rate={rate} Mbit/s of {r['nominal_mbps']:g}, state={r['state']}, "
                         f"carrier changes={v('carrier_changes')}")
    return "\n".join(lines)
