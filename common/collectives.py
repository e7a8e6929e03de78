"""Collectives as schedules (issue 8): which chunk each rank sends and receives at each step,
the bandwidth factors that turn a time into algbw/busbw, and the alpha-beta model.

Ranks are numbered 0..N-1 in ring order: rank r sends to ``(r + 1) % N`` and receives from
``(r - 1) % N``. The data (D bytes per rank, the same length on every rank) is cut into N
chunks, chunk c being elements ``[bounds[c], bounds[c + 1])`` (:func:`chunk_bounds`).

Ring AllReduce (Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms for clusters
of workstations", JPDC 69(2), 2009; the schedule NCCL's ring uses):

- reduce-scatter, steps s = 0..N-2: rank r sends chunk ``(r - s) % N`` and receives chunk
  ``(r - s - 1) % N``, which it adds into its own copy. After N-1 steps rank r holds the
  fully reduced chunk ``(r + 1) % N``.
- all-gather, steps s = 0..N-2: rank r sends chunk ``(r + 1 - s) % N`` (reduced) and receives
  chunk ``(r - s) % N``, which replaces its copy. After N-1 more steps every rank holds
  every reduced chunk.

That is 2(N-1) steps, N chunk transfers per step, 2N(N-1) in all, each rank sending D/N
bytes per step to its neighbour.

All-to-all (the MoE exchange) as N-1 pairwise-shift steps: at step s = 1..N-1 rank r sends
its chunk ``(r + s) % N`` to rank ``(r + s) % N`` and receives chunk r of rank ``(r - s) % N``.

Bandwidth (NCCL-tests definitions, ``doc/PERFORMANCE.md`` of NVIDIA/nccl-tests): algbw =
S / T with S the per-rank data size in bytes and T the time; busbw = algbw x factor with
factor 2(N-1)/N for AllReduce, (N-1)/N for reduce-scatter, all-gather and all-to-all (S
being the whole per-rank buffer: the gathered output, the scattered input). busbw is
comparable to the link rate whatever N is.

Alpha-beta model (Hockney; Thakur, Rabenseifner and Gropp, "Optimization of collective
communication operations in MPICH", IJHPCA 19(1), 2005): a step that sends m bytes takes
alpha + m / B, so a ring AllReduce of D bytes takes T = 2(N-1)(alpha + D / (N B)), a
reduce-scatter or all-gather (N-1)(alpha + D / (N B)), and the pairwise all-to-all the same
when no link is shared by two transfers of a step.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The collectives this module schedules.
KINDS = ("allreduce", "reduce_scatter", "all_gather", "all_to_all")


@dataclass(frozen=True)
class Transfer:
    """One chunk moving at one step.

    Attributes:
        step: step number from 0 (an AllReduce's all-gather steps follow its N-1 reduce-scatter steps).
        phase: ``"reduce_scatter"``, ``"all_gather"`` or ``"all_to_all"``.
        src: sending rank; dst: receiving rank.
        chunk: index of the chunk sent (0..N-1).
        reduce: True when the receiver adds the chunk into its copy, False when it replaces it
            (all-gather) or stores it in its receive buffer (all-to-all).
    """
    step: int
    phase: str
    src: int
    dst: int
    chunk: int
    reduce: bool


def _check_n(n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 2:
        raise ValueError(f"ranks must be an integer >= 2, not {n!r}")


def chunk_bounds(n_elements: int, n_chunks: int) -> list[int]:
    """Element offsets of ``n_chunks`` chunks covering ``n_elements`` (length n_chunks + 1):
    as even as possible, the first ``n_elements % n_chunks`` chunks one element longer.

    Raises:
        ValueError: ``n_chunks`` < 1 or ``n_elements`` < ``n_chunks`` (a chunk would be empty).
    """
    if n_chunks < 1:
        raise ValueError(f"n_chunks must be >= 1, not {n_chunks}")
    if n_elements < n_chunks:
        raise ValueError(f"{n_elements} elements cannot fill {n_chunks} chunks")
    q, r = divmod(n_elements, n_chunks)
    out = [0]
    for c in range(n_chunks):
        out.append(out[-1] + q + (1 if c < r else 0))
    return out


def ring_schedule(n: int, kind: str = "allreduce") -> list[list[Transfer]]:
    """Steps of ``kind`` on an N-rank ring: a list (one entry per step) of N transfers each.

    ``allreduce``: 2(N-1) steps (reduce-scatter then all-gather); ``reduce_scatter``,
    ``all_gather``: N-1 steps; ``all_to_all``: N-1 pairwise-shift steps (module docstring).

    Raises:
        ValueError: ``n`` < 2 or an unknown ``kind`` (named).
    """
    _check_n(n)
    if kind not in KINDS:
        raise ValueError(f"unknown collective {kind!r}; one of {', '.join(KINDS)}")
    steps: list[list[Transfer]] = []
    if kind in ("allreduce", "reduce_scatter"):
        for s in range(n - 1):
            steps.append([Transfer(len(steps), "reduce_scatter", r, (r + 1) % n, (r - s) % n, True)
                          for r in range(n)])
    if kind == "allreduce":
        for s in range(n - 1):
            steps.append([Transfer(len(steps), "all_gather", r, (r + 1) % n, (r + 1 - s) % n, False)
                          for r in range(n)])
    if kind == "all_gather":
        # each rank starts with its own chunk r (as after a reduce-scatter that left chunk r on rank r)
        for s in range(n - 1):
            steps.append([Transfer(len(steps), "all_gather", r, (r + 1) % n, (r - s) % n, False)
                          for r in range(n)])
    if kind == "all_to_all":
        for s in range(1, n):
            steps.append([Transfer(s - 1, "all_to_all", r, (r + s) % n, (r + s) % n, False) for r in range(n)])
    return steps


def owned_chunk_after_reduce_scatter(rank: int, n: int) -> int:
    """The chunk rank ``rank`` holds fully reduced after the ring reduce-scatter: (rank + 1) % N."""
    _check_n(n)
    return (rank + 1) % n


def simulate(inputs: list[np.ndarray], kind: str = "allreduce") -> tuple[list[np.ndarray], int]:
    """Run the schedule of ``kind`` on copies of ``inputs`` (one 1-D array per rank, equal
    lengths) exactly as the ranks would, chunk by chunk; returns (each rank's final array,
    the number of chunk transfers). The reference the real runs are checked against.

    Final arrays: ``allreduce``, the element-wise sum on every rank; ``reduce_scatter``,
    rank r's copy with chunk (r + 1) % N reduced (the rest partial); ``all_gather``, rank r's
    chunk r placed on every rank; ``all_to_all``, rank r's chunk c is rank c's chunk r.

    Raises:
        ValueError: fewer than 2 ranks, arrays of different lengths or not 1-D, an unknown kind.
    """
    n = len(inputs)
    _check_n(n)
    if any(a.ndim != 1 or len(a) != len(inputs[0]) for a in inputs):
        raise ValueError("inputs must be 1-D arrays of one length")
    b = chunk_bounds(len(inputs[0]), n)
    bufs = [np.array(a, copy=True) for a in inputs]
    out = [np.array(a, copy=True) for a in inputs] if kind == "all_to_all" else bufs
    count = 0
    for step in ring_schedule(n, kind):
        # every send of a step reads the state before the step (the transfers are simultaneous)
        sent = [bufs[t.src][b[t.chunk]:b[t.chunk + 1]].copy() for t in step]
        for t, data in zip(step, sent):
            if kind == "all_to_all":
                # the receiver stores the sender's chunk in slot "sender"
                out[t.dst][b[t.src]:b[t.src + 1]] = data
            elif t.reduce:
                bufs[t.dst][b[t.chunk]:b[t.chunk + 1]] += data
            else:
                bufs[t.dst][b[t.chunk]:b[t.chunk + 1]] = data
            count += 1
    return out, count


def busbw_factor(kind: str, n: int) -> float:
    """busbw / algbw for ``kind`` on ``n`` ranks (NCCL-tests): 2(N-1)/N for AllReduce, (N-1)/N
    for reduce-scatter, all-gather and all-to-all. Raises ValueError (kind or n named)."""
    _check_n(n)
    if kind == "allreduce":
        return 2 * (n - 1) / n
    if kind in KINDS:
        return (n - 1) / n
    raise ValueError(f"unknown collective {kind!r}; one of {', '.join(KINDS)}")


def bandwidths(kind: str, n: int, size_bytes: float, time_s: float) -> dict:
    """``{"algbw_bps", "busbw_bps"}`` in bit/s for ``size_bytes`` per rank moved in ``time_s``.
    Raises ValueError for a non-positive time or size."""
    if not time_s > 0 or not size_bytes > 0:
        raise ValueError(f"size_bytes and time_s must be > 0, not {size_bytes}, {time_s}")
    alg = 8 * size_bytes / time_s
    return {"algbw_bps": alg, "busbw_bps": alg * busbw_factor(kind, n)}


def step_count(kind: str, n: int) -> int:
    """Steps of ``kind`` on ``n`` ranks: 2(N-1) for AllReduce, N-1 for the others (the length of
    :func:`ring_schedule`). Raises ValueError for a bad kind or n (named)."""
    busbw_factor(kind, n)      # validates kind and n
    return 2 * (n - 1) if kind == "allreduce" else n - 1


def model_time_s(kind: str, n: int, size_bytes: float, alpha_s: float, rate_bps: float) -> float:
    """The alpha-beta model's time for ``kind`` on ``n`` ranks moving ``size_bytes`` per rank over
    links of ``rate_bps`` with a per-step latency ``alpha_s`` (module docstring):
    2(N-1)(alpha + D/(N B)) for AllReduce, (N-1)(alpha + D/(N B)) for the others.

    Raises:
        ValueError: a non-positive rate, a negative alpha or size, or a bad kind or n (named).
    """
    if not rate_bps > 0:
        raise ValueError(f"rate_bps must be > 0, not {rate_bps}")
    if alpha_s < 0 or size_bytes < 0:
        raise ValueError(f"alpha_s and size_bytes must be >= 0, not {alpha_s}, {size_bytes}")
    return step_count(kind, n) * (alpha_s + 8 * size_bytes / n / rate_bps)
