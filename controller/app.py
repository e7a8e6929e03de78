"""The fabriclab os-ken app: loads the fabric map and installs routing.

On each switch's FEATURES_REPLY it clears the switch, installs
- priority 0: drop (no table-miss flooding, so no broadcast storms; case C4),
- priority 100: ARP -> controller, answered here from the fabric map (proxy ARP),
- priority 200: per destination host IPv4 -> output port (one next hop), or
  ECMP over all equal-cost ports from :mod:`controller.routing` (below),
then a barrier. Those are the ``ecmp`` strategy's tables; the app installs whatever flow entries
the scenario's routing strategy returns (:mod:`controller.routing`, ``routing`` below: a
registry of strategies, each giving every switch's entries as :mod:`controller.flowtables` types) and
names none of them.

ECMP. Each flow's 5-tuple (IP source and destination, protocol, TCP/UDP
ports; symmetric) is hashed with a basis that differs per switch
(:func:`controller.routing.hash_basis`; case C5) and the hash picks one of
the equal-cost ports with the hash-threshold method of RFC 2992. It is done
with Open vSwitch's ``multipath`` action (a Nicira extension that OpenFlow 1.3
carries): table 0 writes the port-set id to reg1 and the hash's link index to
reg0, table 1 maps (reg1, reg0) to the output port. Why not select groups: an
OpenFlow 1.3 group_mod cannot carry OVS's selection method, fields or hash
basis (OVS accepts them only in OpenFlow 1.5 or 1.0-with-extensions and
silently drops them from 1.3), so every switch would hash the same 5-tuple
with basis 0 and an aggregation switch would repeat its edge switch's choice
(half the Fat-Tree core idle). Every packet of a flow takes one path.

When every switch of the map has answered its barrier, the app writes the
ready file the runner waits for, and its REST API (:mod:`controller.rest`, on
127.0.0.1) takes the ECN plan (:mod:`controller.ecn.ports`) and the PFC plan
(:mod:`controller.pfc.ports`) in their start requests, as the typed messages of
:mod:`controller.messages`: the runner sends them once the ports have their
queues (adding a port to Open vSwitch resets its root qdisc, so that is after
the switches connect), and changes profiles during the run the same way; a
user can read and change them with curl. OpenFlow 1.3 only.

Its settings are os-ken configuration options in group ``[fabriclab]`` (:mod:`controller.options`),
so it runs under os-ken's manager as Ryu apps do (``python -m controller.manager controller/app.py
--fabriclab-topo fattree,4``, or ``--config-file``) as well as under ``python -m controller.main``.
"""
from __future__ import annotations

import json
import logging
import os
import time

from controller.ecn.ports import EcnPorts
from common.errors import FAULT_ENV
from controller.oferrors import describe_error
from controller.ofp import (CONFIG_DISPATCHER, HANDSHAKE_DISPATCHER, MAIN_DISPATCHER, BaseApp, arp, ether_types, ethernet, nicira_ext,
                            ofp_event, ofproto_v1_3, packet, set_ev_cls)
from controller.faultports import FaultPorts
from controller import options
from controller.pfc.ports import PfcPorts, share_gil_realtime
from controller.portstats import read_ports
from controller.messages import EcnPlan, PfcStart
from controller.rest import ControlApi, HttpError, read_token, serve
from controller.routing import strategy_for
from controller.flowtables import Multipath, Output, SetField, SetReg, ToController

LOG = logging.getLogger("fabriclab.controller")

options.register()   # as a Ryu app does: its options exist once the app's module is loaded


class FabricController(BaseApp):
    """Routes a fabric described by a fabric map (see Fabric.to_map).

    Configured by os-ken's configuration options in group ``[fabriclab]`` (parsed before the app
    manager instantiates the app; :mod:`controller.options`): the fabric (``topo``, a Mininet-style
    spec built in memory, or ``fabric-map``, a JSON file), ``ready-file``, ``routing`` (a
    registered routing strategy, :data:`controller.routing.STRATEGIES`), ``control-dir`` (where the
    ECN marker's record goes), ``rest-port`` (the REST
    API, controller.rest, on 127.0.0.1; 0: none) and ``token-file`` (the API's token: changes
    need it; none: the API only reads). :attr:`config` holds them as
    :func:`controller.options.settings` returns them.

    Raises (on instantiation): common.errors.SetupError without exactly one of ``topo`` and
    ``fabric-map``, or with a ``token-file`` that cannot be read or is empty; ValueError or
    ScenarioError for a bad ``topo``; OSError or ValueError for an unreadable map file, or a
    routing strategy that cannot route the fabric.
    """

    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.config = options.settings(self.CONF)
        self.fabric = options.fabric_map(self.config)
        self.routing = strategy_for(self.fabric, self.config.get("routing") or "ecmp")
        self.by_dpid = {s["dpid"]: s for s in self.fabric["switches"]}
        self.mac_of = {h["ip"]: h["mac"] for h in self.fabric["hosts"]}
        self.pending: dict[int, int] = {}   # dpid -> barrier xid
        self.ready: set[int] = set()
        self.arp_replies = 0
        self.dpid_of = {}          # id(datapath object) -> dpid, as its features reply said
        self.sent: dict[int, str] = {}      # xid -> what a flow mod was (decoded errors name it)
        self.of_errors: list[dict] = []     # every OpenFlow error a switch sent, decoded
        self.ecn = None
        self.pfc = None
        self.rest = None
        self.faults = FaultPorts(self.fabric)
        if self.config.get("rest_port") is not None:
            token = read_token(self.config["token_file"]) if self.config.get("token_file") else None
            api = ControlApi(self._status, lambda: self.ecn, lambda: self.pfc, start_ecn=self.start_ecn,
                             start_pfc=self.start_pfc, faults=self.faults, ports=lambda: read_ports(self.fabric, self.faults.live_rx_errors,
                                                               self.faults.link_speeds),
                             token=token)
            try:
                self.rest = serve(api, "127.0.0.1", self.config["rest_port"])
                LOG.info("REST API on http://127.0.0.1:%d/fabriclab/ (%s)", self.rest.server_address[1],
                         "changes need the token of " + self.config["token_file"] if token else "reads only")
            except OSError as e:
                LOG.error("REST API not started on 127.0.0.1:%d: %s", self.config["rest_port"], e)
        LOG.info("fabric map: %d switches, %d hosts", len(self.by_dpid), len(self.mac_of))

    def _status(self) -> dict:
        """What ``GET /fabriclab/status`` answers."""
        return {"switches": len(self.by_dpid), "configured": len(self.ready), "ecn": self.ecn is not None,
                "pfc": self.pfc is not None, "arp_replies": self.arp_replies,
                "openflow_errors": list(self.of_errors)}

    # -- switch set-up ---------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev):
        """Install the complete forwarding state of a connecting switch."""
        dp = ev.msg.datapath
        # the id from the message itself: os-ken runs apps on native threads, and its own handler,
        # which copies it into the datapath object, may not have run yet (that id was None here
        # once in the VM lane, and the switch was never configured)
        dpid = ev.msg.datapath_id
        sw = self.by_dpid.get(dpid)
        if sw is None:
            LOG.warning("ignoring unknown datapath %016x", dpid)
            return
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                                      out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
        flows = self.routing.switch_flows(sw["name"])
        for e in flows:
            self._flow(dp, e.priority, parser.OFPMatch(**dict(e.match)), [self._action(dp, a) for a in e.actions],
                       table_id=e.table_id, goto_table=e.goto_table,
                       note=f"{sw['name']} flow mod table {e.table_id} priority {e.priority} match {dict(e.match)}")
        if os.environ.get(FAULT_ENV) == "refused_flow_rule":
            # tests: a rule every switch refuses (a goto_table may only go forward: OFPBIC_BAD_TABLE_ID)
            self._flow(dp, 1, parser.OFPMatch(), [], table_id=1, goto_table=0,
                       note=f"{sw['name']} flow mod table 1 goto_table 0 (injected by {FAULT_ENV})")
        req = parser.OFPBarrierRequest(dp)
        dp.set_xid(req)
        self.pending[dpid] = req.xid
        self.dpid_of[id(dp)] = dpid
        dp.send_msg(req)
        LOG.info("configured %s (%016x): %d routes, %d flow entries (%s routing), hash basis %d",
                 sw["name"], dpid, len(self.routing.routes[sw["name"]]), len(flows), self.routing.NAME,
                 self.routing.basis(sw["name"]))

    @staticmethod
    def _action(dp, a):
        """One typed action of controller.flowtables as an os-ken action."""
        ofp, parser = dp.ofproto, dp.ofproto_parser
        if isinstance(a, Output):
            return parser.OFPActionOutput(a.port)
        if isinstance(a, ToController):
            return parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)
        if isinstance(a, SetReg):
            return parser.OFPActionSetField(**{a.reg: a.value})
        if isinstance(a, SetField):
            return parser.OFPActionSetField(**{a.field: a.value})
        if isinstance(a, Multipath):
            return parser.NXActionMultipath(fields=a.fields, basis=a.basis,
                                            algorithm=nicira_ext.NX_MP_ALG_HASH_THRESHOLD, max_link=a.max_link,
                                            arg=0, ofs_nbits=nicira_ext.ofs_nbits(0, 15), dst=a.dst)
        raise TypeError(f"no os-ken form for {a!r}")

    def _flow(self, dp, priority, match, actions, table_id=0, goto_table=None, note=""):
        """Send one flow mod, noting what it was under its xid (an error names it)."""
        ofp, parser = dp.ofproto, dp.ofproto_parser
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
        if goto_table is not None:
            inst.append(parser.OFPInstructionGotoTable(goto_table))
        msg = parser.OFPFlowMod(dp, table_id=table_id, priority=priority, match=match, instructions=inst)
        dp.set_xid(msg)
        self.sent[msg.xid] = note
        dp.send_msg(msg)

    # CONFIG too: os-ken runs apps on native threads, so this app's flow mods and barrier can
    # reach the switch before os-ken's own port-description request, whose reply moves the
    # connection to MAIN; the barrier reply then arrives in CONFIG (seen once in the VM lane).
    @set_ev_cls(ofp_event.EventOFPBarrierReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def on_barrier(self, ev):
        """Mark a switch ready once its set-up barrier returns; write the ready file when all are."""
        dpid = self.dpid_of.get(id(ev.msg.datapath))
        if dpid is None or self.pending.get(dpid) != ev.msg.xid:
            return
        del self.pending[dpid]
        self.ready.add(dpid)
        if self.ready >= set(self.by_dpid):
            self._write_ready()

    def _ports_ready(self, what: str, started) -> None:
        if not self.ready >= set(self.by_dpid):
            raise HttpError(409, "the switches are not configured yet")
        if started is not None:
            raise HttpError(409, f"{what} is started already")

    def start_ecn(self, plan: EcnPlan) -> dict:
        """``POST /fabriclab/ecn/start``: apply the ECN plan (every port's first profile; the marker's
        record goes to the ``control-dir``); returns the record. HttpError 409 before every switch is
        configured, or when ECN is started already; SetupError when the kernel refuses."""
        self._ports_ready("ECN", self.ecn)
        ready = self.config.get("ready_file")
        where = os.path.dirname(os.path.abspath(ready)) if ready else os.getcwd()
        ecn = EcnPorts(plan, self.config.get("control_dir") or os.path.join(where, "control"))
        record = ecn.start()
        self.ecn = ecn
        return record

    def start_pfc(self, msg: PfcStart) -> dict:
        """``POST /fabriclab/pfc/start``: install the PFC plan on every port and host NIC and start the
        pauser (its hub's threads at real-time priority where allowed); returns the record. HttpError
        409 as :meth:`start_ecn`."""
        self._ports_ready("PFC", self.pfc)
        pfc = PfcPorts(msg.plan)
        pfc.hub_realtime = share_gil_realtime()
        self.pfc = pfc
        return pfc.start(msg.host_pids)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [HANDSHAKE_DISPATCHER, CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def on_error(self, ev):
        """Record and log every OpenFlow error a switch sends, in any connection state, decoded
        (type, code, the request it answers); the ready file and the status carry them, so set-up
        fails on one and a round's checks see the ones sent during it."""
        dpid = self.dpid_of.get(id(ev.msg.datapath), ev.msg.datapath.id)
        name = (self.by_dpid.get(dpid) or {}).get("name", f"{dpid:016x}" if dpid is not None else "?")
        err = {"switch": name, "t_unix_s": time.time(),
               **describe_error(ev.msg.type, ev.msg.code, bytes(ev.msg.data or b""), self.sent)}
        self.of_errors.append(err)
        LOG.error("OpenFlow error from %s: %s", name, err["text"])

    def _write_ready(self):
        path = self.config.get("ready_file")
        if not path:
            return
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"switches": sorted(self.ready), "t_unix_s": time.time(),
                       "openflow_errors": list(self.of_errors)}, f)
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
