"""Mixed parallelism as a plan: which ranks form tensor-parallel, pipeline and data-parallel
groups, which layers each pipeline stage holds, and the bytes each parallelism kind moves
between which ranks in one training iteration.

Rank numbering follows Megatron-LM (Shoeybi et al., "Megatron-LM: training multi-billion
parameter language models using model parallelism", 2019; Narayanan et al., "Efficient
large-scale language model training on GPU clusters using Megatron-LM", SC 2021): with T tensor
ranks, P pipeline stages and D = N / (T P) data-parallel replicas, rank r is in stage
``r // (N / P)``; inside its stage, ``r % T`` is its tensor index and ``(r % (N / P)) // T``
its replica. So a tensor group is T consecutive ranks (on one server: NVLink), a stage is N/P
consecutive ranks (whole servers), and a pipeline chain links the ranks of equal tensor index
and replica across stages (across servers: the fabric).

One iteration (GPipe schedule, Huang et al., "GPipe: efficient training of giant neural
networks using pipeline parallelism", NeurIPS 2019), M microbatches:

- forward: for every microbatch, a stage receives the activation (``activation_bytes``) from
  the stage before, runs its layers (each followed by a tensor-parallel AllReduce of the
  activation over the tensor group, as Megatron's row-parallel layers end) and sends the
  activation on;
- backward: microbatches in reverse, the gradient of the activation (same size) travels back,
  each layer again followed by a tensor-parallel AllReduce;
- data parallel: the stage's parameter gradient, 1/T of each of its layers on each tensor rank,
  is reduced over the replicas (ring AllReduce) in DDP buckets.

A layer's times are the whole model's per iteration (a preset scaled to ``compute_s``); a stage
runs its own layers, so its compute is theirs. Compute per microbatch of a layer is its
per-iteration time / M; the compute critical path is
(M + P - 1) x a stage's per-microbatch time (the pipeline's bubble, fraction (P - 1)/(M + P - 1)).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from common.hierarchical import group_allreduce_moves
from common.training import Bucket, Layer, buckets

#: The parallelism kinds, in the order reports list them.
KINDS = ("tensor", "pipeline", "data")
#: The phase names of each kind's moves (common.hierarchical.Move.phase).
TENSOR_PHASES = ("tp_reduce_scatter", "tp_all_gather")
DATA_PHASES = ("dp_reduce_scatter", "dp_all_gather")


@dataclass(frozen=True)
class Plan:
    """How N ranks split into tensor, pipeline and data parallelism.

    Attributes:
        ranks: N, the GPUs of the job.
        tensor: T, ranks per tensor-parallel group (consecutive ranks).
        pipeline: P, pipeline stages (N/P consecutive ranks each).
        microbatches: M, microbatches per iteration (GPipe).
        activation_bytes: bytes of one microbatch's activation at a stage boundary (and of its
            gradient), float32 (a multiple of 4); also the size of each tensor-parallel AllReduce.

    Raises:
        ValueError: a count below 1, N not a multiple of T x P, or an activation that is not a
            positive multiple of 4 bytes with at least T elements.
    """
    ranks: int
    tensor: int = 1
    pipeline: int = 1
    microbatches: int = 1
    activation_bytes: int = 262_144

    def __post_init__(self):
        for k in ("ranks", "tensor", "pipeline", "microbatches"):
            if getattr(self, k) < 1:
                raise ValueError(f"{k} must be at least 1, not {getattr(self, k)}")
        if self.ranks % (self.tensor * self.pipeline):
            raise ValueError(f"ranks {self.ranks} is not a multiple of tensor x pipeline "
                             f"({self.tensor} x {self.pipeline})")
        if self.activation_bytes % 4 or self.activation_bytes // 4 < self.tensor:
            raise ValueError(f"activation_bytes must be a multiple of 4 with at least {self.tensor} elements, "
                             f"not {self.activation_bytes}")

    @property
    def data(self) -> int:
        """D, the data-parallel replicas: N / (T P)."""
        return self.ranks // (self.tensor * self.pipeline)

    @property
    def per_stage(self) -> int:
        """Ranks per pipeline stage: N / P."""
        return self.ranks // self.pipeline

    def stage_of(self, r: int) -> int:
        """Rank ``r``'s pipeline stage (0-based)."""
        return r // self.per_stage

    def tensor_index(self, r: int) -> int:
        """Rank ``r``'s index in its tensor group."""
        return r % self.tensor

    def replica_of(self, r: int) -> int:
        """Rank ``r``'s data-parallel replica."""
        return (r % self.per_stage) // self.tensor

    def rank_at(self, stage: int, replica: int, tensor_index: int) -> int:
        """The rank of ``stage``, ``replica`` and ``tensor_index``."""
        return stage * self.per_stage + replica * self.tensor + tensor_index

    def tensor_group(self, r: int) -> list[int]:
        """The T ranks of ``r``'s tensor group (ring order)."""
        return [self.rank_at(self.stage_of(r), self.replica_of(r), t) for t in range(self.tensor)]

    def data_group(self, r: int) -> list[int]:
        """The D ranks of ``r``'s data-parallel group (same stage and tensor index; ring order)."""
        return [self.rank_at(self.stage_of(r), d, self.tensor_index(r)) for d in range(self.data)]

    def next_stage(self, r: int) -> int | None:
        """The rank ``r`` sends activations to (None in the last stage)."""
        s = self.stage_of(r)
        return None if s == self.pipeline - 1 else r + self.per_stage

    def prev_stage(self, r: int) -> int | None:
        """The rank ``r`` receives activations from (None in the first stage)."""
        return None if self.stage_of(r) == 0 else r - self.per_stage

    def groups(self, kind: str) -> list[list[int]]:
        """Every group of ``kind``: tensor groups, data-parallel groups, or pipeline chains (the
        ranks of one tensor index and replica, stage by stage). Raises ValueError for another kind."""
        if kind == "tensor":
            return [self.tensor_group(self.rank_at(s, d, 0)) for s in range(self.pipeline) for d in range(self.data)]
        if kind == "data":
            return [self.data_group(self.rank_at(s, 0, t)) for s in range(self.pipeline) for t in range(self.tensor)]
        if kind == "pipeline":
            return [[self.rank_at(s, d, t) for s in range(self.pipeline)]
                    for d in range(self.data) for t in range(self.tensor)]
        raise ValueError(f"unknown parallelism kind {kind!r}; one of {', '.join(KINDS)}")


def check_placement(plan: Plan, servers: list[list[int]]) -> None:
    """That ``plan`` fits GPU servers laid out as ``servers`` (lists of ranks): every tensor group
    inside one server (NVLink), every server's ranks in one pipeline stage (stages across servers).

    Raises:
        ValueError: naming the first group or server that does not fit.
    """
    where = {r: i for i, s in enumerate(servers) for r in s}
    if sorted(where) != list(range(plan.ranks)):
        raise ValueError(f"the servers hold {len(where)} ranks, the plan {plan.ranks}")
    for g in plan.groups("tensor"):
        if len({where[r] for r in g}) > 1:
            raise ValueError(f"tensor group {g} spans servers {sorted({where[r] for r in g})}: tensor parallelism "
                             f"stays inside a server (tensor must divide the GPUs per server)")
    for i, s in enumerate(servers):
        if len({plan.stage_of(r) for r in s}) > 1:
            raise ValueError(f"server {i} holds ranks of stages {sorted({plan.stage_of(r) for r in s})}: a stage is "
                             f"whole servers (ranks / pipeline must be a multiple of the GPUs per server)")


def stage_layers(layers: list[Layer], pipeline: int) -> list[list[int]]:
    """The layers of each of ``pipeline`` stages: contiguous, at least one each, cut so that the
    slowest stage's compute (forward + backward) is as small as a contiguous cut allows (the
    linear partition problem: a binary search on that bound, each candidate packed greedily; a
    stage left over is made by splitting off the last layer of the stage with the most layers).
    Layers without compute count one each.

    Raises:
        ValueError: fewer layers than stages.
    """
    n = len(layers)
    if n < pipeline:
        raise ValueError(f"{n} layers cannot fill {pipeline} pipeline stages")
    w = [x.forward_s + x.backward_s for x in layers]
    if not any(w):
        w = [1.0] * n

    def pack(limit: float) -> list[list[int]]:
        groups, load = [[]], 0.0
        for i, x in enumerate(w):
            if groups[-1] and load + x > limit:
                groups.append([])
                load = 0.0
            groups[-1].append(i)
            load += x
        return groups

    lo, hi = max(w), sum(w)
    for _ in range(100):
        mid = (lo + hi) / 2
        if len(pack(mid)) <= pipeline:
            hi = mid
        else:
            lo = mid
    groups = pack(hi * (1 + 1e-12))
    while len(groups) < pipeline:
        g = max(range(len(groups)), key=lambda k: len(groups[k]))
        groups[g:g + 1] = [groups[g][:-1], groups[g][-1:]]
    return groups


def shard(layer: Layer, tensor: int) -> Layer:
    """A tensor rank's share of ``layer``: 1/T of its parameters (whole float32 elements), the
    same compute time (the layer's times are what one GPU of its stage spends)."""
    return Layer(layer.name, (layer.params_bytes // 4 // tensor) * 4, layer.forward_s, layer.backward_s)


def stage_buckets(plan: Plan, layers: list[Layer], stage: int, bucket_bytes: int) -> tuple[list[Layer], list[Bucket]]:
    """(a tensor rank's layers of ``stage``, their DDP buckets under ``bucket_bytes``;
    common.training.buckets, indices local to the stage)."""
    mine = [shard(layers[i], plan.tensor) for i in stage_layers(layers, plan.pipeline)[stage]]
    return mine, buckets(mine, bucket_bytes)


@dataclass(frozen=True)
class Flow:
    """What one parallelism kind sends from one rank to another in one iteration.

    Attributes:
        kind: ``tensor``, ``pipeline`` or ``data``.
        src, dst: the ranks.
        payload_bytes: bytes of array data sent.
        messages: how many messages carry them (each one send).
        frames: full-size TCP segments they need, each message cut into ``mss_bytes`` pieces.
    """
    kind: str
    src: int
    dst: int
    payload_bytes: int
    messages: int
    frames: int


def flows(plan: Plan, layers: list[Layer], bucket_bytes: int, mss_bytes: int = 1448) -> list[Flow]:
    """Every (kind, src, dst) of one iteration with its payload, from the same schedules the
    ranks run (common.hierarchical.group_allreduce_moves for the tensor and data groups, one
    message per microbatch and direction between pipeline neighbours).

    Raises:
        ValueError: as :func:`stage_layers` and :func:`stage_buckets`, or a bucket with fewer
            elements than data-parallel ranks.
    """
    acc: dict[tuple[str, int, int], list[int]] = {}

    def add(kind, src, dst, nbytes, times=1):
        a = acc.setdefault((kind, src, dst), [0, 0, 0])
        a[0] += nbytes * times
        a[1] += times
        a[2] += math.ceil(nbytes / mss_bytes) * times

    per_stage_layers = stage_layers(layers, plan.pipeline)
    act_el = plan.activation_bytes // 4
    tp = group_allreduce_moves(list(range(plan.tensor)), act_el, TENSOR_PHASES) if plan.tensor > 1 else []
    for g in plan.groups("tensor"):
        times = 2 * plan.microbatches * len(per_stage_layers[plan.stage_of(g[0])])
        for step in tp:
            for mv in step:
                add("tensor", g[mv.src], g[mv.dst], 4 * mv.elements, times)
    for chain in plan.groups("pipeline"):
        for a, b in zip(chain, chain[1:]):
            add("pipeline", a, b, plan.activation_bytes, plan.microbatches)
            add("pipeline", b, a, plan.activation_bytes, plan.microbatches)
    if plan.data > 1:
        for g in plan.groups("data"):
            _, bkts = stage_buckets(plan, layers, plan.stage_of(g[0]), bucket_bytes)
            for b in bkts:
                for step in group_allreduce_moves(list(range(len(g))), b.params_bytes // 4, DATA_PHASES):
                    for mv in step:
                        add("data", g[mv.src], g[mv.dst], 4 * mv.elements)
    return [Flow(k, s, d, *v) for (k, s, d), v in sorted(acc.items(), key=lambda kv: (KINDS.index(kv[0][0]),) + kv[0][1:])]


def gpipe_compute_s(stage_compute_s: float, microbatches: int, pipeline: int) -> float:
    """The compute critical path of one GPipe iteration: (M + P - 1) x ``stage_compute_s`` / M,
    where ``stage_compute_s`` is one stage's forward + backward time per iteration (s)."""
    return (microbatches + pipeline - 1) * stage_compute_s / microbatches


def bubble_fraction(microbatches: int, pipeline: int) -> float:
    """GPipe's idle share of the compute critical path: (P - 1) / (M + P - 1)."""
    return (pipeline - 1) / (microbatches + pipeline - 1)
