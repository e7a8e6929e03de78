"""Training iterations as a model: layers, DDP-style gradient buckets, and the timeline of one
data-parallel iteration with and without overlap of communication and computation.

A model is a list of :class:`Layer` (parameter bytes, forward and backward compute time). One
iteration runs the forward pass (layers in order), then the backward pass (layers in reverse);
a layer's gradient exists once its backward step ends. Gradients are synchronised in buckets
as PyTorch's DistributedDataParallel does (Li et al., "PyTorch Distributed: experiences on
accelerating data parallel training", VLDB 2020): parameters are packed into buckets of at most
``bucket_bytes`` in reverse layer order (the order backward produces them; a layer is never
split, so a layer larger than the cap is a bucket of its own), and buckets are reduced one
after another in that order.

- overlap off: every bucket is reduced after backward ends:
  T = T_forward + T_backward + sum(c_b).
- overlap on: bucket b starts when its last layer's backward ends and the previous bucket's
  reduction is done: T = T_forward + max(T_backward, end of the last reduction). Bounded below
  by max(T_compute, T_forward + sum(c_b)); with full overlap T -> max(T_compute, T_comm), the
  textbook's formula (what a perfect overlap could reach).

:func:`timeline` computes both from per-bucket communication times (e.g. the alpha-beta model of
:mod:`common.collectives` or :mod:`common.hierarchical`); the live workload measures the same
quantities and is set beside it.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    """One layer of a model.

    Attributes:
        name: the layer's name.
        params_bytes: bytes of its parameters (and so of its gradient), float32 (multiple of 4).
        forward_s, backward_s: its compute time per iteration (s, >= 0).

    Raises:
        ValueError: a negative or non-float32-sized parameter count, or a negative time.
    """
    name: str
    params_bytes: int
    forward_s: float
    backward_s: float

    def __post_init__(self):
        if self.params_bytes < 0 or self.params_bytes % 4:
            raise ValueError(f"layer {self.name}: params_bytes must be a non-negative multiple of 4, "
                             f"not {self.params_bytes}")
        if self.forward_s < 0 or self.backward_s < 0:
            raise ValueError(f"layer {self.name}: compute times must be >= 0")


#: Shapes of bundled model profiles: (layer name, share of the parameters, share of the compute).
#: Shares are normalised; the totals come from the scenario (scaled to the lab's links).
#: ``transformer``: an embedding (large, cheap), 6 equal blocks, an output head; ``resnet50``:
#: ResNet-50's stages as in He et al. (CVPR 2016), Table 1: the early stages hold few parameters and
#: much of the compute (large activations), the last stage and the classifier most of the
#: parameters (shares rounded from the torchvision model's parameter counts, and FLOPs per stage).
PRESETS: dict[str, tuple[tuple[str, float, float], ...]] = {
    "transformer": (("embedding", 0.20, 0.02),
                    *((f"block{i}", 0.12, 0.155) for i in range(1, 7)),
                    ("head", 0.08, 0.05)),
    "resnet50": (("conv1", 0.0004, 0.03), ("stage1", 0.009, 0.17), ("stage2", 0.047, 0.25),
                 ("stage3", 0.28, 0.36), ("stage4", 0.58, 0.18), ("fc", 0.08, 0.01)),
}


def preset(name: str, params_bytes: int, compute_s: float, backward_over_forward: float = 2.0) -> list[Layer]:
    """The layers of preset ``name`` with ``params_bytes`` of parameters and ``compute_s`` of
    compute per iteration in all, backward taking ``backward_over_forward`` times the forward
    (2 by the usual count: gradients of activations and of weights). Parameter bytes are rounded
    to float32 elements (at least one per layer).

    Raises:
        ValueError: an unknown preset, a non-positive total, a negative ratio.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown model {name!r}; one of {', '.join(PRESETS)}")
    if params_bytes < 4 or compute_s < 0 or backward_over_forward < 0:
        raise ValueError("params_bytes must be >= 4, compute_s and backward_over_forward >= 0")
    shape = PRESETS[name]
    ps, cs = sum(p for _, p, _ in shape), sum(c for _, _, c in shape)
    out = []
    for lname, p, c in shape:
        elements = max(1, round(params_bytes / 4 * p / ps))
        comp = compute_s * c / cs
        fwd = comp / (1 + backward_over_forward)
        out.append(Layer(lname, 4 * elements, fwd, comp - fwd))
    return out


@dataclass(frozen=True)
class Bucket:
    """A gradient bucket: ``layers`` (indices into the model, in the order backward reaches them),
    ``params_bytes`` in all, and ``ready_after`` (the index of the layer whose backward step
    completes it: the last of ``layers``)."""
    index: int
    layers: tuple[int, ...]
    params_bytes: int

    @property
    def ready_after(self) -> int:
        """The layer whose gradient completes the bucket."""
        return self.layers[-1]


def buckets(layers: list[Layer], bucket_bytes: int) -> list[Bucket]:
    """DDP's buckets (module docstring): layers in reverse order, each bucket closed when the next
    layer would take it past ``bucket_bytes``; layers without parameters join no bucket.

    Raises:
        ValueError: a cap below 4 bytes, or no layer with parameters.
    """
    if bucket_bytes < 4:
        raise ValueError(f"bucket_bytes must be >= 4, not {bucket_bytes}")
    out: list[Bucket] = []
    cur: list[int] = []
    size = 0
    for i in reversed(range(len(layers))):
        b = layers[i].params_bytes
        if not b:
            continue
        if cur and size + b > bucket_bytes:
            out.append(Bucket(len(out), tuple(cur), size))
            cur, size = [], 0
        cur.append(i)
        size += b
    if cur:
        out.append(Bucket(len(out), tuple(cur), size))
    if not out:
        raise ValueError("no layer has parameters")
    return out


def timeline(layers: list[Layer], bkts: list[Bucket], comm_s: list[float], overlap: bool) -> dict:
    """One iteration's times (s) for ``comm_s[b]`` the time to reduce bucket b (module docstring).

    Returns ``{"forward_s", "backward_s", "compute_s", "comm_s" (sum), "iteration_s",
    "exposed_comm_s" (iteration - compute), "buckets": [{"index", "ready_s", "start_s", "end_s"}]}``,
    times from the iteration's start, plus the two textbook bounds ``"sum_s"`` (compute + comm)
    and ``"max_s"`` (max(compute, comm)).

    Raises:
        ValueError: ``comm_s`` of another length than ``bkts``, or a negative time.
    """
    if len(comm_s) != len(bkts):
        raise ValueError(f"{len(comm_s)} communication times for {len(bkts)} buckets")
    if any(c < 0 for c in comm_s):
        raise ValueError("communication times must be >= 0")
    fwd = sum(l.forward_s for l in layers)
    bwd = sum(l.backward_s for l in layers)
    done_at = {}        # layer -> time its backward step ends
    t = fwd
    for i in reversed(range(len(layers))):
        t += layers[i].backward_s
        done_at[i] = t
    end_prev = fwd + bwd if not overlap else 0.0
    rows = []
    for b, c in zip(bkts, comm_s):
        ready = done_at[b.ready_after]
        start = max(ready, end_prev) if overlap else end_prev
        end_prev = start + c
        rows.append({"index": b.index, "ready_s": ready, "start_s": start, "end_s": end_prev})
    it = max(fwd + bwd, end_prev)
    comm = sum(comm_s)
    return {"forward_s": fwd, "backward_s": bwd, "compute_s": fwd + bwd, "comm_s": comm, "iteration_s": it,
            "exposed_comm_s": it - (fwd + bwd), "buckets": rows, "sum_s": fwd + bwd + comm,
            "max_s": max(fwd + bwd, comm)}
