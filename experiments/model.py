"""The scenario as typed, frozen objects (pydantic v2): what a scenario file may say, and what it
resolves to.

Two kinds of model live here:

- :class:`ScenarioFile` is the file as the user writes it: every section a strict model
  (``extra="forbid"``, strict types, no NaN, units in the key names), defaults filled in. Its
  JSON Schema is the scenario's schema (``python -m experiments schema``). The ``ecn``,
  ``priorities`` and ``pfc`` sections are given in their own syntax (thresholds in bytes or
  packets) and parsed once, by :func:`common.ecn.resolve_ecn` and :func:`common.pfc.parse_pfc`.
- :class:`Scenario` is the resolved scenario every layer reads: the same sections, ECN profiles
  as :class:`common.ecn.EcnSettings` (thresholds in bytes), priorities and PFC as one
  :class:`common.pfc.PfcConfig` (XOFF/XON in bytes), and at least one :class:`Round`.
  :func:`experiments.scenario.validate` builds it; nothing re-parses it.

Topologies and traffic patterns declare their own keys (``PARAMS``, :class:`common.params.F`);
their sections are built here from those declarations, one model per topology kind.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, ValidationInfo, field_validator, WithJsonSchema, create_model, model_validator

from common.ecn import EcnSettings, settings_spec
from common.params import _REQUIRED, F
from common.pfc import PfcConfig, config_sections
from common.units import FRAME_BYTES, shaper_burst_bytes
from common.training import Bucket, Layer as TrainLayer, buckets as train_buckets, preset as train_preset
from common.parallelism import Plan as ParallelPlan
from controller.faults import FAULTS, FaultSpec
from controller.routing import STRATEGIES as ROUTING_STRATEGIES
from controller.faults.base import LINK_PATTERN, NODE
from topologies import TOPOLOGIES
from traffic.patterns import PATTERNS
from traffic.ratecontrol import RATE_CONTROLLERS, has_params

#: A name of a scenario or a round (results folders are named after it).
NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
#: A host's name.
HOST = r"h[0-9]{1,5}"
#: Most rounds one run may have.
MAX_ROUNDS = 32


class Section(BaseModel):
    """Base of every scenario section: frozen, unknown keys refused, strict types, finite numbers."""
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


Number = Union[int, float]


def _exact_int(value: Any) -> Any:
    if type(value) is not int:
        got = "a boolean" if isinstance(value, bool) else f"{type(value).__name__} {value!r}"
        raise ValueError(f"expected an integer, got {got}")
    return value


def int_choice(*values: int) -> Any:
    """An integer that must be one of ``values`` (a YAML ``true`` or ``1.0`` is not the integer 1)."""
    return Annotated[Literal[values], BeforeValidator(_exact_int)]


def _bounded(t: Any, lo=None, hi=None, pattern: str | None = None) -> Any:
    kw = {k: v for k, v in (("ge", lo), ("le", hi), ("pattern", f"^(?:{pattern})$" if pattern else None))
          if v is not None}
    return Annotated[t, Field(**kw)] if kw else t


def field_of(spec: F) -> tuple[Any, Any]:
    """A :class:`common.params.F` declaration (a topology's or a pattern's key) as a pydantic
    field: ``(annotation, default)`` for :func:`pydantic.create_model`.

    Raises:
        TypeError: a type combination the scenario does not use.
    """
    types = set(spec.types)
    if spec.choices is not None and all(type(c) is int for c in spec.choices):
        t: Any = int_choice(*spec.choices)
    elif spec.choices is not None:
        t = Literal[tuple(spec.choices)]
    elif types == {str}:
        t = _bounded(str, pattern=spec.pattern)
    elif types == {int}:
        t = _bounded(int, spec.lo, spec.hi)
    elif types == {int, float}:
        t = _bounded(Number, spec.lo, spec.hi)
    elif types == {bool}:
        t = bool
    else:
        raise TypeError(f"no pydantic type for {spec.types}")
    if spec.default is _REQUIRED:
        return t, ...
    if spec.default is None:
        return Optional[t], None
    return t, spec.default


# --- topology: one model per registered kind, told apart by `kind` (default spineleaf) ---------

def _topology_model(kind: str, cls) -> type[Section]:
    fields = {key: field_of(spec) for key, spec in cls.PARAMS.items()}
    # the default kind may be left out; every other kind names itself (so the JSON Schema's branches
    # never overlap)
    kind_field = (Literal[kind], kind) if kind == "spineleaf" else (Literal[kind], ...)
    model = create_model(f"{cls.__name__}Topology", __base__=Section, __doc__=f"topology kind {kind}: {cls.TITLE}",
                         kind=kind_field, **fields)
    model.model_config["title"] = cls.TITLE
    return model


#: ``{kind: the model of its topology section}`` (from topologies.TOPOLOGIES).
TOPOLOGY_MODELS: dict[str, type[Section]] = {kind: _topology_model(kind, cls) for kind, cls in TOPOLOGIES.items()}


def _kind_of(value: Any) -> str | None:
    if isinstance(value, dict):
        kind = value.get("kind", "spineleaf")
        return kind if isinstance(kind, str) else None
    return getattr(value, "kind", None)


Topology = Annotated[Union[tuple(Annotated[m, Tag(k)] for k, m in TOPOLOGY_MODELS.items())],
                     Discriminator(_kind_of, custom_error_type="topology_kind",
                                   custom_error_message=f"must be one of {', '.join(TOPOLOGY_MODELS)}")]


# --- the plain sections ----------------------------------------------------------------------

def _routing_mode(value: str) -> str:
    """A registered routing strategy's name (controller.routing.STRATEGIES, read at validation
    time, so a strategy registered later is accepted too)."""
    if value not in ROUTING_STRATEGIES:
        raise ValueError(f"must be one of {', '.join(ROUTING_STRATEGIES)}; got {value!r}")
    return value


class Routing(Section):
    """How switches route: a registered routing strategy (controller.routing.STRATEGIES)."""
    mode: Annotated[str, AfterValidator(_routing_mode),
                    Field(json_schema_extra=lambda schema: schema.update(enum=list(ROUTING_STRATEGIES)))] = "ecmp"


#: A switch egress port's buffer when the scenario gives neither buffer key.
DEFAULT_BUFFER_PACKETS = 100


class Queues(Section):
    """Every switch egress port's FIFO and shaper. Exactly one of the buffer keys (default
    :data:`DEFAULT_BUFFER_PACKETS`)."""
    buffer_bytes: Optional[Annotated[int, Field(ge=FRAME_BYTES, le=64 * 2**20)]] = None
    buffer_packets: Optional[Annotated[int, Field(ge=1, le=100000)]] = None
    #: the port shaper's burst; None: per port, from its rate and the shaper's timer slack
    #: (common.units.shaper_burst_bytes)
    burst_bytes: Optional[Annotated[int, Field(ge=1, le=2**20)]] = None

    @property
    def limit_bytes(self) -> int:
        """The buffer in bytes (packets x FRAME_BYTES for a packet limit; the default if neither is set)."""
        if self.buffer_bytes is not None:
            return self.buffer_bytes
        return (self.buffer_packets or DEFAULT_BUFFER_PACKETS) * FRAME_BYTES

    def burst_for(self, rate_mbps: float, slack_s: float) -> int:
        """The shaper burst in bytes of a port at ``rate_mbps``: ``burst_bytes`` if the scenario
        gives it, else :func:`common.units.shaper_burst_bytes` of the rate and ``slack_s`` (the
        shaper's timer slack in seconds, recorded as ``shaper.slack_s`` in environment.json)."""
        if self.burst_bytes is not None:
            return self.burst_bytes
        return shaper_burst_bytes(rate_mbps * 1e6, slack_s)


class Links(Section):
    """Propagation delay on every link, each direction: a delay line at the receiving end of the
    link (after the sending port's shaper and buffer), so the buffer never holds the packets in
    flight. Needs netem and the kernel datapath (docs/scaling.md)."""
    #: one-way propagation delay of every link in microseconds (0: none)
    delay_us: Annotated[int, Field(ge=0, le=1_000_000)] = 0
    #: uniform jitter around ``delay_us`` in microseconds (netem's; at most delay_us)
    jitter_us: Annotated[int, Field(ge=0, le=1_000_000)] = 0

    @field_validator("jitter_us")
    @classmethod
    def _jitter_within_delay(cls, v: int, info: ValidationInfo) -> int:
        delay = info.data.get("delay_us", 0)
        if v > delay:
            raise ValueError(f"{v} exceeds delay_us {delay}: the delay line cannot send before it received")
        return v


class Scale(Section):
    """The real fabric a scaled scenario stands for (experiments.scaling): ``factor`` s, the real
    values as written (``real``) and, per key, the real and emulated values (``emulated``)."""
    factor: _bounded(Number, 1, 1e6)
    real: dict[str, Any] = {}
    emulated: dict[str, Any] = {}


class Hosts(Section):
    """The hosts' kernel TCP settings (per network namespace)."""
    tcp_congestion_control: Annotated[str, Field(pattern=r"^(?:[a-z0-9_]{1,16})$")] = "cubic"
    tcp_ecn: int_choice(0, 1, 2) = 0
    #: TCP's minimum retransmission timeout on every host route (``ip route ... rto_min``, locked);
    #: None: the kernel's own (200 ms). The kernel counts it in jiffies (rounded up).
    rto_min_ms: Optional[Annotated[int, Field(ge=1, le=60_000)]] = None
    #: False: the receiver acknowledges every segment at once (``ip route ... quickack 1``)
    delayed_ack: bool = True
    #: False: a connection idle for an RTO keeps its congestion window (net.ipv4.tcp_slow_start_after_idle
    #: = 0), as the persistent connections of repeated incast blocks may want; True is the kernel's default
    slow_start_after_idle: bool = True


#: ``traffic.block_bytes`` of an incast in blocks mode that does not give it (Vasudevan et al.'s
#: fixed server request unit is 256 KB at 1 Gbit/s; 64 KB keeps a block at a few milliseconds per
#: sender on 10-100 Mbit/s links).
DEFAULT_BLOCK_BYTES = 65536
#: ``traffic.blocks`` of an incast in blocks mode that gives neither ``blocks`` nor ``duration_s``.
DEFAULT_BLOCKS = 20


class _TrafficBase(Section):
    """The flows: incast (``senders`` hosts -> ``receiver``, ``response_bytes`` each), or a pair
    pattern (permutation, all-to-all, Hedera's stride, staggered, random, random-bijection,
    hotspot: ``flows_per_pair`` flows of ``flow_bytes`` each, or for ``duration_s`` each), over
    kernel TCP, UDP datagrams, or RoCEv2 queue pairs."""
    pattern: Literal[tuple(PATTERNS)] = "incast"
    receiver: Annotated[str, Field(pattern=f"^(?:{HOST})$")] = "h1"
    senders: Annotated[int, Field(ge=1, le=1000)] = 8
    sender_hosts: Optional[Annotated[list[Annotated[str, Field(pattern=f"^(?:{HOST})$")]], Field(min_length=1)]] = None
    response_bytes: Annotated[int, Field(ge=1, le=10**10)] = 500_000
    flows_per_pair: Annotated[int, Field(ge=1, le=64)] = 1
    flow_bytes: Annotated[int, Field(ge=1, le=10**10)] = 1_000_000
    duration_s: Optional[_bounded(Number, 0.5, 3600)] = None
    port: Annotated[int, Field(ge=1024, le=65535)] = 5001
    #: tcp: kernel TCP; udp: sequence-numbered datagrams; roce: RoCEv2 queue pairs (the roce section)
    transport: Literal["tcp", "udp", "roce"] = "tcp"
    #: incast responses (roce): how many each sender sends, all at once or as Poisson arrivals
    responses: Annotated[int, Field(ge=1, le=100000)] = 1
    arrival: Literal["synchronized", "poisson"] = "synchronized"
    load: Optional[_bounded(Number, 0.001, 1.0)] = None
    #: the DSCP every flow carries (default 26 for roce, the lossless class; else 0)
    dscp: Optional[Annotated[int, Field(ge=0, le=63)]] = None
    start_delay_s: _bounded(Number, 0.05, 60) = 0.5
    timeout_s: _bounded(Number, 1, 3600) = 120
    #: incast over kernel TCP: ``oneshot`` (each sender connects at the start and sends
    #: ``response_bytes`` once) or ``blocks`` (persistent connections opened before the start, then
    #: barrier-synchronised blocks of ``block_bytes`` per sender: experiments.workloads.blocks)
    incast_mode: Literal["oneshot", "blocks"] = "oneshot"
    #: blocks: bytes each sender returns per block (the server request unit, SRU); default
    #: :data:`DEFAULT_BLOCK_BYTES`
    block_bytes: Optional[Annotated[int, Field(ge=1, le=2**30)]] = None
    #: blocks: how many blocks; with ``duration_s`` the blocks repeat until it has passed (whichever
    #: comes first); neither: :data:`DEFAULT_BLOCKS`
    blocks: Optional[Annotated[int, Field(ge=1, le=100_000)]] = None


def _pattern_fields() -> dict:
    out: dict = {}
    for cls in PATTERNS.values():
        for key, spec in cls.PARAMS.items():
            if key in out and out[key] != field_of(spec):
                raise TypeError(f"pattern {cls.NAME}: key {key} declared differently by another pattern")
            out[key] = field_of(spec)
    return out


#: The ``traffic`` section: the common keys and every registered pattern's own keys.
Traffic = create_model("Traffic", __base__=_TrafficBase, __doc__=_TrafficBase.__doc__, **_pattern_fields())

#: Which pattern each pattern-specific ``traffic`` key belongs to.
PATTERN_KEYS = {key: cls.NAME for cls in PATTERNS.values() for key in cls.PARAMS}


def _controller_model(name: str, cls) -> type[Section]:
    """The model of ``roce.<name>``, a registered rate controller's own keys (``cls.PARAMS``);
    absent keys take the controller's defaults scaled to the host link rate (``params_cls.scaled``)."""
    doc = (cls.__doc__ or name).split(". ")[0].strip()
    model = create_model(f"{cls.__name__}Params", __base__=Section,
                         __doc__=f"roce.{name}: {doc}; absent keys = the defaults scaled to the host link rate",
                         **{key: field_of(spec) for key, spec in cls.PARAMS.items()})
    model.model_config["title"] = f"roce.{name}"
    return model


#: ``{mode: the model of its roce.<mode> section}``, every registered rate controller with keys.
CONTROLLER_MODELS: dict[str, type[Section]] = {name: _controller_model(name, cls)
                                               for name, cls in RATE_CONTROLLERS.items() if has_params(cls)}


#: A plug-in parameter's name.
PARAM_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,63}"


class Cc(Section):
    """A rate controller of the user's own: ``plugin`` names a Python file (relative to the
    current directory, or absolute) that defines one subclass of
    traffic.ratecontrol.RateController (traffic.ccplugin; docs/roce-cc.md); ``params`` reach
    it as the job's ``cc_params``."""
    plugin: Annotated[str, Field(min_length=1, max_length=4096)]
    params: Annotated[dict[Annotated[str, Field(pattern=f"^(?:{PARAM_NAME})$")], Number],
                      Field(max_length=64)] = {}


class _RoceBase(Section):
    """RoCEv2 queue pairs and their rate controller (traffic.ratecontrol.RATE_CONTROLLERS, or a
    plug-in: ``cc``); each registered controller's parameters in its own section, ``roce.<mode>``."""
    mode: Literal[tuple(RATE_CONTROLLERS)] = "dcqcn"
    #: mode none: the fixed rate; default the host link rate
    rate_mbps: Optional[_bounded(Number, 0.01, 1000)] = None
    mtu_bytes: int_choice(256, 512, 1024, 2048, 4096) = 1024
    ack_every: Annotated[int, Field(ge=1, le=4096)] = 16
    #: default: experiments.workloads.roce.jobs.default_rto_s
    rto_s: Optional[_bounded(Number, 0.001, 60)] = None
    cnp_dscp: Annotated[int, Field(ge=0, le=63)] = 48
    pcap_hosts: Optional[list[Annotated[str, Field(pattern=f"^(?:{HOST})$")]]] = None
    #: a plug-in rate controller for every round that does not set its own mode (instead of ``mode``)
    cc: Optional[Cc] = None


#: The ``roce`` section: the common keys and one section per registered controller with keys.
Roce = create_model("Roce", __base__=_RoceBase, __doc__=_RoceBase.__doc__,
                    **{name: (m, m()) for name, m in CONTROLLER_MODELS.items()})


class RanksOnServers(Section):
    """Where ranks (GPUs) run and how they reach each other: the keys the collective and training
    sections share."""
    ranks: Annotated[int, Field(ge=2, le=1024)] = 8
    #: local: consecutive ranks on a rack; spread: round-robin over leaves (pods); or `hosts`
    placement: Literal["local", "spread"] = "local"
    hosts: Optional[Annotated[list[Annotated[str, Field(pattern=f"^(?:{HOST})$")]], Field(min_length=2)]] = None
    timeout_s: _bounded(Number, 1, 7200) = 300
    #: ring: one flat ring over every rank; hierarchical (allreduce): reduce-scatter inside each
    #: GPU server, AllReduce across servers per rail, all-gather inside each server
    algorithm: Literal["ring", "hierarchical"] = "ring"
    #: GPUs (ranks) per server on a topology whose hosts are servers with one NIC: ranks/G hosts
    #: run G ranks each (absent: one rank per host; a rail topology's hosts are GPUs already)
    gpus_per_server: Optional[Annotated[int, Field(ge=1, le=16)]] = None
    #: NVLink rate / NIC rate: ranks of one server exchange at this multiple of their NIC's rate,
    #: outside the fabric (the textbook's 600 GB/s per GPU against a 400 Gbit/s NIC: 12)
    nvlink_ratio: _bounded(Number, 1, 1000) = 12


class Collective(RanksOnServers):
    """A collective over ranks on hosts (real arrays reduced over kernel TCP or RoCEv2), instead
    of the traffic section's flows; ``kind`` absent = no collective."""
    kind: Optional[Literal["allreduce", "reduce_scatter", "all_gather", "all_to_all"]] = None
    #: bytes per rank (D); sizes_bytes: a sweep (busbw against size)
    size_bytes: Annotated[int, Field(ge=4, le=2**31)] = 1_000_000
    sizes_bytes: Optional[Annotated[list[Annotated[int, Field(ge=4, le=2**31)]], Field(min_length=1)]] = None
    repeat: Annotated[int, Field(ge=1, le=100)] = 1
    init: Literal["seeded", "textbook"] = "seeded"
    transport: Literal["tcp", "roce"] = "tcp"


class LayerSpec(Section):
    """One layer of a training model given as a list (instead of a preset)."""
    name: Annotated[str, Field(pattern=f"^(?:{NAME})$")]
    #: its parameters (and gradient) in bytes, float32: a multiple of 4
    params_bytes: Annotated[int, Field(ge=0, le=2**31)]
    forward_s: _bounded(Number, 0, 600)
    backward_s: _bounded(Number, 0, 600)


class Training(RanksOnServers):
    """Training iterations on the ranks (common.training, traffic.training): forward and backward
    emulated by time, real gradients synchronised in DDP buckets by AllReduce, with or without
    overlap and compression, instead of the traffic section's flows; ``model`` and ``layers``
    absent = no training."""
    #: a bundled profile shape (common.training.PRESETS), scaled to params_bytes and compute_s
    model: Optional[Literal["transformer", "resnet50"]] = None
    #: or the layers themselves (then params_bytes, compute_s and backward_over_forward are unused)
    layers: Optional[Annotated[list[LayerSpec], Field(min_length=1, max_length=1000)]] = None
    params_bytes: Annotated[int, Field(ge=4, le=2**31)] = 2_000_000
    #: forward + backward compute per iteration, in seconds
    compute_s: _bounded(Number, 0, 600) = 2.0
    backward_over_forward: _bounded(Number, 0, 100) = 2
    #: DDP's bucket cap (bytes): buckets fill in reverse layer order, a layer is never split
    bucket_bytes: Annotated[int, Field(ge=4, le=2**31)] = 500_000
    iterations: Annotated[int, Field(ge=1, le=100)] = 3
    #: reduce each bucket as soon as its gradients exist (true) or after backward ends (false)
    overlap: bool = True
    #: on every transfer of the gradient AllReduce (common.compression)
    compression: Literal["none", "fp16", "int8", "topk"] = "none"
    #: top-k's target ratio of bytes (k = ceil(n / (2 ratio)))
    topk_ratio: _bounded(Number, 1.01, 1000) = 8
    #: mixed parallelism (common.parallelism): T ranks per tensor-parallel group, inside a server
    #: (an AllReduce of the activation after every layer, over NVLink)
    tensor: Annotated[int, Field(ge=1, le=16)] = 1
    #: P pipeline stages, each whole servers (activations forward, their gradients back, GPipe);
    #: the data-parallel replicas are ranks / (tensor x pipeline)
    pipeline: Annotated[int, Field(ge=1, le=64)] = 1
    #: microbatches per iteration (the pipeline's bubble is (P - 1) / (M + P - 1))
    microbatches: Annotated[int, Field(ge=1, le=64)] = 1
    #: one microbatch's activation at a stage boundary, float32 bytes (also each tensor-parallel
    #: AllReduce's size)
    activation_bytes: Annotated[int, Field(ge=4, le=2**28)] = 262_144

    @property
    def on(self) -> bool:
        """True when the section asks for training (a model or layers)."""
        return self.model is not None or self.layers is not None

    @property
    def mixed(self) -> bool:
        """True when tensor or pipeline parallelism is asked for (beyond data parallelism)."""
        return self.tensor > 1 or self.pipeline > 1

    def plan(self) -> ParallelPlan:
        """The mixed-parallel plan (common.parallelism.Plan). Raises ValueError for counts that do not divide."""
        return ParallelPlan(self.ranks, self.tensor, self.pipeline, self.microbatches, self.activation_bytes)

    def model_layers(self) -> list[TrainLayer]:
        """The model's layers (common.training.Layer): the preset scaled to ``params_bytes`` and
        ``compute_s``, or ``layers``. Raises ValueError for a bad layer or no model."""
        if self.layers is not None:
            return [TrainLayer(x.name, x.params_bytes, x.forward_s, x.backward_s) for x in self.layers]
        if self.model is None:
            raise ValueError("no model and no layers")
        return train_preset(self.model, self.params_bytes, self.compute_s, self.backward_over_forward)

    def buckets(self) -> list[Bucket]:
        """The model's DDP buckets under ``bucket_bytes`` (common.training.buckets). Raises ValueError."""
        return train_buckets(self.model_layers(), self.bucket_bytes)


class Measurement(Section):
    """The queue sampler and the throughput window (averaged from ``warmup_s`` after the start).
    ``sampler``: how the sampler reads the ports (controller.qstats): ``bpf`` (a BPF program's
    memory-mapped counters), ``netlink`` (one qdisc dump per tick) or ``auto`` (netlink while its
    estimated cost is within 10% of a core, else bpf: controller.qstats.open_reader)."""
    sample_hz: _bounded(Number, 1, 2000) = 200
    sampler: Literal["auto", "bpf", "netlink"] = "auto"
    post_s: _bounded(Number, 0, 10) = 0.5
    warmup_s: _bounded(Number, 0, 600) = 1.0
    #: draw each round's PNG plots as it ends (false: skip them, e.g. in a study of many short
    #: cells; ``python -m experiments plot DIR`` draws them later from the CSVs)
    plots: bool = True


# --- faults: one model per registered injector, told apart by `kind` ---------------------------

#: Latest a fault may start or stop, in seconds from its round's start.
MAX_FAULT_S = 86400
_PLACE = {"link": (Annotated[str, Field(pattern=f"^(?:{LINK_PATTERN})$")], ...),
          "switch": (Annotated[str, Field(pattern=f"^(?:{NODE})$")], ...),
          "host": (Annotated[str, Field(pattern=f"^(?:{HOST})$")], ...)}


def _fault_model(kind: str, cls) -> type[Section]:
    fields = {cls.TARGET: _PLACE[cls.TARGET], **{k: field_of(spec) for k, spec in cls.PARAMS.items()},
              "start_s": (_bounded(Number, 0, MAX_FAULT_S), 0),
              "stop_s": (Optional[_bounded(Number, 0, MAX_FAULT_S)], None)}
    if cls.TARGET == "switch":
        fields["ports"] = (Optional[Annotated[list[Annotated[int, Field(ge=1, le=65279)]], Field(min_length=1)]], None)
    doc = (cls.__doc__ or kind).strip()
    model = create_model(f"{cls.__name__}Fault", __base__=Section,
                         __doc__=f"fault kind {kind}: {doc} (controller.faults.{cls.__module__.rsplit('.', 1)[-1]}); "
                                 "start_s/stop_s: seconds from the round's start (stop_s absent: its end)",
                         kind=(Literal[kind], ...), **fields)
    doc = cls.__doc__.strip().rstrip(".")
    model.model_config["title"] = f"{cls.TITLE}: {doc[0].lower()}{doc[1:]}"
    return model


#: ``{kind: the model of a fault of that kind}`` (from controller.faults.FAULTS).
FAULT_MODELS: dict[str, type[Section]] = {kind: _fault_model(kind, cls) for kind, cls in FAULTS.items()}


def _fault_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        kind = value.get("kind")
        return kind if isinstance(kind, str) else None
    return getattr(value, "kind", None)


Fault = Annotated[Union[tuple(Annotated[m, Tag(k)] for k, m in FAULT_MODELS.items())],
                  Discriminator(_fault_kind, custom_error_type="fault_kind",
                                custom_error_message=f"kind must be one of {', '.join(FAULT_MODELS)}")]
#: Most faults one scenario or round may have.
MAX_FAULTS = 64
Faults = Annotated[list[Fault], Field(max_length=MAX_FAULTS)]


# --- rounds as written -----------------------------------------------------------------------

class _Override(Section):
    """A round's change to a section: only the keys given replace the scenario's."""

    def changes(self) -> dict:
        """``{key: value}`` of the keys the round gave."""
        return {k: getattr(self, k) for k in self.model_fields_set}


def _override(base: type[Section], name: str, doc: str, keys: tuple[str, ...] | None = None,
              refuse: str | None = None) -> type[_Override]:
    """The model of a round's change to ``base``: its ``keys`` (default all), each optional with
    ``base``'s type and bounds. With ``refuse``, another key is refused with that message at the
    section's own key (``rounds[0].roce``), instead of as an unknown key."""
    keys = tuple(base.model_fields) if keys is None else keys
    def optional(f) -> Any:
        return Optional[Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation]
    fields = {k: (optional(base.model_fields[k]), None) for k in keys}
    validators = {}
    if refuse is not None:
        def _only_keys(cls, data: Any) -> Any:
            if not isinstance(data, dict) or set(data) - set(keys):
                raise ValueError(refuse)
            return data
        validators["_only_keys"] = model_validator(mode="before")(classmethod(_only_keys))
    return create_model(name, __base__=_Override, __doc__=doc, __validators__=validators, **fields)


#: A round's ``hosts`` keys.
HostsOverride = _override(Hosts, "HostsOverride", "A round's ``hosts`` keys.")
#: A round sets the RoCE rate controller (A/B runs of dcqcn against none, or against a plug-in).
RoundRoce = _override(Roce, "RoundRoce", "A round's RoCE rate controller: a registered mode, or a plug-in (cc).",
                      ("mode", "cc"),
                      refuse=f"a round can only set the RoCE rate controller: {{mode: {'|'.join(RATE_CONTROLLERS)}}} "
                             "or {cc: {plugin: FILE}}")
#: What a round may change of the collective section.
ROUND_COLLECTIVE_KEYS = ("kind", "ranks", "placement", "hosts", "transport", "algorithm")
CollectiveOverride = _override(Collective, "CollectiveOverride", "A round's change to the collective section.",
                               ROUND_COLLECTIVE_KEYS,
                               refuse=f"a round can set the collective's {', '.join(ROUND_COLLECTIVE_KEYS)}")
#: What a round may change of the training section: the A/B knobs of an optimisation study.
ROUND_TRAINING_KEYS = ("overlap", "compression", "topk_ratio", "algorithm", "bucket_bytes", "microbatches")
TrainingOverride = _override(Training, "TrainingOverride", "A round's change to the training section.",
                             ROUND_TRAINING_KEYS,
                             refuse=f"a round can set the training's {', '.join(ROUND_TRAINING_KEYS)}")
#: What a round may change of the traffic section: an incast's senders (an N sweep) and, in blocks
#: mode, the block size (an SRU sweep).
ROUND_TRAFFIC_KEYS = ("senders", "block_bytes")
TrafficOverride = _override(Traffic, "TrafficOverride", "A round's change to the traffic section (an incast).",
                            ROUND_TRAFFIC_KEYS,
                            refuse=f"a round can set the traffic's {', '.join(ROUND_TRAFFIC_KEYS)} "
                                   "(an incast; block_bytes with incast_mode: blocks)")


class RoundPfc(Section):
    """A round turns PFC on or off (the scenario's other PFC settings hold)."""
    enabled: Optional[bool] = None

    @model_validator(mode="before")
    @classmethod
    def _only_enabled(cls, data: Any) -> Any:
        if not isinstance(data, dict) or set(data) - {"enabled"}:
            raise ValueError("a round can only turn PFC on or off: {enabled: true|false}")
        return data


def _own(name: str) -> Any:
    """A section its own parser reads (common.ecn, common.pfc); experiments.schema_export puts
    that parser's schema fragment where the marker ``x-fabriclab-section`` stands."""
    return Annotated[Any, WithJsonSchema({"x-fabriclab-section": name})]


class RoundFile(Section):
    """One round as written: the same traffic again on the same fabric, with the ECN profiles,
    host settings, PFC, RoCE mode, seed, collective or (an incast) senders and (in blocks mode)
    block size it gives replacing the scenario's."""
    name: Annotated[str, Field(pattern=f"^(?:{NAME})$")]
    #: this round's label in the results' tables (default: the scenario's variant, else the round's name)
    variant: Optional[Annotated[str, Field(pattern=f"^(?:{NAME})$")]] = None
    ecn: _own("roundEcn") = None
    hosts: Optional[HostsOverride] = None
    pfc: Optional[RoundPfc] = None
    roce: Optional[RoundRoce] = None
    seed: Optional[Annotated[int, Field(ge=0, le=2**31 - 1)]] = None
    collective: Optional[CollectiveOverride] = None
    training: Optional[TrainingOverride] = None
    traffic: Optional[TrafficOverride] = None
    #: the round's faults instead of the scenario's ([]: none in this round)
    faults: Optional[Faults] = None


class ScenarioFile(Section):
    """A scenario file as written (defaults filled in); :func:`experiments.scenario.validate`
    resolves it into a :class:`Scenario`."""
    model_config = ConfigDict(title="fabriclab scenario")
    name: Annotated[str, Field(pattern=f"^(?:{NAME})$")]
    description: str = ""
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 1
    #: every round's label in the results' tables (a study sets it to the cell's variant)
    variant: Optional[Annotated[str, Field(pattern=f"^(?:{NAME})$")]] = None
    topology: Topology = Field(default_factory=lambda: TOPOLOGY_MODELS["spineleaf"]())
    routing: Routing = Routing()
    queues: Queues = Queues()
    links: Links = Links()
    scale: Optional[Scale] = None
    hosts: Hosts = Hosts()
    traffic: Traffic = Field(default_factory=Traffic)
    roce: Roce = Roce()
    collective: Collective = Collective()
    training: Training = Training()
    measurement: Measurement = Measurement()
    ecn: _own("ecn") = None
    priorities: _own("priorities") = None
    pfc: _own("pfc") = None
    #: faults injected in every round that does not give its own (controller.faults)
    faults: Faults = []
    rounds: Optional[Annotated[list[RoundFile], Field(min_length=1, max_length=MAX_ROUNDS)]] = None

    @model_validator(mode="before")
    @classmethod
    def _null_sections(cls, data: Any) -> Any:
        """A section written with no keys (``traffic:`` alone) is that section's defaults."""
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None or k in ("ecn", "priorities", "pfc", "rounds")}
        return data


# --- the resolved scenario -------------------------------------------------------------------

class Resolved(BaseModel):
    """Base of the resolved models: frozen, holding the already-checked objects of the parsers."""
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


class RocePlugin(Resolved):
    """A rate-controller plug-in a round runs, checked (traffic.ccplugin.load_plugin).

    Attributes:
        path: the file, absolute.
        name: its class's ``name`` (the round's mode is ``plugin:<name>``).
        params: its ``roce.cc.params``.
    """
    path: str
    name: str
    params: dict[str, Any] = {}


class Round(Resolved):
    """One round, resolved: everything it runs with.

    Attributes:
        name: its name (its folder is ``rounds/<nn>-<name>`` in a scenario with rounds).
        ecn: every switch port's profile source (scenario's merged with the round's), in bytes.
        hosts, collective, training: the sections as they hold in this round.
        pfc_enabled: PFC on in this round.
        roce_mode: the RoCE rate controller in this round: a registered mode, or
            ``plugin:<name>`` for a plug-in.
        roce_plugin: the plug-in of a ``plugin:<name>`` round, else None.
        seed: the seed of its random choices.
        variant: its label in the results' tables (``variant`` column): the round's ``variant``,
            else the scenario's, else the round's name. Rounds that differ only in their seed
            share a variant (e.g. ``dcqcn`` for ``dcqcn-seed1`` .. ``dcqcn-seed3``).
        traffic: the traffic section as it holds in this round: the scenario's, with an incast's
            ``senders`` (and ``sender_hosts`` cut to the first ``senders``) and, in blocks mode,
            ``block_bytes`` replaced by the round's. The incast workloads (blocks, kernel flows,
            RoCEv2) plan the round's senders from it; other patterns run the scenario's one plan.
        faults: the faults injected in this round (the round's own, else the scenario's),
            checked against the fabric.
    """
    name: str
    ecn: EcnSettings
    hosts: Hosts
    pfc_enabled: bool
    roce_mode: str
    roce_plugin: Optional[RocePlugin] = None
    seed: int
    variant: str = ""
    collective: Collective
    training: Training = Training()
    traffic: Traffic
    faults: tuple[FaultSpec, ...] = ()


class Scenario(Resolved):
    """A resolved scenario: parsed once, read by every layer.

    Attributes:
        name, description, seed, variant, topology, routing, queues, hosts, traffic, roce, collective,
            measurement: the sections (defaults filled in; ``traffic.senders`` counts
            ``sender_hosts``, ``traffic.dscp`` is set, ``collective.ranks`` counts its hosts).
        ecn: marker and profiles, thresholds in bytes (common.ecn.resolve_ecn).
        pfc: priority classes and PFC, thresholds in bytes (common.pfc.parse_pfc); None when the
            scenario has neither section and no round turns PFC on (one FIFO per port).
        faults: the scenario's faults (every round without its own injects them), checked
            against the fabric (controller.faults.parse_fault).
        rounds: at least one round; a scenario without ``rounds`` has one named after it.
        multi_round: the file gave ``rounds`` (results per round under ``rounds/``).
    """
    name: str
    description: str
    seed: int
    variant: Optional[str] = None
    topology: Topology
    routing: Routing
    queues: Queues
    links: Links
    scale: Optional[Scale] = None
    hosts: Hosts
    traffic: Traffic
    roce: Roce
    collective: Collective
    training: Training = Training()
    measurement: Measurement
    ecn: EcnSettings
    pfc: Optional[PfcConfig]
    faults: tuple[FaultSpec, ...] = ()
    rounds: tuple[Round, ...]
    multi_round: bool

    def to_data(self) -> dict:
        """The scenario in file syntax, every default written out and every threshold in bytes: what
        a results folder records as scenario.yaml, and what :func:`experiments.scenario.validate`
        reads back into an equal Scenario."""
        out = {k: _plain(getattr(self, k)) for k in ("name", "description", "seed", "topology", "routing", "queues",
                                                    "links", "hosts", "traffic", "roce", "collective", "training",
                                                    "measurement")}
        if self.roce.cc is not None:
            del out["roce"]["mode"]       # a plug-in stands instead of the mode
        if self.scale is not None:
            out["scale"] = self.scale.model_dump()
        out["ecn"] = settings_spec(self.ecn, marker=True)
        out["priorities"], out["pfc"] = config_sections(self.pfc) if self.pfc is not None else (None, None)
        if self.faults:
            out["faults"] = [f.to_data() for f in self.faults]
        if self.variant is not None:
            out["variant"] = self.variant
        out["rounds"] = [_round_data(r, self) for r in self.rounds] if self.multi_round else None
        if any(r.collective.kind or r.training.on for r in self.rounds):
            del out["traffic"]            # a collective scenario has none (its defaults are resolved again)
        return out


def _plain(v: Any) -> Any:
    return v.model_dump() if isinstance(v, BaseModel) else v


def _round_data(r: Round, sc: Scenario) -> dict:
    coll = {k: getattr(r.collective, k) for k in ROUND_COLLECTIVE_KEYS}
    if sc.collective.kind is None and r.collective.kind is None:
        coll = None
    keys = (ROUND_TRAFFIC_KEYS if sc.traffic.incast_mode == "blocks" else ("senders",)
            if sc.traffic.pattern == "incast" and sc.collective.kind is None else ())
    train = {k: getattr(r.training, k) for k in ROUND_TRAINING_KEYS} if sc.training.on else None
    return {"name": r.name, "ecn": settings_spec(r.ecn, marker=False), "hosts": r.hosts.model_dump(),
            **({"pfc": {"enabled": r.pfc_enabled}} if sc.pfc is not None else {}),
            "roce": ({"cc": {"plugin": r.roce_plugin.path, "params": dict(r.roce_plugin.params)}}
                     if r.roce_plugin is not None else {"mode": r.roce_mode}), "seed": r.seed,
            **({"variant": r.variant} if r.variant != r.name else {}),
            **({"collective": coll} if coll is not None else {}),
            **({"training": train} if train is not None else {}),
            **({"traffic": {k: getattr(r.traffic, k) for k in keys}} if keys else {}),
            **({"faults": [x.to_data() for x in r.faults]} if r.faults != sc.faults else {})}
