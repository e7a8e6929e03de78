"""Paths through the fabric as its switches forward them: a connection's 5-tuple walked switch by
switch with each switch's own choice (its ECMP hash), from a tracer the caller gives (on the live
fabric, the datapath's tables: controller.datapaths.base.Datapath.trace_hop). Pure: the walk reads
the fabric map and asks the tracer; a header a switch rewrote (a routing strategy's tag) is handed to
the next switch as rewritten."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Traces run at once by :func:`trace_each`: each is a short process (on Open vSwitch,
#: ``ovs-appctl ofproto/trace``, about 10 ms per switch hop) that mostly waits on the switch
#: daemon's answer, so a few overlap (measured with the rest of a round's overhead:
#: bench/bench_round_overhead.py).
TRACERS = 4


def trace_each(one: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """``[one(x) for x in items]``, run from up to :data:`TRACERS` threads at once (``one`` walks a
    path with the live fabric's tracer); the first exception ``one`` raises is raised here."""
    items = list(items)
    if len(items) < 2:
        return [one(x) for x in items]
    with ThreadPoolExecutor(TRACERS) as pool:
        return list(pool.map(one, items))


def traced_path(fabric_map: dict, src: str, dst: str, src_port: int, dst_port: int, proto: str = "tcp", *,
                trace) -> dict[tuple[str, str], float]:
    """The path one ``src`` -> ``dst`` connection takes on the live fabric, switch by switch, from
    ``trace(bridge, flow)`` (on the live fabric, the datapath's own tables:
    :meth:`controller.datapaths.base.Datapath.trace_hop`, the ECMP hash of this 5-tuple as the switch
    computes it; a fake in tests), as link fractions of 1.0 (see
    :func:`experiments.fluid.max_min_on_paths`). The tracer returns the output port, or ``(port,
    rewrites)`` with the header fields the switch rewrote as ovs-fields (``{"dl_src": mac}``),
    which the next switch's flow then carries (Valiant's tag between its two phases).

    Raises:
        ValueError: a switch drops the flow or the walk does not reach ``dst``.
        SetupError: ovs-appctl failed.
    """
    hosts = {h["name"]: h for h in fabric_map["hosts"]}
    ends = {(sw["name"], p["port"]): (p["peer"], p["peer_port"]) for sw in fabric_map["switches"] for p in sw["ports"]}
    s, d = hosts[src], hosts[dst]
    out = {(src, s["switch"]): 1.0}
    sw, in_port = s["switch"], s["switch_port"]
    headers: dict[str, str] = {}
    for _ in range(2 * len(fabric_map["switches"]) + 1):
        port = trace(sw, f"in_port={in_port},{proto},nw_src={s['ip']},nw_dst={d['ip']},{proto}_src={src_port},"
                         f"{proto}_dst={dst_port}"      # tp_src is refused for udp ("prerequisites not met")
                         + "".join(f",{k}={v}" for k, v in headers.items()))
        if isinstance(port, tuple):
            port, rewrites = port
            headers.update(rewrites)
        if port is None or (sw, port) not in ends:
            raise ValueError(f"{sw} does not forward {src}:{src_port} -> {dst}:{dst_port} (port {port})")
        node, in_port = ends[(sw, port)]
        out[(sw, node)] = 1.0
        if node == dst:
            return out
        sw = node
    raise ValueError(f"{src}:{src_port} -> {dst}:{dst_port} does not reach {dst}")
