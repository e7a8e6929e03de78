"""The fabriclab os-ken app: loads the fabric map and installs routing.

On each switch's FEATURES_REPLY it clears the switch, installs
- priority 0: drop (no table-miss flooding, so no broadcast storms; case C4),
- priority 100: ARP -> controller, answered here from the fabric map (proxy ARP),
- priority 200: per destination host IPv4 -> output port, or an OpenFlow 1.3
  select group over all equal-cost ports (ECMP) from :mod:`controller.routing`,
then a barrier. When every switch of the map has answered its barrier, the
app writes the ready file the runner waits for. OpenFlow 1.3 only (case C3).
"""
from __future__ import annotations

import json
import logging
import os
import time

from controller.ofp import (BaseApp, CONFIG_DISPATCHER, MAIN_DISPATCHER, arp, ether_types,
                            ethernet, ofp_event, ofproto_v1_3, packet, set_ev_cls)
from controller.routing import compute_routes

LOG = logging.getLogger("fabriclab.controller")

PRIO_DROP, PRIO_ARP, PRIO_ROUTE = 0, 100, 200


class FabricController(BaseApp):
    """Routes a fabric described by a fabric map (see Fabric.to_map).

    Configure through :attr:`config` before the app manager instantiates it:
    ``{"fabric_map": path, "ready_file": path, "routing": "ecmp"|"single"}``.
    """

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]
    config: dict = {}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        with open(self.config["fabric_map"]) as f:
            self.fabric = json.load(f)
        self.routes = compute_routes(self.fabric, self.config.get("routing", "ecmp"))
        self.by_dpid = {s["dpid"]: s for s in self.fabric["switches"]}
        self.mac_of = {h["ip"]: h["mac"] for h in self.fabric["hosts"]}
        self.group_of = {h["ip"]: i + 1 for i, h in enumerate(self.fabric["hosts"])}
        self.pending: dict[int, int] = {}   # dpid -> barrier xid
        self.ready: set[int] = set()
        self.arp_replies = 0
        LOG.info("fabric map: %d switches, %d hosts", len(self.by_dpid), len(self.mac_of))

    # -- switch set-up ---------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev):
        """Install the complete forwarding state of a connecting switch."""
        dp = ev.msg.datapath
        sw = self.by_dpid.get(dp.id)
        if sw is None:
            LOG.warning("ignoring unknown datapath %016x", dp.id)
            return
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                                      out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL))
        self._flow(dp, PRIO_DROP, parser.OFPMatch(), [])
        self._flow(dp, PRIO_ARP, parser.OFPMatch(eth_type=ether_types.ETH_TYPE_ARP),
                   [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)])
        for ip, ports in self.routes[sw["name"]].items():
            if len(ports) == 1:
                actions = [parser.OFPActionOutput(ports[0])]
            else:
                gid = self.group_of[ip]
                buckets = [parser.OFPBucket(weight=1, watch_port=ofp.OFPP_ANY, watch_group=ofp.OFPG_ANY,
                                            actions=[parser.OFPActionOutput(p)]) for p in ports]
                dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_ADD, type_=ofp.OFPGT_SELECT,
                                               group_id=gid, buckets=buckets))
                actions = [parser.OFPActionGroup(gid)]
            self._flow(dp, PRIO_ROUTE, parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP, ipv4_dst=ip), actions)
        req = parser.OFPBarrierRequest(dp)
        dp.set_xid(req)
        self.pending[dp.id] = req.xid
        dp.send_msg(req)
        LOG.info("configured %s (%016x): %d routes", sw["name"], dp.id, len(self.routes[sw["name"]]))

    @staticmethod
    def _flow(dp, priority, match, actions):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
        dp.send_msg(parser.OFPFlowMod(dp, priority=priority, match=match, instructions=inst))

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def on_barrier(self, ev):
        """Mark a switch ready once its set-up barrier returns; write the ready file when all are."""
        dp = ev.msg.datapath
        if self.pending.get(dp.id) != ev.msg.xid:
            return
        del self.pending[dp.id]
        self.ready.add(dp.id)
        if self.ready >= set(self.by_dpid):
            self._write_ready()

    @set_ev_cls(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def on_error(self, ev):
        """Log OpenFlow errors from switches (they mean a rule was refused)."""
        LOG.error("OpenFlow error from %016x: type=%s code=%s", ev.msg.datapath.id, ev.msg.type, ev.msg.code)

    def _write_ready(self):
        path = self.config.get("ready_file")
        if not path:
            return
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"switches": sorted(self.ready), "t_unix_s": time.time()}, f)
        os.replace(tmp, path)
        LOG.info("all %d switches configured", len(self.ready))

    # -- ARP -------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev):
        """Answer ARP requests for fabric hosts from the map; drop everything else."""
        msg = ev.msg
        dp = msg.datapath
        pkt = packet.Packet(msg.data)
        req = pkt.get_protocol(arp.arp)
        if req is None or req.opcode != arp.ARP_REQUEST:
            return
        mac = self.mac_of.get(req.dst_ip)
        if mac is None:
            return
        reply = packet.Packet()
        reply.add_protocol(ethernet.ethernet(ethertype=ether_types.ETH_TYPE_ARP, dst=req.src_mac, src=mac))
        reply.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=mac, src_ip=req.dst_ip,
                                   dst_mac=req.src_mac, dst_ip=req.src_ip))
        reply.serialize()
        ofp, parser = dp.ofproto, dp.ofproto_parser
        in_port = msg.match["in_port"]
        dp.send_msg(parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                                        actions=[parser.OFPActionOutput(in_port)], data=reply.data))
        self.arp_replies += 1
