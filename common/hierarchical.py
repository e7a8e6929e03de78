"""Collectives on GPU servers: element-range schedules (:class:`Move`), the hierarchical
AllReduce, and its two-level alpha-beta model.

A GPU server holds G ranks (GPUs) joined by an NVSwitch-like channel (every GPU reaches every
other at the NVLink rate); servers reach each other through their NICs and the fabric. The
layout of a job is ``servers``: a list of S lists of G rank numbers, ``servers[i][j]`` being
GPU j of server i. On a rail-optimised fabric GPU j of every server sits on rail j's leaf, so
the ranks ``servers[0][j], servers[1][j], ...`` form rail j.

Hierarchical AllReduce (the two-level scheme of NCCL's tree/ring hybrids and of SimAI and
ASTRA-sim's hierarchical collectives; Jia et al., "Highly scalable deep learning training
system with mixed-precision", 2018, Section 3.3; Sergeev and Del Balso, "Horovod", 2018, for
the intra-node reduce then inter-node AllReduce):

1. ``intra_reduce_scatter``: inside every server, a ring reduce-scatter over its G GPUs on
   the data cut into G chunks (G-1 steps of D/G bytes). GPU j then holds chunk (j+1) % G
   summed over its server.
2. ``inter_reduce_scatter`` and ``inter_all_gather``: on every rail j, a ring AllReduce over
   the S servers of that chunk, cut into S sub-chunks (2(S-1) steps of D/(G S) bytes). GPU j
   of every server then holds chunk (j+1) % G summed over all N = S G ranks. The G rails run
   at the same time.
3. ``intra_all_gather``: inside every server, a ring all-gather of the G reduced chunks
   (G-1 steps of D/G bytes).

Two-level alpha-beta model: T = 2(G-1)(alpha_nv + D/(G B_nv)) + 2(S-1)(alpha_net + D/(G S B_rail)),
with B_nv the NVLink rate and B_rail the rate one rail's transfer gets through the fabric (the
NIC rate with one NIC per GPU; the NIC rate / G when the G rails share one NIC per server).
A flat ring over all N ranks takes 2(N-1)(alpha + D/(N B)) with B its slowest transfer's
rate, the network's whenever a step crosses servers (:func:`common.collectives.model_time_s`):
at the textbook's 12:1 NVLink:NIC ratio, S = G = 4, the hierarchical one needs 0.5 D/B
against the flat ring's 1.875 D/B (alpha aside).

Every schedule here is a list of steps, each a list of :class:`Move`; a rank waits only for
the data its own moves need, as the ranks of :mod:`traffic.collective` do.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common import collectives as C

#: Algorithms of an AllReduce over ranks on servers.
ALGORITHMS = ("ring", "hierarchical")
#: Phases of the hierarchical AllReduce that stay inside a server.
INTRA_PHASES = ("intra_reduce_scatter", "intra_all_gather")
#: Phases that cross the fabric (one ring per rail).
INTER_PHASES = ("inter_reduce_scatter", "inter_all_gather")
#: What the receiver does with a move's data.
OPS = ("reduce", "copy", "store")


@dataclass(frozen=True)
class Move:
    """One range of elements moving from one rank to another at one step.

    Attributes:
        step: step number from 0, over the whole collective.
        phase: ``reduce_scatter``, ``all_gather``, ``all_to_all`` (a flat ring), or one of
            :data:`INTRA_PHASES` and :data:`INTER_PHASES` (hierarchical).
        src, dst: sending and receiving rank.
        chunk: the chunk's index at its level (for the table of steps).
        lo, hi: the elements ``[lo, hi)`` of the sender's buffer that are sent.
        dst_lo: where they land in the receiver's buffer (``[dst_lo, dst_lo + hi - lo)``).
        op: ``reduce`` (added into the receiver's buffer), ``copy`` (replaces it) or ``store``
            (written to the receiver's separate output: all-to-all).
    """
    step: int
    phase: str
    src: int
    dst: int
    chunk: int
    lo: int
    hi: int
    dst_lo: int
    op: str

    @property
    def elements(self) -> int:
        """hi - lo."""
        return self.hi - self.lo


def check_servers(servers: list[list[int]]) -> tuple[int, int]:
    """(S, G) of a layout: S servers of G ranks each, the ranks 0..S G - 1 each once.

    Raises:
        ValueError: an empty layout, servers of different sizes, a rank missing or repeated,
            or fewer than 2 ranks in all.
    """
    if not servers or any(not s for s in servers):
        raise ValueError("servers: every server needs at least one rank")
    g = len(servers[0])
    if any(len(s) != g for s in servers):
        raise ValueError(f"servers: every server needs the same number of ranks, not {[len(s) for s in servers]}")
    flat = sorted(r for s in servers for r in s)
    if flat != list(range(len(flat))):
        raise ValueError("servers: the ranks must be 0..N-1, each once")
    if len(flat) < 2:
        raise ValueError("servers: at least 2 ranks in all")
    return len(servers), g


def flat_moves(n: int, kind: str, elements: int) -> list[list[Move]]:
    """The ring schedule of :func:`common.collectives.ring_schedule` as moves on ``elements``
    elements per rank. Raises ValueError (bad n or kind, fewer elements than ranks)."""
    b = C.chunk_bounds(elements, n)
    out = []
    for step in C.ring_schedule(n, kind):
        moves = []
        for t in step:
            lo, hi = b[t.chunk], b[t.chunk + 1]
            if t.phase == "all_to_all":      # the sender's chunk "dst" lands in the receiver's slot "src"
                moves.append(Move(t.step, t.phase, t.src, t.dst, t.chunk, lo, hi, b[t.src], "store"))
            else:
                moves.append(Move(t.step, t.phase, t.src, t.dst, t.chunk, lo, hi, lo, "reduce" if t.reduce else "copy"))
        out.append(moves)
    return out


def _ring_moves(members: list[int], lo: int, hi: int, phases: tuple[str, str], kind: str,
                step0: int) -> list[list[Move]]:
    """``kind``'s ring schedule among ``members`` (ring order) on elements [lo, hi), numbered from
    ``step0``; ``phases`` names its reduce-scatter and all-gather halves."""
    m = len(members)
    if m < 2:
        return []
    b = [lo + x for x in C.chunk_bounds(hi - lo, m)]
    out = []
    for i, step in enumerate(C.ring_schedule(m, kind)):
        out.append([Move(step0 + i, phases[0] if t.phase == "reduce_scatter" else phases[1], members[t.src],
                         members[t.dst], t.chunk, b[t.chunk], b[t.chunk + 1], b[t.chunk],
                         "reduce" if t.reduce else "copy") for t in step])
    return out


def group_allreduce_moves(members: list[int], elements: int, phases: tuple[str, str] = ("reduce_scatter", "all_gather"),
                          ) -> list[list[Move]]:
    """The ring AllReduce among ``members`` (ranks, in ring order) on ``elements`` elements per
    rank: 2(m-1) steps, numbered from 0, each phase named by ``phases`` (e.g. a tensor-parallel or
    data-parallel group of :mod:`common.parallelism`). No steps for a group of one.

    Raises:
        ValueError: fewer elements than members.
    """
    if len(members) > 1 and elements < len(members):
        raise ValueError(f"{elements} elements cannot fill {len(members)} ranks' chunks")
    return _ring_moves(list(members), 0, elements, phases, "allreduce", 0)


def _merge(steps_per_group: list[list[list[Move]]]) -> list[list[Move]]:
    """Step k of the result = step k of every group (groups run side by side)."""
    n = max((len(s) for s in steps_per_group), default=0)
    return [[mv for g in steps_per_group if k < len(g) for mv in g[k]] for k in range(n)]


def hierarchical_moves(servers: list[list[int]], elements: int) -> list[list[Move]]:
    """The hierarchical AllReduce (module docstring) on ``elements`` elements per rank:
    2(G-1) intra-server steps around 2(S-1) inter-server steps.

    Raises:
        ValueError: a bad layout (:func:`check_servers`) or fewer elements than ranks.
    """
    s, g = check_servers(servers)
    if elements < s * g:
        raise ValueError(f"{elements} elements cannot fill {s * g} ranks' chunks")
    bg = C.chunk_bounds(elements, g)
    steps: list[list[Move]] = []
    # 1. reduce-scatter inside every server, over the whole buffer
    steps += _merge([_ring_moves(srv, 0, elements, ("intra_reduce_scatter", "intra_all_gather"), "reduce_scatter",
                                 len(steps)) for srv in servers])
    # 2. per rail j: AllReduce of chunk (j + 1) % G over the servers, in server order
    rails = []
    for j in range(g):
        c = C.owned_chunk_after_reduce_scatter(j, g) if g > 1 else 0
        rails.append(_ring_moves([srv[j] for srv in servers], bg[c], bg[c + 1],
                                 ("inter_reduce_scatter", "inter_all_gather"), "allreduce", len(steps)))
    steps += _merge(rails)
    # 3. all-gather inside every server: GPU j starts with chunk (j + 1) % G, as the AllReduce's
    #    all-gather half of common.collectives.ring_schedule expects
    ag = []
    for srv in servers:
        if g < 2:
            continue
        half = C.ring_schedule(g, "allreduce")[g - 1:]
        ag.append([[Move(len(steps) + i, "intra_all_gather", srv[t.src], srv[t.dst], t.chunk, bg[t.chunk],
                         bg[t.chunk + 1], bg[t.chunk], "copy") for t in step] for i, step in enumerate(half)])
    steps += _merge(ag)
    return steps


def moves(algorithm: str, kind: str, servers: list[list[int]], elements: int) -> list[list[Move]]:
    """The schedule of ``kind`` by ``algorithm`` for ranks laid out as ``servers``: ``ring`` is
    the flat ring over ranks 0..N-1 (:func:`flat_moves`), ``hierarchical`` the AllReduce of
    :func:`hierarchical_moves`.

    Raises:
        ValueError: an unknown algorithm, ``hierarchical`` for another kind than allreduce, or
            what the schedule raises.
    """
    if algorithm == "ring":
        return flat_moves(sum(len(s) for s in servers), kind, elements)
    if algorithm == "hierarchical":
        if kind != "allreduce":
            raise ValueError(f"the hierarchical algorithm is an allreduce, not {kind!r}")
        return hierarchical_moves(servers, elements)
    raise ValueError(f"unknown algorithm {algorithm!r}; one of {', '.join(ALGORITHMS)}")


def simulate_moves(inputs: list[np.ndarray], steps: list[list[Move]]) -> tuple[list[np.ndarray], int]:
    """Run ``steps`` on copies of ``inputs`` (1-D arrays of one length, one per rank) as the ranks
    would: every move of a step reads the buffers as they were before the step. Returns (each
    rank's result, moves made): the buffer, or for ``store`` moves (all-to-all) the separate
    output that starts as a copy of the input.

    Raises:
        ValueError: arrays of different lengths or not 1-D.
    """
    if any(a.ndim != 1 or len(a) != len(inputs[0]) for a in inputs):
        raise ValueError("inputs must be 1-D arrays of one length")
    bufs = [np.array(a, copy=True) for a in inputs]
    store = any(mv.op == "store" for st in steps for mv in st)
    out = [np.array(a, copy=True) for a in inputs] if store else bufs
    count = 0
    for step in steps:
        sent = [bufs[mv.src][mv.lo:mv.hi].copy() for mv in step]
        for mv, data in zip(step, sent):
            target = out if mv.op == "store" else bufs
            sl = slice(mv.dst_lo, mv.dst_lo + mv.elements)
            if mv.op == "reduce":
                target[mv.dst][sl] += data
            else:
                target[mv.dst][sl] = data
            count += 1
    return out, count


def server_of_ranks(servers: list[list[int]]) -> dict[int, int]:
    """``{rank: server index}`` of a layout."""
    return {r: i for i, srv in enumerate(servers) for r in srv}


def level_counts(steps: list[list[Move]], servers: list[list[int]], bytes_per_element: int = 4) -> dict:
    """Moves and bytes per level: ``{"intra": {"moves", "bytes"}, "inter": {"moves", "bytes"}}``,
    intra being between ranks of one server (NVLink), inter between servers (the fabric)."""
    where = server_of_ranks(servers)
    out = {"intra": {"moves": 0, "bytes": 0}, "inter": {"moves": 0, "bytes": 0}}
    for st in steps:
        for mv in st:
            lvl = out["intra" if where[mv.src] == where[mv.dst] else "inter"]
            lvl["moves"] += 1
            lvl["bytes"] += bytes_per_element * mv.elements
    return out


def hierarchical_model_time_s(n_servers: int, gpus_per_server: int, size_bytes: float, alpha_intra_s: float,
                              rate_intra_bps: float, alpha_inter_s: float, rate_inter_bps: float) -> float:
    """The two-level model (module docstring):
    2(G-1)(alpha_nv + D/(G B_nv)) + 2(S-1)(alpha_net + D/(G S B_rail)), in seconds.

    Args:
        n_servers: S >= 1; gpus_per_server: G >= 1 (S G >= 2).
        size_bytes: D, bytes per rank (>= 0).
        alpha_intra_s, rate_intra_bps: one NVLink step's latency (s) and the NVLink rate (bit/s).
        alpha_inter_s, rate_inter_bps: one rail step's latency (s) and the rate one rail's
            transfer gets (bit/s).

    Raises:
        ValueError: S or G below 1, fewer than 2 ranks, a negative alpha or size, or a rate that
            is not positive where its level has steps.
    """
    s, g = n_servers, gpus_per_server
    if s < 1 or g < 1 or s * g < 2:
        raise ValueError(f"need S >= 1, G >= 1 and S G >= 2, not S={s}, G={g}")
    if min(alpha_intra_s, alpha_inter_s, size_bytes) < 0:
        raise ValueError("alphas and size_bytes must be >= 0")
    t = 0.0
    if g > 1:
        if not rate_intra_bps > 0:
            raise ValueError(f"rate_intra_bps must be > 0, not {rate_intra_bps}")
        t += 2 * (g - 1) * (alpha_intra_s + 8 * size_bytes / g / rate_intra_bps)
    if s > 1:
        if not rate_inter_bps > 0:
            raise ValueError(f"rate_inter_bps must be > 0, not {rate_inter_bps}")
        t += 2 * (s - 1) * (alpha_inter_s + 8 * size_bytes / (g * s) / rate_inter_bps)
    return t
