"""Training iterations (role ``training`` of :mod:`traffic.agent`): data-parallel ranks that
emulate compute by time and synchronise real gradient arrays in DDP-style buckets.

One agent per host runs that host's ranks, two threads each: the compute thread walks the
model's layers (forward in order, then backward in reverse), sleeping each layer's compute
time (the CPU is the emulator's, not the GPU's to burn); when the backward step of a bucket's
last layer ends, the bucket's gradient exists. The communication thread reduces buckets one
after another, in bucket order on every rank (as NCCL's one stream does), each an AllReduce
over all ranks by :meth:`traffic.collective.Rank.run_steps` on the schedule of
:mod:`common.hierarchical` (flat ring or hierarchical; ranks of one server over the NVLink
channel, servers over TCP), optionally through a compressor of :mod:`common.compression`.

- ``overlap`` true: a bucket is handed to the communication thread as soon as it is ready,
  while backward goes on; false: every bucket after backward ends.
- Gradients: bucket b of rank r at iteration i is integers drawn from
  ``numpy.random.default_rng([seed, r, i, b])`` in [-1000, 1000) as float32, made before the
  iteration starts, so an uncompressed sum is exact and a compressed one's error is measurable.

Job (``job["role"] == "training"``): the collective job's fields (``ranks``, ``local_ranks``,
``algorithm``, ``nvlink``, ``dscp``, ``deadline_unix_s``, ``out``, ``out_dir``; ``kind``
``allreduce``) and::

    {"layers": [[name, params_bytes, forward_s, backward_s], ...],
     "buckets": [[index, [layer, ...], params_bytes], ...],      # common.training.buckets
     "iterations": int, "overlap": bool, "seed": int,
     "compression": {"name": str, "ratio": float | None}}       # common.compression.make

Result per rank: per iteration ``begin_unix_s``, ``forward_end_unix_s``, ``backward_end_unix_s``,
``end_unix_s``, and per bucket ``[index, ready, start, end (Unix s), wire bytes sent, seconds spent
encoding and decoding]``; for the
last iteration each bucket's error bounds (``bounds``: ``[lo, hi, max bound]`` of this rank's
encodes) and its reduced array's float64 sum; rank 0 of every server saves the last
iteration's reduced buckets as ``<out_dir>/train<rank>-b<index>.npy``.
"""
from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

import numpy as np

from common.compression import make as make_codec
from common.hierarchical import moves
from traffic.collective import Rank, run_ranks


def gradient(seed: int, rank: int, iteration: int, bucket: int, elements: int) -> np.ndarray:
    """Rank ``rank``'s gradient of bucket ``bucket`` at ``iteration`` (module docstring)."""
    return np.random.default_rng([seed, rank, iteration, bucket]).integers(-1000, 1000, elements).astype(np.float32)


def sleep_until(t_unix_s: float) -> None:
    """Sleep until the wall clock reaches ``t_unix_s`` (Unix s), in slices of at most 50 ms; return at
    once if it has. Emulated compute: a rank's layer time is slept, not burnt on the CPU."""
    while True:
        d = t_unix_s - time.time()
        if d <= 0:
            return
        time.sleep(min(d, 0.05))


def bucket_thread(count: int, reduce_bucket, errors: list[str]) -> tuple[threading.Thread, queue.Queue]:
    """An iteration's communication thread (not started) and its queue: it takes ``count`` items
    ``(bucket, ready Unix s)`` in order and calls ``reduce_bucket(bucket, ready)`` for each; a None
    item stops it early. An exception from ``reduce_bucket`` is appended to ``errors`` as
    ``bucket B: Type: message`` and ends the thread (:func:`end_iteration` then raises it)."""
    todo: queue.Queue = queue.Queue()

    def comm():
        for _ in range(count):
            item = todo.get()
            if item is None:
                return
            b, ready = item
            try:
                reduce_bucket(b, ready)
            except Exception as e:      # recorded; the iteration ends with the error
                errors.append(f"bucket {b}: {type(e).__name__}: {e}")
                return
    return threading.Thread(target=comm, daemon=True), todo


def end_iteration(rec: dict, th: threading.Thread, todo: queue.Queue, held: list, deadline_unix_s: float,
                  errors: list[str]) -> dict:
    """The end of an iteration once backward is done: stamps ``backward_end_unix_s``, hands the
    communication thread ``th`` the buckets ``held`` back (``(bucket, ready Unix s)``, overlap off),
    waits for it until the deadline (then stops it), stamps ``end_unix_s`` and returns ``rec``.

    Raises:
        RuntimeError: the deadline passed or a bucket's reduction failed (``errors``, joined).
    """
    rec["backward_end_unix_s"] = time.time()
    for item in held:
        todo.put(item)
    th.join(max(0.1, deadline_unix_s - time.time()))
    if th.is_alive():
        todo.put(None)
        errors.append("deadline passed")
    rec["end_unix_s"] = time.time()
    if errors:
        raise RuntimeError("; ".join(errors))
    return rec


class Trainer:
    """One rank's iterations (module docstring) over ``rank``'s connections."""

    def __init__(self, rank: Rank, job: dict):
        self.rank, self.job = rank, job
        self.layers = job["layers"]
        self.buckets = job["buckets"]
        comp = job.get("compression") or {"name": "none"}
        self.codec = None if comp["name"] == "none" else make_codec(comp["name"], comp.get("ratio"))
        self.steps = {b[0]: moves(job.get("algorithm", "ring"), "allreduce", rank.servers, b[2] // 4)
                      for b in self.buckets}
        self.ready_after = {b[1][-1]: b[0] for b in self.buckets}
        self.iterations: list[dict] = []
        self.final: dict[int, np.ndarray] = {}
        self.bounds: dict[int, list] = {}

    def run(self, begin_unix_s: float) -> None:
        """Every iteration from ``begin_unix_s``."""
        sleep_until(begin_unix_s)
        for it in range(self.job["iterations"]):
            self.iterations.append(self._iteration(it))

    def _iteration(self, it: int) -> dict:
        job, r = self.job, self.rank.rank
        grads = {b[0]: gradient(job.get("seed", 0), r, it, b[0], b[2] // 4) for b in self.buckets}
        last = it == job["iterations"] - 1
        rec = {"iteration": it, "buckets": []}
        errors: list[str] = []

        def reduce_bucket(b: int, ready: float) -> None:
            start = time.time()
            srec = {"steps": [], "sent": 0, "received": 0}
            out = self.rank.run_steps(grads[b], self.steps[b], srec, self.codec, tag=b)
            rec["buckets"].append([b, ready, start, time.time(), sum(s[3] for s in srec["steps"]),
                                   srec.get("codec_s", 0.0)])
            if last:
                self.final[b] = out
                self.bounds[b] = srec.get("bounds", [])
        th, todo = bucket_thread(len(self.buckets), reduce_bucket, errors)
        t = time.time()
        rec["begin_unix_s"] = t
        th.start()
        for _name, _p, fwd, _bwd in self.layers:
            t += fwd
            sleep_until(t)
        rec["forward_end_unix_s"] = time.time()
        held = []
        for i in reversed(range(len(self.layers))):
            t += self.layers[i][3]
            sleep_until(t)
            if i in self.ready_after:
                b = self.ready_after[i]
                if job["overlap"]:
                    todo.put((b, time.time()))
                else:
                    held.append((b, time.time()))
        return end_iteration(rec, th, todo, held, job["deadline_unix_s"], errors)

    def record(self) -> dict:
        """The rank's result (module docstring); saves the reduced buckets of rank 0 of its server."""
        rk = self.rank
        arrays = {}
        if self.final and rk.rank == min(next(s for s in rk.servers if rk.rank in s)):
            for b, a in self.final.items():
                p = Path(self.job["out_dir"]) / f"train{rk.rank}-b{b}.npy"
                np.save(p, a)
                arrays[b] = str(p)
        return {"rank": rk.rank, "iterations": self.iterations, "error": rk.error, "connections": rk.connections,
                "bounds": {str(b): v for b, v in self.bounds.items()}, "arrays": {str(b): p for b, p in arrays.items()},
                "sums": {str(b): float(a.astype(np.float64).sum()) for b, a in self.final.items()}}


def run_training(job: dict, ready) -> dict:
    """Run this host's ranks of ``job`` (module docstring). ``ready()`` prints READY and returns the
    start time (Unix s). Returns ``{"role", "begin_unix_s", "ranks": [record, ...]}``."""
    trainers: dict[int, Trainer] = {}

    def body(rk: Rank, begin: float) -> None:
        tr = trainers[rk.rank] = Trainer(rk, job)
        tr.run(begin)

    def record(rk: Rank) -> dict:
        if rk.rank in trainers:
            return trainers[rk.rank].record()
        return {"rank": rk.rank, "iterations": [], "error": rk.error or "never started", "connections": rk.connections}

    recs, begin, _ = run_ranks({**job, "kind": "allreduce", "elements": len(job["ranks"])}, ready, body, record)
    return {"role": "training", "begin_unix_s": begin, "ranks": recs}
