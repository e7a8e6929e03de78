"""RoCEv2 traffic of a round: the agents' jobs (one ``roce`` job per host, its queue pairs,
the rate controller's parameters), the flows of a scenario's traffic plan, and starting the
agents on a live fabric."""
from __future__ import annotations

from pathlib import Path

from common.roce import RECEIVER_QPN, SENDER_QPN, SPORT_BASE
from experiments.live import Agents
from experiments.scenario import all_controller_params
from traffic.patterns import message_schedule
from traffic.ratecontrol import RATE_CONTROLLERS, has_params
from experiments.model import RocePlugin, Scenario


def default_rto_s(buffer_bytes: int, rate_bps: float, hops: int = 4) -> float:
    """A local ACK timeout above the longest round trip a full buffer can cause: twice the drain
    time of ``hops`` full buffers at ``rate_bps``, at least 50 ms."""
    return max(0.05, 2 * hops * buffer_bytes * 8 / rate_bps)


def host_jobs(lf, flows: list[dict], out: Path, deadline_unix_s: float, mode: str, line_rate_mbps: float,
              rate_mbps: float | None = None, controllers: dict | None = None, dscp: int = 26,
              cnp_dscp: int = 48, mtu_bytes: int = 1024, ack_every: int = 16, rto_s: float = 0.3,
              sample_interval_s: float = 0.05, pcap_hosts: tuple = (), cc_plugin: str | None = None,
              cc_params: dict | None = None) -> dict[str, dict]:
    """The ``roce`` job of every host that sends or receives one of ``flows``.

    Args:
        flows: ``[{"flow_id", "src", "dst", "bytes" | "messages": [{"at_s", "bytes"}] |
            "duration_s" (+ "message_bytes")}]``.
        mode: a registered rate controller (traffic.ratecontrol.RATE_CONTROLLERS; ``none`` at
            ``rate_mbps``), or ``plugin:<name>`` with ``cc_plugin`` (the plug-in file's absolute
            path) and its ``cc_params``.
        controllers: ``{mode: parameters}`` (each registered controller's ``params_cls``); a
            controller not in it gets its defaults scaled to ``line_rate_mbps``. Every job
            carries every registered controller's parameters, as a dict under its name.
        pcap_hosts: hosts whose interface is captured to ``<out>/<host>.pcap``.

    Raises:
        ValueError: an unknown mode without a plug-in, or ``none`` without a rate.
    """
    if cc_plugin is None and mode not in RATE_CONTROLLERS:
        raise ValueError(f"roce mode must be one of {', '.join(RATE_CONTROLLERS)} or a plug-in, not {mode!r}")
    if mode == "none" and not rate_mbps:
        raise ValueError("roce mode none needs rate_mbps")
    line_bps = line_rate_mbps * 1e6
    given = dict(controllers or {})
    cc = {m: (given.get(m) or c.params_cls.scaled(line_bps)).as_dict()
          for m, c in RATE_CONTROLLERS.items() if has_params(c)}
    if cc_plugin is not None:
        cc.update(cc_plugin=str(cc_plugin), cc_params=dict(cc_params or {}))
    jobs: dict[str, dict] = {}

    def job(h: str) -> dict:
        if h not in jobs:
            n = lf.fabric.node(h)
            jobs[h] = {"role": "roce", "ifname": lf.fabric.host_attachment(h).b_intf, "mac": n.mac, "ip": n.ip,
                       "out": str(Path(out) / f"{h}.roce.json"), "deadline_unix_s": deadline_unix_s,
                       "mode": mode, "line_rate_mbps": line_rate_mbps, "rate_mbps": rate_mbps,
                       **cc, "dscp": dscp, "cnp_dscp": cnp_dscp, "mtu_bytes": mtu_bytes,
                       "ack_every": ack_every, "rto_s": rto_s, "sample_interval_s": sample_interval_s,
                       "pcap": str(Path(out) / f"{h}.pcap") if h in pcap_hosts else None,
                       "send": [], "receive": []}
        return jobs[h]

    for f in flows:
        i = f["flow_id"]
        src, dst = lf.fabric.node(f["src"]), lf.fabric.node(f["dst"])
        send = {"flow_id": i, "qpn": SENDER_QPN + i, "udp_sport": SPORT_BASE + i,
                "peer": {"mac": dst.mac, "ip": dst.ip, "qpn": RECEIVER_QPN + i}}
        if "messages" in f:
            send["messages"] = f["messages"]
            expect = sum(m["bytes"] for m in f["messages"])
        elif "bytes" in f:
            send["messages"] = [{"at_s": 0.0, "bytes": f["bytes"]}]
            expect = f["bytes"]
        else:
            send["duration_s"] = f["duration_s"]
            send["message_bytes"] = f.get("message_bytes", 1 << 20)
            expect = None
        job(f["src"])["send"].append(send)
        job(f["dst"])["receive"].append({"flow_id": i, "qpn": RECEIVER_QPN + i, "expect_bytes": expect,
                                         "peer": {"mac": src.mac, "ip": src.ip, "qpn": SENDER_QPN + i,
                                                  "udp_sport": SPORT_BASE + i}})
    return jobs


def start_roce_flows(lf, state, flows: list[dict], out: Path, deadline_unix_s: float, start_in_s: float = 1.0,
                     **job_args):
    """Start one RoCE agent per host of ``flows`` (see :func:`host_jobs` for ``job_args``) and release
    them together. Returns the released ``experiments.live.Agents`` (``wait(deadline)``, then
    ``kill()``). Raises SetupError when an agent did not get ready."""
    Path(out).mkdir(parents=True, exist_ok=True)
    agents = Agents(lf, state)
    for h, j in host_jobs(lf, flows, out, deadline_unix_s, **job_args).items():
        agents.start(h, "roce", j)
    agents.ready_then_release(start_in_s)
    return agents


def scenario_flows(sc: Scenario, plan: list[dict], seed: int | None = None) -> list[dict]:
    """The RoCE flows of a resolved scenario's traffic ``plan`` (traffic.patterns.flow_plan): incast
    senders carry ``traffic.responses`` messages of ``response_bytes`` at the times of
    traffic.patterns.message_schedule (``arrival``, ``load`` of the receiver's link, ``seed``: the
    round's, default the scenario's); other patterns one message of ``flow_bytes``, or a
    long-lived flow for ``duration_s``."""
    t = sc.traffic
    if t.pattern != "incast":
        return [{"flow_id": f["flow_id"], "src": f["src"], "dst": f["dst"],
                 **({"bytes": f["bytes"]} if f["bytes"] is not None else {"duration_s": f["duration_s"]})}
                for f in plan]
    times = message_schedule(len(plan), t.responses, t.response_bytes, t.arrival, t.load,
                             sc.topology.host_rate_mbps * 1e6, sc.seed if seed is None else seed)
    return [{"flow_id": f["flow_id"], "src": f["src"], "dst": f["dst"],
             "messages": [{"at_s": round(at, 6), "bytes": t.response_bytes} for at in ts]}
            for f, ts in zip(plan, times)]


def scenario_job_args(sc: Scenario, mode: str, sample_interval_s: float = 0.05,
                      plugin: RocePlugin | None = None) -> dict:
    """Keyword arguments of :func:`start_roce_flows` for a resolved scenario in RoCE ``mode``
    (a round's ``roce_mode``; with its ``roce_plugin``, the plug-in's file and parameters)."""
    r, host_mbps = sc.roce, sc.topology.host_rate_mbps
    return {"mode": mode, "line_rate_mbps": host_mbps, "rate_mbps": r.rate_mbps or host_mbps,
            "controllers": all_controller_params(sc),
            "cc_plugin": plugin.path if plugin is not None else None,
            "cc_params": dict(plugin.params) if plugin is not None else None,
            "dscp": sc.traffic.dscp, "cnp_dscp": r.cnp_dscp,
            "mtu_bytes": r.mtu_bytes, "ack_every": r.ack_every,
            "rto_s": r.rto_s or default_rto_s(sc.queues.limit_bytes, host_mbps * 1e6),
            "sample_interval_s": sample_interval_s, "pcap_hosts": tuple(r.pcap_hosts or ())}


def collective_job_args(sc: Scenario, mode: str, plugin: RocePlugin | None = None) -> dict:
    """The RoCE settings of a resolved scenario's collective over RoCEv2 (traffic.collective's
    ``roce`` job field) in ``mode`` (with a round's plug-in): :func:`scenario_job_args` as job
    fields (parameters as dicts, no plug-in fields without a plug-in), without the pcap and the
    traffic section's DSCP: the lossless class's default, 26, as for RoCE traffic."""
    a = scenario_job_args(sc, mode, plugin=plugin)
    a.pop("pcap_hosts")
    a.update({m: p.as_dict() for m, p in a.pop("controllers").items()})
    if plugin is None:
        del a["cc_plugin"], a["cc_params"]
    a["dscp"] = 26
    return a
