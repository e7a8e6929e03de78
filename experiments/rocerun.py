"""RoCEv2 flows on a live fabric (issue 7): one traffic.roce agent per host, flow records.

Each flow is one reliable-connection queue pair from ``src`` to ``dst``: the
sender's QP number is ``0x100 + flow_id``, the receiver's ``0x200 + flow_id``,
and the UDP source port (RoCEv2's ECMP entropy) ``49152 + flow_id``. Frames go
to the destination host's MAC (the controller routes on IP and answers ARP with
host MACs).
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

from common.dcqcn import DcqcnParams

SENDER_QPN, RECEIVER_QPN, SPORT_BASE = 0x100, 0x200, 49152
MODES = ("dcqcn", "none")


def jain_index(rates: list[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2) of non-negative rates, in (0, 1]
    (R. Jain, D. Chiu, W. Hawe, DEC-TR-301, 1984). Raises ValueError on an empty list or all zeros."""
    s, q = sum(rates), sum(r * r for r in rates)
    if not rates or q == 0:
        raise ValueError("Jain's index needs at least one non-zero rate")
    return s * s / (len(rates) * q)


def default_rto_s(buffer_bytes: int, rate_bps: float, hops: int = 4) -> float:
    """A local ACK timeout above the longest round trip a full buffer can cause: twice the drain
    time of ``hops`` full buffers at ``rate_bps``, at least 50 ms."""
    return max(0.05, 2 * hops * buffer_bytes * 8 / rate_bps)


def host_jobs(lf, flows: list[dict], out: Path, deadline_unix_s: float, mode: str, line_rate_mbps: float,
              rate_mbps: float | None = None, dcqcn: DcqcnParams | None = None, dscp: int = 26,
              cnp_dscp: int = 48, mtu_bytes: int = 1024, ack_every: int = 16, rto_s: float = 0.3,
              sample_interval_s: float = 0.05, pcap_hosts: tuple = ()) -> dict[str, dict]:
    """The ``roce`` job of every host that sends or receives one of ``flows``.

    Args:
        flows: ``[{"flow_id", "src", "dst", "bytes" | "messages": [{"at_s", "bytes"}] |
            "duration_s" (+ "message_bytes")}]``.
        mode: ``dcqcn`` (rates from ``dcqcn``, scaled defaults when None) or ``none`` (``rate_mbps``).
        pcap_hosts: hosts whose interface is captured to ``<out>/<host>.pcap``.

    Raises:
        ValueError: an unknown mode, or ``none`` without a rate.
    """
    if mode not in MODES:
        raise ValueError(f"roce mode must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "none" and not rate_mbps:
        raise ValueError("roce mode none needs rate_mbps")
    params = dcqcn or DcqcnParams.scaled(line_rate_mbps * 1e6)
    jobs: dict[str, dict] = {}

    def job(h: str) -> dict:
        if h not in jobs:
            n = lf.fabric.node(h)
            jobs[h] = {"role": "roce", "ifname": lf.fabric.host_attachment(h).b_intf, "mac": n.mac, "ip": n.ip,
                       "out": str(Path(out) / f"{h}.roce.json"), "deadline_unix_s": deadline_unix_s,
                       "mode": mode, "line_rate_mbps": line_rate_mbps, "rate_mbps": rate_mbps,
                       "dcqcn": params.as_dict(), "dscp": dscp, "cnp_dscp": cnp_dscp, "mtu_bytes": mtu_bytes,
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
    them together. Returns the released ``experiments.runner._Agents`` (``wait(deadline)``, then
    ``kill()``). Raises SetupError when an agent did not get ready."""
    from experiments.runner import _Agents
    Path(out).mkdir(parents=True, exist_ok=True)
    agents = _Agents(lf, state)
    for h, j in host_jobs(lf, flows, out, deadline_unix_s, **job_args).items():
        agents.start(h, "roce", j)
    try:
        agents.wait_ready()
    except BaseException:
        agents.kill()
        raise
    agents.release(time.time() + start_in_s)
    return agents


def flow_records(flows: list[dict], out: Path) -> list[dict]:
    """Per flow of ``flows``: its sender QP's record (``tx``) and its receiver QP's (``rx``), from the
    agents' result files in ``out``. A missing file or record gives None there."""
    cache: dict[str, dict | None] = {}

    def load(h):
        if h not in cache:
            p = Path(out) / f"{h}.roce.json"
            cache[h] = json.loads(p.read_text()) if p.exists() else None
        return cache[h]

    res = []
    for f in flows:
        tx_all, rx_all = load(f["src"]), load(f["dst"])
        tx = next((r for r in (tx_all or {}).get("senders", []) if r["flow_id"] == f["flow_id"]), None)
        rx = next((r for r in (rx_all or {}).get("receivers", []) if r["flow_id"] == f["flow_id"]), None)
        res.append({"flow": f, "tx": tx, "rx": rx,
                    "errors": [x.get("error") for x in (tx_all, rx_all) if x and x.get("error")]})
    return res


def rate_series_bps(samples: list, t0_unix_s: float, t1_unix_s: float) -> float:
    """Mean rate (bit/s) between two times from ``[(t_unix_s, cumulative_bytes), ...]`` samples,
    interpolating linearly. Raises ValueError when the samples do not cover the interval."""
    if not samples or samples[0][0] > t0_unix_s or samples[-1][0] < t1_unix_s:
        raise ValueError("samples do not cover the interval")

    def at(t):
        for (ta, ba), (tb, bb) in zip(samples, samples[1:]):
            if ta <= t <= tb:
                return ba + (bb - ba) * ((t - ta) / (tb - ta) if tb > ta else 0)
        return samples[-1][1]
    return (at(t1_unix_s) - at(t0_unix_s)) * 8 / (t1_unix_s - t0_unix_s) if t1_unix_s > t0_unix_s else math.nan
