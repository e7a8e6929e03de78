"""Mixed-parallel training iterations (role ``parallel`` of :mod:`traffic.agent`): tensor,
pipeline and data parallelism at once, on the plan of :mod:`common.parallelism`.

Each rank runs one iteration after another (GPipe): forward, microbatch by microbatch, it
receives the activation from the rank of the stage before, sleeps each of its layers' compute
time / M (compute is emulated by time: the CPU is the emulator's), reduces the activation over
its tensor group after every layer (a ring AllReduce, over the NVLink channel inside the
server), and sends it to the rank of the next stage; backward, microbatches in reverse, the
activation's gradient comes back the same way. A second thread reduces the stage's parameter
gradient (1/T of each layer, in DDP buckets) over the rank's data-parallel group, a bucket as
soon as its layers' last backward step ends when ``overlap`` is on, else after backward.

Arrays are real: activations start as seeded integers and are reduced exactly (the tensor
AllReduce result is checked against its exact sum at the last iteration); gradients likewise.
Every move goes through :meth:`traffic.collective.Rank.run_steps`, so pairs inside a server
use the NVLink pipes and other pairs TCP, and every byte a rank sends is counted by kind and
destination.

Job: the collective job's fields (``ranks``, ``local_ranks``, ``nvlink``, ``dscp``,
``deadline_unix_s``, ``out``, ``out_dir``) and::

    {"plan": {"ranks", "tensor", "pipeline", "microbatches", "activation_bytes"},
     "layers": [[name, params_bytes, forward_s, backward_s], ...],   # the whole model
     "bucket_bytes": int, "iterations": int, "overlap": bool, "seed": int}

Result per rank: ``iterations`` (``begin_unix_s``, ``forward_end_unix_s``,
``backward_end_unix_s``, ``end_unix_s``, ``tensor_s``/``pipeline_wait_s`` seconds spent in
tensor AllReduces and waiting for a neighbour stage, ``buckets`` ``[index, ready, start, end]``),
``sent`` ``[[kind, dst rank, bytes, messages], ...]`` over all iterations, ``exact``: the
last iteration's tensor and data reductions equal their exact sums, and ``tcp``: each TCP
connection's :func:`wire_counters` as the job ends (``dst_rank`` for one it opened and sends on,
``src_rank`` for one it accepted and only acknowledges on).
"""
from __future__ import annotations

import socket
import struct
import threading
import time

import numpy as np

from common.hierarchical import Move, group_allreduce_moves
from common.parallelism import DATA_PHASES, TENSOR_PHASES, Plan, stage_buckets
from common.training import Layer
from traffic.collective import Rank, run_ranks
from traffic.training import bucket_thread, end_iteration, gradient, sleep_until


#: The bucket index the checked activation's seed uses (traffic.training.gradient), apart from
#: every gradient bucket's.
ACTIVATION_KEY = 1_000_000


#: struct tcp_info (linux/tcp.h) fields of a connection's wire counters: (name, offset, format).
TCP_WIRE_FIELDS = (("total_retrans", 100, "I"), ("segs_out", 136, "I"), ("data_segs_out", 156, "I"),
                   ("bytes_retrans", 208, "Q"))
#: Bytes of struct tcp_info asked for (through tcpi_bytes_retrans, Linux 4.19).
TCP_WIRE_BYTES = 216


def wire_counters(sock) -> dict:
    """A connection's segments sent (``segs_out``: data and pure acknowledgements, GSO segments
    counted one by one), data segments among them (``data_segs_out``, retransmissions included),
    retransmitted segments and bytes, from struct tcp_info; None for a field the kernel lacks."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_WIRE_BYTES)
    return {n: (struct.unpack_from("=" + f, raw, off)[0] if len(raw) >= off + struct.calcsize(f) else None)
            for n, off, f in TCP_WIRE_FIELDS}


def _remap(steps: list[list[Move]], members: list[int]) -> list[list[Move]]:
    """``steps`` among group positions 0..m-1 with every rank replaced by ``members[position]``."""
    return [[Move(mv.step, mv.phase, members[mv.src], members[mv.dst], mv.chunk, mv.lo, mv.hi, mv.dst_lo, mv.op)
             for mv in st] for st in steps]


class PipelineRank:
    """One rank's mixed-parallel iterations (module docstring)."""

    def __init__(self, rank: Rank, job: dict):
        """Builds the rank's schedules and sets ``rank.steps`` to their union (its peers).
        Raises ValueError for a plan that does not fit (common.parallelism)."""
        self.rank, self.job = rank, job
        p = job["plan"]
        self.plan = plan = Plan(p["ranks"], p["tensor"], p["pipeline"], p["microbatches"], p["activation_bytes"])
        r = rank.rank
        layers = [Layer(*x) for x in job["layers"]]
        self.stage = plan.stage_of(r)
        self.layers, self.buckets = stage_buckets(plan, layers, self.stage, job["bucket_bytes"])
        self.act_el = plan.activation_bytes // 4
        tg, dg = plan.tensor_group(r), plan.data_group(r)
        self.tp = _remap(group_allreduce_moves(list(range(len(tg))), self.act_el, TENSOR_PHASES), tg)
        self.dp = {b.index: _remap(group_allreduce_moves(list(range(len(dg))), b.params_bytes // 4, DATA_PHASES), dg)
                   for b in self.buckets}
        self.next, self.prev = plan.next_stage(r), plan.prev_stage(r)
        pp = []
        for a, b in ((r, self.next), (self.next, r), (self.prev, r), (r, self.prev)):
            if a is not None and b is not None:
                pp.append([Move(0, "pipeline", a, b, 0, 0, self.act_el, 0, "copy")])
        rank.steps = self.tp + [st for s in self.dp.values() for st in s] + pp
        self.ready_after = {b.layers[-1]: b.index for b in self.buckets}
        self.iterations: list[dict] = []
        self.sent: dict[tuple[str, int], list[int]] = {}
        self.exact = {"tensor": None, "data": None}
        self._lock = threading.Lock()

    def _count(self, kind: str, rec: dict, steps: list[list[Move]]) -> None:
        """Add what ``rec`` says this rank sent to the kind's per-destination count."""
        mine = [mv.dst for st in steps for mv in st if mv.src == self.rank.rank]
        with self._lock:
            for (dst, row) in zip(mine, rec["steps"]):
                c = self.sent.setdefault((kind, dst), [0, 0])
                c[0] += row[3]
                c[1] += 1

    def _p2p(self, src: int, dst: int, buf: np.ndarray) -> None:
        """One pipeline message of ``buf`` from ``src`` to ``dst`` (this rank is one of them)."""
        steps = [[Move(0, "pipeline", src, dst, 0, 0, self.act_el, 0, "copy")]]
        rec = {"steps": [], "sent": 0, "received": 0}
        self.rank.run_steps(buf, steps, rec)
        if src == self.rank.rank:
            self._count("pipeline", rec, steps)

    def _tensor(self, buf: np.ndarray, it: int, check: bool) -> float:
        """The tensor group's AllReduce of ``buf`` (in place); its seconds. With ``check``, records
        whether the result equals the exact sum of every member's input."""
        if not self.tp:
            return 0.0
        t0 = time.time()
        rec = {"steps": [], "sent": 0, "received": 0}
        if check:
            seed = self.job.get("seed", 0)
            group = self.plan.tensor_group(self.rank.rank)
            want = sum(gradient(seed, m, it, ACTIVATION_KEY, self.act_el).astype(np.float64) for m in group)
            buf[:] = gradient(seed, self.rank.rank, it, ACTIVATION_KEY, self.act_el)
        self.rank.run_steps(buf, self.tp, rec)
        self._count("tensor", rec, self.tp)
        if check:
            self.exact["tensor"] = bool(np.array_equal(buf.astype(np.float64), want))
        return time.time() - t0

    def run(self, begin_unix_s: float) -> None:
        """Every iteration from ``begin_unix_s``."""
        sleep_until(begin_unix_s)
        for it in range(self.job["iterations"]):
            self.iterations.append(self._iteration(it))

    def _iteration(self, it: int) -> dict:
        job, r, m_count = self.job, self.rank.rank, self.plan.microbatches
        last = it == job["iterations"] - 1
        seed = job.get("seed", 0)
        grads = {b.index: gradient(seed, r, it, b.index, b.params_bytes // 4) for b in self.buckets}
        rec = {"iteration": it, "buckets": [], "tensor_s": 0.0, "pipeline_wait_s": 0.0}
        errors: list[str] = []

        def reduce_bucket(b: int, ready: float) -> None:
            start = time.time()
            srec = {"steps": [], "sent": 0, "received": 0}
            x = grads[b].copy()
            self.rank.run_steps(x, self.dp[b], srec)
            self._count("data", srec, self.dp[b])
            rec["buckets"].append([b, ready, start, time.time()])
            if last:
                group = self.plan.data_group(r)
                n = grads[b].size
                want = sum(gradient(seed, m, it, b, n).astype(np.float64) for m in group)
                ok = bool(np.array_equal(x.astype(np.float64), want))
                self.exact["data"] = ok if self.exact["data"] is None else self.exact["data"] and ok
        th, todo = bucket_thread(len(self.buckets), reduce_bucket, errors)
        rec["begin_unix_s"] = time.time()
        th.start()
        act = np.zeros(self.act_el, dtype=np.float32)
        for m in range(m_count):
            if self.prev is not None:
                t0 = time.time()
                self._p2p(self.prev, r, act)
                rec["pipeline_wait_s"] += time.time() - t0
            for i, layer in enumerate(self.layers):
                sleep_until(time.time() + layer.forward_s / m_count)
                rec["tensor_s"] += self._tensor(act, it, last and m == 0 and i == 0)
            if self.next is not None:
                self._p2p(r, self.next, act)
        rec["forward_end_unix_s"] = time.time()
        held = []
        for m in reversed(range(m_count)):
            if self.next is not None:
                t0 = time.time()
                self._p2p(self.next, r, act)
                rec["pipeline_wait_s"] += time.time() - t0
            for i in reversed(range(len(self.layers))):
                sleep_until(time.time() + self.layers[i].backward_s / m_count)
                rec["tensor_s"] += self._tensor(act, it, False)
                if m == 0 and i in self.ready_after:
                    item = (self.ready_after[i], time.time())
                    if job["overlap"]:
                        todo.put(item)
                    else:
                        held.append(item)
            if self.prev is not None:
                self._p2p(r, self.prev, act)
        return end_iteration(rec, th, todo, held, job["deadline_unix_s"], errors)

    def record(self) -> dict:
        """The rank's result (module docstring)."""
        rk = self.rank
        tcp = []
        for peers, key in ((rk.out_peers, "dst_rank"), (rk.in_peers, "src_rank")):
            for peer, sock in sorted(peers.items()):
                try:
                    tcp.append({key: peer, **wire_counters(sock)})
                except OSError:
                    pass
        return {"rank": rk.rank, "stage": self.stage, "iterations": self.iterations, "error": rk.error,
                "connections": rk.connections, "exact": self.exact, "tcp": tcp,
                "sent": [[k, d, v[0], v[1]] for (k, d), v in sorted(self.sent.items())]}


def run_parallel(job: dict, ready) -> dict:
    """Run this host's ranks of ``job`` (module docstring). ``ready()`` prints READY and returns the
    start time (Unix s). Returns ``{"role", "begin_unix_s", "ranks": [record, ...]}``."""
    ranks: dict[int, PipelineRank] = {}

    def prepare(rk: Rank) -> None:
        ranks[rk.rank] = PipelineRank(rk, job)

    def record(rk: Rank) -> dict:
        if rk.rank in ranks and ranks[rk.rank].iterations:
            return ranks[rk.rank].record()
        return {"rank": rk.rank, "iterations": [], "error": rk.error or "never started", "connections": rk.connections}

    recs, begin, _ = run_ranks({**job, "kind": "allreduce", "elements": len(job["ranks"])}, ready,
                               lambda rk, b: ranks[rk.rank].run(b), record, prepare)
    return {"role": "parallel", "begin_unix_s": begin, "ranks": recs}
