"""The PFC plan the controller applies (controller.pfc.ports), from the fabric's map and the
scenario's ``pfc``: pure, no side effects.

Buffer-accounting model (the controller's; controller/pfc/ports.py and
controller/bpf/pfc.bpf.c): every byte a switch holds in its egress queues is counted against
the (ingress port, priority) it came in on, found from the packet's 5-tuple as it arrived.
Each (ingress port, lossless priority) owns ``buffer_bytes`` of the switch's buffer (the
scenario's ``queues`` buffer): at XOFF the pauser stops the transmitter on the other end of
that ingress link (the upstream switch's egress queue for that priority, or the host NIC's),
at XON it restarts it; a frame that would take the count past the buffer is dropped and
counted (the headroom, buffer - XOFF, was too small). Lossy priorities are never paused and
drop at the egress port's buffer, as without PFC.
"""
from __future__ import annotations

from controller.messages import PfcHost, PfcPlan, PfcSwitch, PfcSwitchPort


#: What every result records as the PFC mechanism.
MECHANISM = ("per-priority HTB classes with a TBF gate each on every switch port and host NIC; bytes held "
             "counted per (switch, ingress port, priority) by BPF at the qdisc tracepoints; the controller's "
             "pauser closes the upstream transmitter's gate at XOFF and opens it at XON")


def pfc_plan(fabric_map: dict, cfg, buffer_bytes: int, burst_bytes: int | None, host_fifo_bytes: int,
             slack_s: float) -> PfcPlan:
    """The plan controller.pfc.ports applies, as the message its start request takes: priority queues on every switch port and host NIC, the
    thresholds of the lossless priorities, and each switch port's link peer (whose gate it pauses).

    Args:
        fabric_map: the fabric's map (``Fabric.to_map()``).
        cfg: a :class:`common.pfc.PfcConfig`.
        buffer_bytes: each switch egress port's buffer (lossy priorities drop there, and lossless
            ones while PFC is off), and each (ingress port, lossless priority)'s own share of
            the switch buffer (its cap).
        burst_bytes: HTB burst of every port; None: per port from its rate and ``slack_s``
            (common.units.shaper_burst_bytes).
        host_fifo_bytes: each host NIC priority queue's limit.
        slack_s: the machine's shaper slack in seconds (controller.timers.shaper_slack_s).
    """
    prios = cfg.priorities()
    lossless = set(cfg.lossless)      # counted and gated; paused while "enabled" (rounds turn it on and off)
    sw_ids = {s["name"]: i + 1 for i, s in enumerate(fabric_map["switches"])}
    hosts = {h["name"]: h for h in fabric_map["hosts"]}
    n_ports = max(len(s["ports"]) for s in fabric_map["switches"])    # host-facing ports included
    switches = []
    for s in fabric_map["switches"]:
        ports = []
        for p in s["ports"]:
            peer_is_host = p["peer"] in hosts
            peer_intf = hosts[p["peer"]]["intf"] if peer_is_host else f"{p['peer']}-eth{p['peer_port']}"
            ports.append(PfcSwitchPort(intf=p["intf"], index=p["port"], rate_bps=p["rate_mbps"] * 1e6, peer=p["peer"],
                                       peer_intf=peer_intf, peer_is_host=peer_is_host))
        switches.append(PfcSwitch(name=s["name"], sw=sw_ids[s["name"]], ports=tuple(ports)))
    # a lossless egress queue never drops: its limit holds every ingress port's share (the buffer
    # caps drop at ingress); PfcPorts.set_limits raises it with the buffer
    switch_fifo = {p: (buffer_bytes * n_ports if p in lossless and cfg.enabled else buffer_bytes) for p in prios}
    return PfcPlan(enabled=cfg.enabled, dscp_map=dict(cfg.dscp_map), default_priority=cfg.default_priority,
                   lossless=tuple(sorted(lossless)), xoff_bytes=cfg.xoff_bytes or 0, xon_bytes=cfg.xon_bytes or 0,
                   cap_bytes=buffer_bytes, watchdog_s=cfg.watchdog_s, watchdog_action=cfg.watchdog_action,
                   weights=dict(cfg.weights) if cfg.scheduling == "weighted" else None,
                   burst_bytes=burst_bytes, shaper_slack_s=slack_s, lossy_fifo_bytes=buffer_bytes,
                   switch_fifo_bytes=switch_fifo, host_fifo_bytes={p: host_fifo_bytes for p in prios},
                   switches=tuple(switches),
                   hosts=tuple(PfcHost(name=h["name"], intf=h["intf"], rate_bps=h["rate_mbps"] * 1e6)
                               for h in fabric_map["hosts"]))
