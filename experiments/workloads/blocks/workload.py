"""An incast in barrier-synchronised blocks over persistent connections (``traffic.incast_mode:
blocks``; traffic.blocks): a server on every sender, started and READY (listening) first, then
the client on the receiver, READY once every connection is established; both released together.
blocks.csv, block_connections.csv, queues.csv, ports.csv and the ``blocks`` section per round;
blocks_rounds.csv side by side."""
from __future__ import annotations

import json
import time
from pathlib import Path

from experiments import analysis
from experiments.context import RoundRecord, maybe_fault
from experiments.live import Agents, start_sampler, stop_sampler
from experiments.tables import write_csv
from experiments.workloads.base import Workload
from experiments.workloads.blocks import plan as blocks_plan, summary as blocks_summary
from experiments.workloads.flows import AGENT_EXIT_GRACE_S, TAIL_GRACE_S
from experiments.model import Round, Scenario
from traffic.patterns import flow_plan

#: Seconds the client may take to connect to every server (before READY) within its deadline.
CONNECT_S = 10.0


class IncastBlocks(Workload):
    """The round's incast as blocks: ``Round.traffic.senders`` servers x ``block_bytes`` per block."""
    name = "incast_blocks"

    @staticmethod
    def wants(sc: Scenario, rnd: Round) -> bool:
        """Rounds without a collective whose traffic is an incast over TCP with ``incast_mode: blocks``."""
        t = rnd.traffic
        return (rnd.collective.kind is None and t.pattern == "incast" and t.transport == "tcp"
                and t.incast_mode == "blocks")

    def describe_round(self, rnd: Round) -> str:
        """``blocks of <N> x <block_bytes> B, <cc>``."""
        t = rnd.traffic
        return f"blocks of {t.senders} x {t.block_bytes} B, {rnd.hosts.tcp_congestion_control}"

    def senders(self, rnd: Round) -> list[dict]:
        """The round's senders (traffic.patterns.flow_plan of ``Round.traffic``): one plan row each
        (``src``, ``src_ip``, ``dst``, ``dst_ip``)."""
        return flow_plan(rnd.traffic, self.ctx.fabric, rnd.seed)

    def run_round(self, lf, state, rec: RoundRecord) -> dict:
        """Start the sampler and every sender's server, wait for them to listen, start the client
        (it connects before READY), release all at one start time and wait; returns
        ``{"codes": {"<host>.srv|cli": exit code}, "senders": [host, ...], "receiver": host}``."""
        sc, t = self.ctx.sc, rec.round.traffic
        plan = self.senders(rec.round)
        agent_dir = rec.dir / "agents"
        run_s = t.duration_s + TAIL_GRACE_S if t.duration_s else t.timeout_s
        deadline = time.time() + CONNECT_S + t.start_delay_s + run_s
        sampler = start_sampler(lf, state, rec.dir, sc.measurement.sample_hz, sc.measurement.sampler)
        servers, client = Agents(lf, state), Agents(lf, state)
        try:
            for f in plan:
                servers.start(f["src"], blocks_plan.SERVER_ROLE, blocks_plan.server_job(
                    t.port, deadline + AGENT_EXIT_GRACE_S, agent_dir / f"{f['src']}.{blocks_plan.SERVER_ROLE}.json",
                    t.dscp))
            servers.wait_ready()
            client.start(t.receiver, blocks_plan.CLIENT_ROLE, blocks_plan.client_job(
                [{"host": f["src"], "ip": f["src_ip"], "port": t.port} for f in plan], t, deadline,
                agent_dir / f"{t.receiver}.{blocks_plan.CLIENT_ROLE}.json"))
            client.wait_ready()
            start_at = time.time() + t.start_delay_s
            servers.release(start_at)
            client.release(start_at)
            until = f"{t.blocks} blocks" if t.blocks else ""
            until += (" or " if until and t.duration_s else "") + (f"{t.duration_s:g} s" if t.duration_s else "")
            self.ctx.say(f"incast in blocks: {len(plan)} senders x {t.block_bytes} B per block -> {t.receiver}, "
                         f"{until}, connections set up before the start")
            maybe_fault("after_traffic_start")
            codes = client.wait(deadline + AGENT_EXIT_GRACE_S)
            codes.update(servers.wait(deadline + 2 * AGENT_EXIT_GRACE_S))
            time.sleep(sc.measurement.post_s)
        finally:
            client.kill()
            servers.kill()
            stop_sampler(sampler)
        return {"codes": codes, "senders": [f["src"] for f in plan], "receiver": t.receiver}

    def summarize(self, rec: RoundRecord) -> dict:
        """blocks.csv, block_connections.csv, queues.csv, ports.csv and the round's summary (the
        ``blocks`` section, the bottleneck as the flows workload reports it). No per-flow rows
        (``rec.rows`` stays None: the ECN and PFC sections, which need flows, are left out)."""
        sc, fmap, out = self.ctx.sc, self.ctx.fabric_map, rec.dir
        client, servers = blocks_summary.load_records(out / "agents", rec.raw["receiver"], rec.raw["senders"],
                                                 rec.raw["codes"])
        env = json.loads((out / "environment.json").read_text())
        receiver = rec.raw["receiver"]
        start = client.get("start_at_unix_s") or 0.0
        ends = [b["end_unix_s"] - start for b in client.get("blocks", []) if b.get("end_unix_s") is not None]
        window = (0.0, max(ends) if ends else 0.0)
        _, ports = analysis.write_port_tables(out, sc, fmap, start, window[1])
        bn, chosen = analysis.choose_bottleneck(ports, receiver, rec.options.get("receiver_bottleneck_reason"))
        rate = next((h["rate_mbps"] for h in fmap["hosts"] if h["name"] == receiver), None)
        rule = self._stall_rule(env, client, servers, rate)
        conns = blocks_summary.connection_rows(client, servers)
        rows = blocks_summary.block_rows(client, conns, rule)
        write_csv(out / "blocks.csv", list(blocks_summary.BLOCK_COLUMNS), rows)
        write_csv(out / "block_connections.csv", list(blocks_summary.CONNECTION_COLUMNS), conns)
        bsum = analysis.bottleneck_summary(bn, receiver, window)
        return {
            "scenario": sc.name, "round": rec.round.name if self.ctx.multi else None,
            "pattern": "incast", "incast_mode": "blocks",
            "topology": dict(sc.topology.model_dump(), oversubscription=fmap["params"].get("oversubscription")),
            "routing": env.get("routing"), "datapath": env["datapath"], "kernel": env["kernel"],
            "scale": env.get("scale"),
            "blocks": blocks_summary.blocks_summary(client, servers, rows, rate, rule),
            "bottleneck": dict(bsum, chosen=chosen) if bsum is not None and chosen else bsum,
            "total_drops": sum(p["drops"] for p in ports),
            "sampler": json.loads((out / "sampler.json").read_text()),
            "timings_s": rec.timings_s,
            "hosts_tcp": analysis.hosts_tcp(env, sections=self.ctx.sections),
        }

    def _stall_rule(self, env: dict, client: dict, servers: dict, rate_mbps: float | None):
        """The round's blocks_summary.StallRule: its senders and block bytes, the receiver's rate, the
        measured round trip (``scale.measured_rtt_s`` of the round's environment record), the
        switch buffer (``queues``) and the servers' segment size; None without a rate or senders."""
        n, size = client.get("senders"), client.get("block_bytes")
        if not (n and size and rate_mbps):
            return None
        return blocks_summary.stall_rule(n, size, rate_mbps, (env.get("scale") or {}).get("measured_rtt_s"),
                                    self.ctx.sc.queues.limit_bytes, blocks_summary.senders_mss_bytes(servers))

    def format_round(self, summary: dict, rdir: Path) -> str:
        """The folder, the blocks line and the bottleneck line."""
        bn = summary.get("bottleneck") or {}
        return (f"{rdir}\n  {blocks_summary.format_line(summary['blocks'])}\n"
                f"  bottleneck: {bn.get('intf')} (toward {bn.get('peer')}), peak backlog "
                f"{bn.get('peak_backlog_packets')} packets, drops {bn.get('drops')}; all ports {summary['total_drops']} "
                "drops")

    def finish_run(self, done: list[tuple[RoundRecord, dict]]) -> None:
        """blocks_rounds.csv (and the table on the terminal): goodput, block times, retransmissions
        and timeouts per round, so an RTOmin, N or block-size sweep reads as one table."""
        out = self.ctx.out
        rows = [blocks_summary.round_row(rec.index, rec.round, s, str(rec.dir.relative_to(out))) for rec, s in done]
        if rows:
            write_csv(out / "blocks_rounds.csv", list(blocks_summary.ROUND_COLUMNS), rows)
            if not self.ctx.quiet:
                print(blocks_summary.format_rounds(rows, out))
