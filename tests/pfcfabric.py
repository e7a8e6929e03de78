"""A running fabric with PFC, and UDP flows through it, for the tests and benches that drive
traffic themselves (the run loop's PFC is experiments.features.pfc)."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

from common.errors import SetupError
from common.pfc import PfcConfig
from common.units import FRAME_BYTES
from controller.dataplane import ovsctl
from experiments import probe
from experiments.fabric import LiveFabric
from experiments.features.pfc.plan import pfc_plan
from experiments.live import Agents, warm_up_reachability


@contextlib.contextmanager
def live_fabric(fabric, cfg: PfcConfig, buf_bytes: int, workdir: Path, state, burst_bytes: int | None = None,
                host_fifo_bytes: int = 1000 * FRAME_BYTES, ovs_tx_budget_bytes: int = 32 << 20):
    """A running fabric with priority queues and PFC as ``cfg`` says (tests and benches that drive
    traffic themselves): the controller's PFC plan, OVS's userspace transmit buffer raised (every
    held frame counts against it), every host pair's ARP resolved (an unresolved neighbour queues
    only ~92 frames). Yields ``(LiveFabric, plan)``; everything is torn down on exit.

    Raises:
        SetupError: the fabric, the controller or the PFC plan failed to come up.
    """
    env = probe.probe()
    plan = pfc_plan(fabric.to_map(), cfg, buf_bytes, burst_bytes, host_fifo_bytes, env["shaper"]["slack_s"])
    datapath = env["datapath"]
    with LiveFabric(fabric, workdir, state, datapath=datapath, pfc_plan=plan) as lf:
        # first the pings: ovs-vswitchd opens its transmit socket when it forwards its first packet
        # (a freshly started OVS has none to enlarge)
        warm_up_reachability(lf)
        buf = contextlib.nullcontext()
        if datapath == "user":
            buf = ovsctl.OvsTxBuffer(ovs_tx_budget_bytes, state)
        with buf:
            if datapath == "user" and not (buf.applied or buf.reason == "already large enough"):
                raise SetupError(f"could not enlarge Open vSwitch's transmit buffer: {buf.record()}")
            yield lf, plan


def start_udp_flows(lf, state, flows: list[dict], out: Path, port: int, deadline_unix_s: float,
                    start_in_s: float = 0.5, idle_s: float | None = None):
    """Start UDP traffic agents (traffic.agent) for ``flows`` and release them together.

    Args:
        flows: ``[{"src", "dst", "dscp", "bytes" | "duration_s"}]``, one flow per source host.
        out: folder for the agents' records (``<host>.rx.json``, ``<host>.tx.json``).
        port: the receivers' UDP port.
        idle_s: a receiver ends a flow whose end marker was lost this long after its last
            datagram (None: traffic.agent.UDP_IDLE_S); longer than any pause held on purpose.

    Returns:
        the released ``experiments.live.Agents`` (call ``wait(deadline)`` then ``kill()``).

    Raises:
        SetupError: an agent did not get ready.
    """
    Path(out).mkdir(parents=True, exist_ok=True)
    agents = Agents(lf, state)
    by_dst: dict[str, int] = {}
    for f in flows:
        by_dst[f["dst"]] = by_dst.get(f["dst"], 0) + 1
    for dst, n in by_dst.items():
        job = {"role": "udp-receiver", "port": port, "expect_flows": n,
               "deadline_unix_s": deadline_unix_s, "out": str(Path(out) / f"{dst}.rx.json")}
        if idle_s is not None:
            job["idle_s"] = idle_s
        agents.start(dst, "rx", job)
    for i, f in enumerate(flows):
        size = {"bytes": f["bytes"]} if "bytes" in f else {"duration_s": f["duration_s"]}
        agents.start(f["src"], "tx", {"role": "udp-sender", "dscp": f["dscp"], "deadline_unix_s": deadline_unix_s,
                                      "out": str(Path(out) / f"{f['src']}.tx.json"),
                                      "flows": [{"dst_ip": lf.fabric.node(f["dst"]).ip, "port": port, "flow_id": i,
                                                 **size}]})
    agents.ready_then_release(start_in_s)
    return agents


def udp_flow_records(lf, flows: list[dict], out: Path) -> list[tuple[dict, dict | None]]:
    """For each flow of :func:`start_udp_flows`, its sender's record and its receiver's (None if
    nothing arrived), from the agents' files in ``out``."""
    res = []
    for f in flows:
        tx = json.loads((Path(out) / f"{f['src']}.tx.json").read_text())["flows"][0]
        rx = json.loads((Path(out) / f"{f['dst']}.rx.json").read_text())["flows"]
        ip = lf.fabric.node(f["src"]).ip
        res.append((tx, next((r for r in rx if r["src_ip"] == ip and r["src_port"] == tx["src_port"]), None)))
    return res
