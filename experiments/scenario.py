"""Scenario files: YAML, checked by typed models, resolved once.

:func:`load_scenario` reads a YAML file under limits (size, depth, aliases, duplicate keys),
:func:`validate` checks its data against :class:`experiments.model.ScenarioFile` (pydantic:
unknown keys, types, ranges) and against the fabric it describes, and returns the frozen,
resolved :class:`experiments.model.Scenario`. Every error is a
:class:`common.errors.ScenarioError` naming the dotted key the user wrote, before anything is
started. A run stores the resolved scenario in its results folder (``Scenario.to_data``).
"""
from __future__ import annotations

import re
import stat
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from common.dcqcn import DcqcnParams
from common.ecn import EcnSettings, resolve_ecn
from common.errors import ScenarioError
from common.params import quote
from common.pfc import PfcConfig, parse_pfc
from common.parallelism import stage_buckets
from controller.faults import FaultSpec, check_clashes, parse_fault
from common.units import FRAME_BYTES  # noqa: F401 (re-exported: the scenario's sizes)
from experiments.scaling import apply_scale
from experiments.model import (DEFAULT_BLOCK_BYTES, DEFAULT_BLOCKS, DEFAULT_BUFFER_PACKETS, FAULT_MODELS, NAME,  # noqa: F401 (NAME)
                               PATTERN_KEYS, TOPOLOGY_MODELS, Collective, RocePlugin, Round, RoundFile, Scenario,
                               ScenarioFile, Training, _kind_of)
from topologies import TOPOLOGIES
from traffic.ccplugin import PLUGIN_PREFIX, PluginError, load_plugin
from traffic.patterns import PATTERNS
from traffic.ratecontrol import RATE_CONTROLLERS, has_params

#: Most links a fabric may have. Bring-up here grows about as links^1.5 (a k=8 Fat-Tree, 384 links:
#: 82 s on a 2-core machine), so 1024 links is several minutes; every link is two veth interfaces
#: and, on switch ends, a shaped queue.
MAX_FABRIC_LINKS = 1024

#: Most TCP flows one run may open (each is a socket in some host; an all-to-all grows as N^2).
MAX_FLOWS = 20000



def topology_of(topology):
    """The builder of a resolved ``topology`` section (not built yet: ``.build()`` makes the Fabric).

    Raises:
        ScenarioError: a value the builder refuses (e.g. an odd Fat-Tree k), naming ``topology.<key>``.
    """
    return TOPOLOGIES[topology.kind](**{k: v for k, v in topology.model_dump().items() if k != "kind"})


def switch_layers(kind: str) -> tuple[str, ...]:
    """The switch layers of a registered topology kind, top first (ECN's ``layers`` keys)."""
    return tuple(layer for layer in TOPOLOGIES[kind].LAYERS if layer != "host")


# --- pydantic's errors as one line naming the key the user wrote ---------------------------------

_TYPE_NAMES = {"int_type": "int", "float_type": "float", "string_type": "str", "bool_type": "bool",
               "int_from_float": "int", "none_required": "nothing"}


#: Names pydantic puts in an error's location for a union's member: not keys the user wrote.
_UNION_MEMBERS = {"int", "float", "str", "bool", "none", "list", "dict"}


def _key(loc: tuple) -> str:
    """A pydantic error location as the dotted key the user wrote (``rounds[1].hosts.tcp_ecn``)."""
    out = ""
    parts = list(loc)
    if len(parts) > 1 and parts[0] == "topology" and parts[1] in TOPOLOGY_MODELS:
        del parts[1]                                  # the union's tag: the user wrote no such key
    parts = [p for i, p in enumerate(parts) if not _fault_tag(parts, i)]
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _UNION_MEMBERS or "[" in part:   # a union member's name (int, float, ...), not a key
            continue
        else:
            out += f".{part}" if out else part
    return out or "<top>"


def _fault_tag(loc: list, i: int) -> bool:
    """``loc[i]`` is a fault's union tag (``faults, 0, corrupt, link``): the user wrote no such key."""
    return i >= 2 and loc[i] in FAULT_MODELS and isinstance(loc[i - 1], int) and loc[i - 2] == "faults"


def _models_in(t: Any) -> list[type[BaseModel]]:
    """The models an annotation can hold (through Optional, Union, Annotated and list)."""
    if isinstance(t, type) and issubclass(t, BaseModel):
        return [t]
    return [m for arg in typing.get_args(t) for m in _models_in(arg)]


def _known_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """The keys of the section at ``loc`` (a pydantic error location, without the unknown key)."""
    models = [model]
    for i, part in enumerate(loc):
        if isinstance(part, int):
            continue                                  # an item of a list: the same models
        if i > 0 and loc[i - 1] == "topology" and part in TOPOLOGY_MODELS:
            models = [TOPOLOGY_MODELS[part]]          # the kind the user gave
            continue
        if _fault_tag(list(loc), i):
            models = [FAULT_MODELS[part]]
            continue
        inner = [m2 for m in models if part in m.model_fields for m2 in _models_in(m.model_fields[part].annotation)]
        if inner:
            models = inner
    return sorted(models[0].model_fields) if models else []


def _scenario_error(err: ValidationError, model: type[BaseModel], prefix: tuple = ()) -> ScenarioError:
    """The first of pydantic's errors as a ScenarioError naming the dotted key (rounds[1].hosts.tcp_ecn)."""
    errors = err.errors(include_url=False)
    # an unknown key first: a misspelt key also leaves the key it was meant to be missing
    errors.sort(key=lambda e: e["type"] != "extra_forbidden")
    first = errors[0]
    loc = prefix + tuple(first["loc"])
    key, kind, given = _key(loc), first["type"], first.get("input")
    same = [e for e in errors if _key(prefix + tuple(e["loc"])) == key]
    if kind == "extra_forbidden":
        return ScenarioError(key, f"unknown key (known keys here: {', '.join(_known_keys(model, tuple(first['loc'])[:-1]))})")
    if kind == "missing":
        return ScenarioError(key, "is required")
    if any(e["type"] == "finite_number" for e in same):
        return ScenarioError(key, f"expected a finite number, got {given}")
    if kind in _TYPE_NAMES:
        names = " or ".join(dict.fromkeys(_TYPE_NAMES[e["type"]] for e in same if e["type"] in _TYPE_NAMES))
        got = "a boolean" if isinstance(given, bool) else f"{type(given).__name__} {quote(given)}"
        return ScenarioError(key, f"expected {names}, got {got}")
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return ScenarioError(key, f"expected a mapping, got {type(given).__name__}")
    if kind == "list_type":
        return ScenarioError(key, f"expected a list, got {type(given).__name__}")
    if kind == "literal_error":
        return ScenarioError(key, f"must be one of {first['ctx']['expected'].replace(chr(39), '')}; got {quote(given)}")
    if kind == "topology_kind" and not isinstance(given, dict):
        return ScenarioError("topology", f"expected a mapping, got {type(given).__name__}")
    if kind == "topology_kind":
        return ScenarioError("topology.kind", f"must be one of {', '.join(TOPOLOGY_MODELS)}; got {quote(_kind_of(given))}")
    if kind == "fault_kind" and not isinstance(given, dict):
        return ScenarioError(key, f"expected a mapping, got {type(given).__name__}")
    if kind == "fault_kind":
        if "kind" not in given:
            return ScenarioError(f"{key}.kind", "is required")
        return ScenarioError(f"{key}.kind", f"must be one of {', '.join(FAULT_MODELS)}; got {quote(given['kind'])}")
    if kind in ("greater_than_equal", "less_than_equal"):
        op, bound = (">=", first["ctx"]["ge"]) if kind == "greater_than_equal" else ("<=", first["ctx"]["le"])
        return ScenarioError(key, f"must be {op} {bound}, got {quote(given)}")
    if kind == "string_pattern_mismatch":
        return ScenarioError(key, f"must match {first['ctx']['pattern']}, got {quote(given)}")
    if kind in ("too_short", "too_long"):
        return ScenarioError(key, first["msg"].replace("List", "a list").replace("Input", "expected"))
    if kind == "value_error":
        return ScenarioError(key, str(first["ctx"]["error"]))
    return ScenarioError(key, f"{first['msg']} (got {quote(given)})")


def validate(data: Any) -> Scenario:
    """Validate a scenario mapping (a file's plain data) and resolve it, once, into a frozen
    :class:`experiments.model.Scenario` (defaults filled in, ECN and PFC thresholds in bytes, at
    least one round).

    Raises:
        ScenarioError: unknown key, wrong type, out-of-range value or an
            inconsistent combination; the message names the dotted key.
    """
    if data is None:
        raise ScenarioError("<top>", "the file is empty: a scenario needs at least its name (name: my-run)")
    if not isinstance(data, dict):
        raise ScenarioError("<top>", f"expected a mapping of keys (name: ..., topology: ...), got {type(data).__name__}")
    data = apply_scale(data)          # a scaled scenario's real fabric into its own sections
    try:
        f = ScenarioFile.model_validate(data)
    except ValidationError as e:
        raise _scenario_error(e, ScenarioFile) from None
    kind = f.topology.kind
    builder = topology_of(f.topology)
    if builder.n_links > MAX_FABRIC_LINKS:
        raise ScenarioError("topology", f"this {kind} fabric has {builder.n_links} links; one machine builds at most "
                                        f"{MAX_FABRIC_LINKS} (about a k=10 Fat-Tree): fewer switches or hosts")
    q = f.queues
    if q.buffer_bytes is not None and q.buffer_packets is not None:
        raise ScenarioError("queues.buffer_bytes", "give either buffer_bytes or buffer_packets, not both")
    if q.buffer_bytes is None and q.buffer_packets is None:
        q = q.model_copy(update={"buffer_packets": DEFAULT_BUFFER_PACKETS})
    buf = q.limit_bytes
    ecn = resolve_ecn(f.ecn, kind, switch_layers(kind), buf)
    pfc = _resolve_pfc(f.priorities, f.pfc, f.rounds, buf)
    if pfc is not None and ecn.marker == "red":
        raise ScenarioError("ecn.marker", "red: kernel RED replaces a port's one FIFO, and this scenario has "
                                          "per-priority queues (priorities/pfc); use bpf or auto (the BPF marker "
                                          "sits in front of every queue)")
    n_hosts = builder.n_hosts
    # a topology whose hosts are GPUs of servers (a rail-optimised one) declares gpus_per_server
    topo_gpus = getattr(builder, "gpus_per_server", None)
    collective = _check_collective("collective", f.collective, n_hosts, topo_gpus)
    training = _check_training("training", f.training, n_hosts, topo_gpus)
    if collective.kind is not None and training.on:
        raise ScenarioError("training", "a scenario runs a collective or training iterations, not both")
    plugins: dict = {}
    roce = f.roce
    if roce.cc is not None:
        if "mode" in roce.model_fields_set:
            raise ScenarioError("roce.mode", "give roce.mode or roce.cc (a plug-in rate controller), not both")
        plugin = _plugin("roce.cc", roce.cc, plugins)
        roce = roce.model_copy(update={"cc": roce.cc.model_copy(update={"plugin": plugin.path})})
    rounds = _resolve_rounds(f, ecn, pfc, collective, buf, n_hosts, plugins, topo_gpus, training)
    t = f.traffic
    if any(c.kind for c in [collective] + [r.collective for r in rounds]) or training.on:
        if "traffic" in f.model_fields_set:
            raise ScenarioError("traffic", "a collective or training scenario moves its own data (the collective or "
                                           "training section); it has no traffic section")
        if f.roce.pcap_hosts:
            raise ScenarioError("roce.pcap_hosts", "captures the RoCE flows of a traffic section; a collective has "
                                                   "none (capture a host with tcpdump in its namespace instead)")
        # unused by a collective run; only the warm-up's RTT probe reads its receiver and first sender
        t = t.model_copy(update={"senders": min(t.senders, n_hosts - 1)})
    t = _check_traffic(t, f.roce, builder)
    rounds = _resolve_round_traffic(f, t, rounds, n_hosts)
    faults, rounds = _resolve_faults(f, builder, rounds)
    return Scenario(name=f.name, description=f.description, seed=f.seed, variant=f.variant, topology=f.topology, routing=f.routing,
                    queues=q, links=f.links, scale=f.scale, hosts=f.hosts, traffic=t, roce=roce, collective=collective,
                    training=training,
                    measurement=f.measurement, ecn=ecn, pfc=pfc, faults=faults, rounds=tuple(rounds),
                    multi_round=f.rounds is not None)


def _resolve_faults(f: ScenarioFile, builder, rounds: list[Round]) -> tuple[tuple[FaultSpec, ...], list[Round]]:
    """The scenario's faults and each round's (its own, else the scenario's), each checked against
    the fabric (controller.faults.parse_fault: places, ports) and against the others of its round
    (controller.faults.check_clashes).

    Raises:
        ScenarioError: naming ``faults[i].<key>`` or ``rounds[r].faults[i].<key>``.
    """
    given = [f.faults] + [r.faults for r in f.rounds or [] if r.faults is not None]
    if not any(given):
        return (), rounds
    fmap = builder.build().to_map()

    def parse(items, key: str) -> tuple[FaultSpec, ...]:
        specs = tuple(parse_fault(fmap, m.model_dump(), f"{key}[{i}]") for i, m in enumerate(items))
        check_clashes(fmap, specs, key)
        return specs
    base = parse(f.faults, "faults")
    out = []
    for i, r in enumerate(rounds):
        own = f.rounds[i].faults if f.rounds is not None else None
        out.append(r.model_copy(update={"faults": parse(own, f"rounds[{i}].faults") if own is not None else base}))
    return base, out


def _check_traffic(t, roce, builder):
    """The traffic section against the fabric's hosts and its pattern (ScenarioError naming the key);
    returns it with ``dscp`` and ``senders`` resolved."""
    n_hosts = builder.n_hosts
    hosts = {f"h{i}" for i in range(1, n_hosts + 1)}
    if t.receiver not in hosts:
        raise ScenarioError("traffic.receiver", f"no host {t.receiver!r} in a fabric of {n_hosts} hosts (h1..h{n_hosts})")
    pattern = PATTERNS[t.pattern]
    for key in t.model_fields_set:            # the keys the file gave
        if key in PATTERN_KEYS and key not in pattern.PARAMS and getattr(t, key) is not None:
            raise ScenarioError(f"traffic.{key}", f"applies to the {PATTERN_KEYS[key]} pattern, not {t.pattern}")
    for key, why in pattern.REFUSED_KEYS.items():   # shared keys the pattern does not take, unless at their default
        if getattr(t, key) != type(t).model_fields[key].default:
            raise ScenarioError(f"traffic.{key}", why)
    problem = pattern.check(n_hosts, builder.n_groups, t)
    if problem:
        raise ScenarioError(f"traffic.{problem[0]}", problem[1])
    if t.pattern != "incast":
        pairs = pattern.pair_count(n_hosts)
        if pairs * t.flows_per_pair > MAX_FLOWS:
            raise ScenarioError("traffic.flows_per_pair", f"{t.pattern} on {n_hosts} hosts with "
                                f"{t.flows_per_pair} flow(s) per pair is {pairs * t.flows_per_pair} flows; "
                                f"at most {MAX_FLOWS} (fewer hosts, or fewer flows per pair)")
    update: dict = dict(pattern.resolve(t))     # the pattern's own keys' defaults
    if t.dscp is None:
        update["dscp"] = 26 if t.transport == "roce" else 0
    if t.transport != "roce":
        for k, default in (("responses", 1), ("arrival", "synchronized"), ("load", None)):
            if getattr(t, k) != default and k not in pattern.COMMON_KEYS:
                raise ScenarioError(f"traffic.{k}", "applies to transport roce (the tcp and udp agents send one "
                                                    "flow per sender)")
    elif t.arrival == "poisson" and t.load is None:
        raise ScenarioError("traffic.load", "poisson arrivals need a load (a fraction of the receiver's link)")
    if t.transport == "roce" and t.pattern != "incast" and t.responses != 1:
        raise ScenarioError("traffic.responses", "applies to the incast pattern")
    for i, h in enumerate(roce.pcap_hosts or []):
        if h not in hosts:
            raise ScenarioError(f"roce.pcap_hosts[{i}]", f"no host {h!r} in a fabric of {n_hosts} hosts")
    if t.incast_mode == "blocks":
        if t.pattern != "incast":
            raise ScenarioError("traffic.incast_mode", f"blocks applies to the incast pattern, not {t.pattern}")
        if t.transport != "tcp":
            raise ScenarioError("traffic.incast_mode", f"blocks runs over kernel TCP (transport tcp), not {t.transport}")
        if t.block_bytes is None:
            update["block_bytes"] = DEFAULT_BLOCK_BYTES
        if t.blocks is None and t.duration_s is None:
            update["blocks"] = DEFAULT_BLOCKS
    else:
        for k in ("block_bytes", "blocks"):
            if getattr(t, k) is not None:
                raise ScenarioError(f"traffic.{k}", "applies to an incast with incast_mode: blocks")
        if t.pattern == "incast" and t.duration_s is not None:
            raise ScenarioError("traffic.duration_s", "applies to the pair patterns (permutation, all-to-all, ...) "
                                                      "and to incast_mode: blocks, not a oneshot incast (it sends "
                                                      "response_bytes per sender)")
    if t.sender_hosts is not None:
        for i, h in enumerate(t.sender_hosts):
            if h not in hosts:
                raise ScenarioError(f"traffic.sender_hosts[{i}]", f"no host {h!r} in a fabric of {n_hosts} hosts")
            if h == t.receiver:
                raise ScenarioError(f"traffic.sender_hosts[{i}]", "a sender cannot be the receiver")
        if len(set(t.sender_hosts)) != len(t.sender_hosts):
            raise ScenarioError("traffic.sender_hosts", "lists a host twice")
        update["senders"] = len(t.sender_hosts)
    elif t.pattern == "incast" and t.senders > n_hosts - 1:    # other patterns do not read senders
        raise ScenarioError("traffic.senders", f"{t.senders} senders need more than the fabric's {n_hosts - 1} other hosts")
    return t.model_copy(update=update) if update else t


def _check_collective(key: str, c: Collective, n_hosts: int, topo_gpus: int | None = None) -> Collective:
    """A collective section against the fabric's hosts (ScenarioError naming the key); returns it
    with ``ranks`` counting its hosts when they are listed. ``topo_gpus``: the GPUs per server of
    a fabric whose hosts are GPUs (a rail-optimised one), None when every host is a server."""
    if c.kind is None:
        return c
    if c.algorithm == "hierarchical" and c.kind != "allreduce":
        raise ScenarioError(f"{key}.algorithm", f"hierarchical is an allreduce algorithm, not one for {c.kind}")
    c = _check_ranks(key, c, n_hosts, topo_gpus)
    for i, s_bytes in enumerate(c.sizes_bytes or [c.size_bytes]):
        skey = f"{key}.sizes_bytes[{i}]" if c.sizes_bytes else f"{key}.size_bytes"
        if s_bytes % 4:
            raise ScenarioError(skey, f"{s_bytes} is not a whole number of float32 elements (a multiple of 4 bytes)")
        if s_bytes // 4 < c.ranks:
            raise ScenarioError(skey, f"{s_bytes} bytes is fewer float32 elements than {c.ranks} ranks' chunks")
    return c


def _check_training(key: str, t: Training, n_hosts: int, topo_gpus: int | None = None) -> Training:
    """A training section against the fabric's hosts and its own model (ScenarioError naming the
    key); returns it with ``ranks`` counting its hosts when they are listed."""
    if not t.on:
        given = [k for k in sorted(t.model_fields_set) if getattr(t, k) != Training.model_fields[k].default]
        if given:
            raise ScenarioError(f"{key}.model", f"training keys ({', '.join(given)}) without a model: give model "
                                                "(a preset) or layers")
        return t
    if t.model is not None and t.layers is not None:
        raise ScenarioError(f"{key}.layers", "give a model (a preset) or layers, not both")
    for i, layer in enumerate(t.layers or []):
        if layer.params_bytes % 4:
            raise ScenarioError(f"{key}.layers[{i}].params_bytes", f"{layer.params_bytes} is not a whole number of "
                                                                   "float32 elements (a multiple of 4 bytes)")
    t = _check_ranks(key, t, n_hosts, topo_gpus)
    if t.mixed:
        _check_mixed(key, t, topo_gpus)
        return t
    idle = [k for k in ("microbatches", "activation_bytes") if getattr(t, k) != Training.model_fields[k].default]
    if idle:
        raise ScenarioError(f"{key}.{idle[0]}", "only with tensor or pipeline parallelism (tensor or pipeline "
                                                "above 1): a data-parallel job has no microbatches or activations")
    try:
        bk = t.buckets()
    except ValueError as e:
        raise ScenarioError(f"{key}.layers" if t.layers else f"{key}.model", str(e)) from None
    small = [b for b in bk if b.params_bytes // 4 < t.ranks]
    if small:
        raise ScenarioError(f"{key}.bucket_bytes", f"a bucket of {small[0].params_bytes} bytes is fewer float32 "
                                                   f"elements than {t.ranks} ranks' chunks (larger layers or buckets)")
    return t


def _check_mixed(key: str, t: Training, topo_gpus: int | None) -> None:
    """A mixed-parallel training section (tensor or pipeline above 1): the plan's counts divide,
    tensor groups fit a server, stages are whole servers, the data-parallel buckets have an
    element per replica; uncompressed ring reductions only (ScenarioError naming the key)."""
    for k, ok in (("compression", t.compression == "none"), ("algorithm", t.algorithm == "ring"),
                  ("placement", t.placement == "local" or t.hosts is not None)):
        if not ok:
            raise ScenarioError(f"{key}.{k}", f"{getattr(t, k)!r} with tensor or pipeline parallelism: a mixed-parallel "
                                              f"job reduces uncompressed ring AllReduces over consecutive ranks")
    g = t.gpus_per_server or topo_gpus
    if g is not None and t.hosts is None and t.tensor > g:
        raise ScenarioError(f"{key}.tensor", f"tensor groups of {t.tensor} do not fit servers of {g} GPUs: tensor "
                                             "parallelism stays inside a server")
    try:
        plan = t.plan()
    except ValueError as e:
        bad = "activation_bytes" if "activation" in str(e) else "tensor" if t.ranks % t.tensor else "pipeline"
        raise ScenarioError(f"{key}.{bad}", str(e)) from None
    if g is not None and t.hosts is None:
        if g % t.tensor:
            raise ScenarioError(f"{key}.tensor", f"tensor groups of {t.tensor} do not fit servers of {g} GPUs: tensor "
                                                 "parallelism stays inside a server")
        if plan.per_stage % g:
            raise ScenarioError(f"{key}.pipeline", f"stages of {plan.per_stage} ranks are not whole servers of {g} GPUs")
    try:
        layers = t.model_layers()
        for s in range(plan.pipeline):
            for b in stage_buckets(plan, layers, s, t.bucket_bytes)[1]:
                if b.params_bytes // 4 < plan.data:
                    raise ValueError(f"stage {s}: a bucket of {b.params_bytes} bytes per tensor rank is fewer float32 "
                                     f"elements than {plan.data} replicas' chunks")
    except ValueError as e:
        raise ScenarioError(f"{key}.pipeline" if "pipeline stages" in str(e) else f"{key}.bucket_bytes", str(e)) from None


def _check_ranks(key: str, c, n_hosts: int, topo_gpus: int | None):
    """The keys a collective and a training section share (experiments.model.RanksOnServers):
    hosts, GPUs per server, whole servers for the hierarchical algorithm. Returns the section,
    ``ranks`` counting its hosts when they are listed."""
    g = c.gpus_per_server
    if g is not None and topo_gpus is not None:
        raise ScenarioError(f"{key}.gpus_per_server", "this topology's hosts are GPUs already (one NIC per GPU); "
                                                      "its servers' size is topology.gpus_per_server")
    if g is not None and c.hosts is not None:
        raise ScenarioError(f"{key}.gpus_per_server", "give gpus_per_server or hosts (list a host once per rank to "
                                                      "put several ranks on it), not both")
    if g is not None:
        if c.ranks % g:
            raise ScenarioError(f"{key}.ranks", f"{c.ranks} ranks do not fill servers of {g} GPUs "
                                                f"({key}.gpus_per_server)")
        if c.ranks // g > n_hosts:
            raise ScenarioError(f"{key}.ranks", f"{c.ranks // g} servers of {g} GPUs on a fabric of {n_hosts} hosts")
        if c.ranks // g < 2:
            raise ScenarioError(f"{key}.ranks", f"{c.ranks} ranks fill one server of {g} GPUs: the collective would "
                                                "never use the fabric (give at least two servers' worth)")
    elif topo_gpus is not None and c.hosts is None and c.placement == "local" and c.ranks <= topo_gpus:
        raise ScenarioError(f"{key}.ranks", f"{c.ranks} ranks fill one server of {topo_gpus} GPUs: the collective "
                                            "would never use the fabric (give at least two servers' worth)")
    elif c.algorithm == "hierarchical" and topo_gpus is not None and c.hosts is None and c.ranks % topo_gpus:
        raise ScenarioError(f"{key}.ranks", f"{c.ranks} ranks do not fill servers of {topo_gpus} GPUs: the "
                                            "hierarchical algorithm needs whole servers")
    if c.hosts is not None:
        for i, h in enumerate(c.hosts):
            if not re.fullmatch(r"h[0-9]+", h) or not 1 <= int(h[1:]) <= n_hosts:
                raise ScenarioError(f"{key}.hosts[{i}]", f"no host {h!r} in a fabric of {n_hosts} hosts")
        # the server of each listed rank: its host, or on a fabric of GPU hosts the host's server
        servers = [(int(h[1:]) - 1) // topo_gpus if topo_gpus else h for h in c.hosts]
        per = {sv: servers.count(sv) for sv in servers}
        if len(per) < 2:
            raise ScenarioError(f"{key}.hosts", "every rank is on one server: the collective would never use the "
                                                "fabric (give ranks on at least two servers)")
        if c.algorithm == "hierarchical" and len(set(per.values())) > 1:
            raise ScenarioError(f"{key}.hosts", f"the hierarchical algorithm needs the same number of ranks on "
                                                f"every server, not {sorted(per.values(), reverse=True)}")
        if len(c.hosts) != c.ranks:
            c = c.model_copy(update={"ranks": len(c.hosts)})
    elif g is None and c.ranks > n_hosts:
        raise ScenarioError(f"{key}.ranks", f"{c.ranks} ranks, one per host, on a fabric of {n_hosts} hosts "
                                            "(list hosts to put several ranks on one)")
    return c


def _resolve_pfc(prio_data, pfc_data, rounds: list[RoundFile] | None, buf_bytes: int) -> PfcConfig | None:
    """The ``priorities`` and ``pfc`` sections parsed once (common.pfc.parse_pfc), or None when the
    scenario has neither and no round turns PFC on: then every port keeps one FIFO, as before. A
    round's ``pfc: {enabled: true}`` alone brings the default classes (DSCP 26 -> priority 3
    lossless, the rest priority 0) with PFC off in the other rounds."""
    rounds_pfc = any(r.pfc is not None for r in rounds or [])
    if prio_data is None and pfc_data is None and not rounds_pfc:
        return None
    if pfc_data is not None and not isinstance(pfc_data, dict):
        raise ScenarioError("pfc", f"expected a mapping, got {type(pfc_data).__name__}")
    if prio_data is not None and not isinstance(prio_data, dict):
        raise ScenarioError("priorities", f"expected a mapping, got {type(prio_data).__name__}")
    return parse_pfc(prio_data, pfc_data if pfc_data is not None else {"enabled": False}, buf_bytes, FRAME_BYTES)


def _round_cc(f: ScenarioFile, r: RoundFile | None, key: str, plugins: dict) -> tuple[str, RocePlugin | None]:
    """A round's rate controller as ``(roce_mode, plug-in or None)``: the round's ``roce.mode`` or
    ``roce.cc``, else the scenario's ``roce.cc`` or ``roce.mode``. Raises ScenarioError at
    ``<key>.roce`` when the round gives both, or at ``<key>.roce.cc.plugin`` for a bad plug-in."""
    rr = r.roce if r is not None else None
    if rr is not None and rr.mode is not None and rr.cc is not None:
        raise ScenarioError(f"{key}.roce", "sets both mode and cc; a round runs one rate controller")
    if rr is not None and rr.cc is not None:
        p = _plugin(f"{key}.roce.cc", rr.cc, plugins)
    elif rr is not None and rr.mode is not None:
        return rr.mode, None
    elif f.roce.cc is not None:
        p = _plugin("roce.cc", f.roce.cc, plugins)
    else:
        return f.roce.mode, None
    return PLUGIN_PREFIX + p.name, p


def _resolve_rounds(f: ScenarioFile, ecn: EcnSettings, pfc: PfcConfig | None, collective: Collective,
                    buf: int, n_hosts: int, plugins: dict | None = None,
                    topo_gpus: int | None = None, training: Training | None = None) -> list[Round]:
    """The rounds: the same traffic run several times on one fabric, with ECN profiles and host
    settings changed between rounds by the controller (no rebuild); a scenario without ``rounds``
    has one, named after it. Each round's ``ecn`` keys (profile, layers, ports) and ``hosts`` keys
    replace the scenario's for that round; its ``pfc: {enabled}`` turns PFC on or off (the
    scenario's other PFC settings hold); its ``roce: {mode}`` or ``roce: {cc: {plugin}}`` sets the
    RoCE rate controller (A/B runs of dcqcn against none, timely, patched_timely, swift or a plug-in), its ``seed`` the seed of its random choices (rounds that differ only in
    their seed repeat an experiment); its ``collective`` keys (experiments.model.ROUND_COLLECTIVE_KEYS) replace the
    scenario's, and its ``training`` keys (experiments.model.ROUND_TRAINING_KEYS) the training's. Each round's ``traffic`` is the file's section here; :func:`_resolve_round_traffic`
    replaces it with the checked one (and the round's own keys) once the traffic is checked.

    Raises ScenarioError naming e.g. ``rounds[1].ecn.profile.step.k_bytes``.
    """
    pfc_on = pfc.enabled if pfc is not None else False
    plugins = {} if plugins is None else plugins
    training = f.training if training is None else training
    if f.rounds is None:
        mode, plugin = _round_cc(f, None, "", plugins)
        return [Round(name=f.name, ecn=ecn, hosts=f.hosts, pfc_enabled=pfc_on, roce_mode=mode, roce_plugin=plugin,
                      seed=f.seed, variant=f.variant or f.name, collective=collective, training=training,
                      traffic=f.traffic)]
    kind = f.topology.kind
    out, names = [], set()
    for i, r in enumerate(f.rounds):
        key = f"rounds[{i}]"
        if r.name in names:
            raise ScenarioError(f"{key}.name", f"two rounds are called {r.name!r}")
        names.add(r.name)
        given = r.ecn or {}
        if not isinstance(given, dict):
            raise ScenarioError(f"{key}.ecn", "expected a mapping")
        merged = resolve_ecn(given, kind, switch_layers(kind), buf, key=f"{key}.ecn", base=ecn)
        hosts = f.hosts.model_copy(update=r.hosts.changes()) if r.hosts is not None else f.hosts
        coll = collective
        if r.collective is not None:
            rc = r.collective.changes()
            if collective.kind is None and "kind" not in rc:
                raise ScenarioError(f"{key}.collective", "the scenario has no collective (collective.kind)")
            if "hosts" not in rc and "placement" in rc:
                rc["hosts"] = None
            if "hosts" in rc and rc["hosts"] is None and "ranks" not in rc:
                rc["ranks"] = f.collective.ranks
            coll = _check_collective(f"{key}.collective", collective.model_copy(update=rc), n_hosts, topo_gpus)
        train = training
        if training.on and coll.kind is not None:
            raise ScenarioError(f"{key}.collective", "a scenario runs a collective or training iterations, not both")
        if r.training is not None:
            if not training.on:
                raise ScenarioError(f"{key}.training", "the scenario has no training (training.model or layers)")
            train = _check_training(f"{key}.training", training.model_copy(update=r.training.changes()), n_hosts,
                                    topo_gpus)
        mode, plugin = _round_cc(f, r, key, plugins)
        out.append(Round(name=r.name, ecn=merged, hosts=hosts,
                         pfc_enabled=r.pfc.enabled if r.pfc is not None and r.pfc.enabled is not None else pfc_on,
                         roce_mode=mode, roce_plugin=plugin,
                         seed=r.seed if r.seed is not None else f.seed, variant=r.variant or f.variant or r.name,
                         collective=coll, training=train, traffic=f.traffic))
    return out


def _resolve_round_traffic(f: ScenarioFile, t, rounds: list[Round], n_hosts: int) -> list[Round]:
    """Each round with the traffic section it runs (``Round.traffic``): the checked scenario
    traffic ``t``, with a round's ``traffic`` keys (experiments.model.ROUND_TRAFFIC_KEYS: an
    incast's senders, over kernel TCP, UDP or RoCEv2, and the block size of an incast in blocks
    mode) replacing it. With ``sender_hosts`` a round's ``senders`` takes the first that many of
    them; otherwise the incast pattern picks them (traffic.patterns.incast_senders).

    Raises:
        ScenarioError: naming ``rounds[i].traffic`` when the scenario is not an incast (every
            other pattern plans its flows once for the run), ``rounds[i].traffic.block_bytes``
            when it is not one in blocks mode, or ``rounds[i].traffic.senders`` when the round
            asks for more senders than the fabric (or ``sender_hosts``) has.
    """
    out = []
    for i, r in enumerate(rounds):
        given = f.rounds[i].traffic if f.rounds is not None else None
        over = {k: v for k, v in given.changes().items() if v is not None} if given is not None else {}
        key = f"rounds[{i}].traffic"
        if over and t.pattern != "incast":
            raise ScenarioError(key, f"applies to an incast, not {t.pattern} (other traffic is planned once "
                                     "for every round)")
        if "block_bytes" in over and t.incast_mode != "blocks":
            raise ScenarioError(f"{key}.block_bytes", "applies to an incast with traffic.incast_mode: blocks")
        rt = t
        if over:
            n = over.get("senders", t.senders)
            if t.sender_hosts is not None:
                if n > len(t.sender_hosts):
                    raise ScenarioError(f"{key}.senders", f"{n} senders, but traffic.sender_hosts lists "
                                                          f"{len(t.sender_hosts)}")
                over["sender_hosts"] = t.sender_hosts[:n]
            elif n > n_hosts - 1:
                raise ScenarioError(f"{key}.senders", f"{n} senders need more than the fabric's {n_hosts - 1} "
                                                      "other hosts")
            rt = t.model_copy(update=over)
        out.append(r.model_copy(update={"traffic": rt}))
    return out


#: A scenario file larger than this is refused before it is read (the bundled ones are under 4 KB).
MAX_FILE_BYTES = 1 << 20
#: Values (every mapping, list and scalar, counting what YAML aliases repeat) a scenario may hold.
MAX_VALUES = 100_000
#: How deeply mappings and lists may nest.
MAX_DEPTH = 32


def controller_params(sc: Scenario, mode: str):
    """The parameters of the registered rate controller ``mode`` (its ``params_cls``, a frozen
    dataclass of common/): the defaults scaled to the host link rate, with the keys of
    ``roce.<mode>`` given replacing them (``*_mbps`` keys in bit/s, ``time_scale`` passed as
    such).

    Raises:
        KeyError: ``mode`` is not a registered controller with parameters.
        ScenarioError: naming ``roce.<mode>.<key>`` when the result is inconsistent.
    """
    if not has_params(RATE_CONTROLLERS[mode]):
        raise KeyError(f"rate controller {mode!r} has no parameters")
    cls = RATE_CONTROLLERS[mode].params_cls
    given = getattr(sc.roce, mode).model_dump()
    d = {k: v for k, v in given.items() if v is not None}
    ts = d.pop("time_scale", None)
    over = {(k[:-5] + "_bps" if k.endswith("_mbps") else k): (v * 1e6 if k.endswith("_mbps") else v)
            for k, v in d.items()}
    try:
        return cls.scaled(sc.topology.host_rate_mbps * 1e6, time_scale=ts, **over)
    except ValueError as e:
        name = str(e).split(" ")[0]
        key = next((k for k in given if k.replace("_mbps", "_bps") == name), name)
        raise ScenarioError(f"roce.{mode}.{key}", str(e)) from None


def all_controller_params(sc: Scenario) -> dict:
    """``{mode: controller_params(sc, mode)}`` for every registered rate controller with
    parameters (each QP's job carries them all; its mode picks one). Raises ScenarioError as
    :func:`controller_params`."""
    return {mode: controller_params(sc, mode) for mode, c in RATE_CONTROLLERS.items() if has_params(c)}


def dcqcn_params(sc: Scenario) -> DcqcnParams:
    """The scenario's DCQCN parameters (:func:`controller_params` of ``dcqcn``), which DCQCN's
    fluid model (experiments.fluid) also reads. Raises ScenarioError naming ``roce.dcqcn.<key>``."""
    return controller_params(sc, "dcqcn")


def _plugin(key: str, cc, cache: dict) -> RocePlugin:
    """The checked plug-in of a ``cc`` section (experiments.model.Cc) at ``key``
    (``roce.cc`` or ``rounds[i].roce.cc``): loaded once per file and parameters
    (traffic.ccplugin.load_plugin). Raises ScenarioError at ``<key>.plugin`` naming the file and
    what is wrong."""
    path = str(Path(cc.plugin).expanduser().absolute())
    params = dict(cc.params)
    ck = (path, tuple(sorted(params.items())))
    if ck not in cache:
        try:
            name = load_plugin(path, params).name
        except PluginError as e:
            raise ScenarioError(f"{key}.plugin", str(PluginError(cc.plugin, e.problem))) from None
        cache[ck] = RocePlugin(path=path, name=name, params=params)
    return cache[ck]


def load_scenario(path: str | Path) -> Scenario:
    """Read a YAML scenario file and return it validated and resolved.

    The file must be a regular file of at most :data:`MAX_FILE_BYTES`, in UTF-8, with no key
    given twice in one mapping, nested at most :data:`MAX_DEPTH` deep and holding at most
    :data:`MAX_VALUES` values (aliases counted as often as they are used).

    Raises:
        ScenarioError: the file is missing or not a regular file, too large, not UTF-8, not
            YAML, breaks one of those limits (a duplicate key is named with its dotted path),
            or fails :func:`validate`.
    """
    return validate(read_yaml_file(path))


def read_yaml_file(path: str | Path) -> Any:
    """The plain data of a YAML file under :func:`load_scenario`'s limits (scenarios, comparisons).

    Raises:
        ScenarioError: see :func:`load_scenario` (everything but validation).
    """
    p = Path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise ScenarioError("<file>", f"cannot read {p}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ScenarioError("<file>", f"{p} is not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise ScenarioError("<file>", f"{p} is {st.st_size} bytes; a scenario may have at most {MAX_FILE_BYTES}")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ScenarioError("<file>", f"cannot read {p}: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ScenarioError("<file>", f"{p} is not UTF-8 text (byte {e.start} is 0x{raw[e.start]:02x})") from None
    return parse_yaml(text, str(p))


def parse_yaml(text: str, name: str = "<scenario>") -> Any:
    """YAML text -> plain data, refusing duplicate keys, deep nesting and alias bombs.

    Raises:
        ScenarioError: not YAML, or breaks a limit (see :func:`load_scenario`).
    """
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise ScenarioError("<file>", f"{name} is nested too deeply (at most {MAX_DEPTH} levels)") from None
    except yaml.YAMLError as e:
        raise ScenarioError("<file>", f"{name} is not valid YAML: {e}") from None
    if node is None:
        return None
    _check_node(node)
    try:
        return yaml.SafeLoader(text).get_single_data()
    except yaml.YAMLError as e:
        raise ScenarioError("<file>", f"{name} is not valid YAML: {e}") from None


def _check_node(root) -> None:
    """Walk a composed YAML document (aliases followed, as often as they are used) and raise
    ScenarioError at the first duplicate key, a nesting deeper than MAX_DEPTH or the value
    past MAX_VALUES."""
    count = 0
    stack = [(root, "", 0)]
    while stack:
        node, where, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ScenarioError("<file>", f"holds more than {MAX_VALUES} values (YAML aliases count each time "
                                          "they are used)")
        if depth > MAX_DEPTH:
            raise ScenarioError(where or "<top>", f"is nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for k, v in node.value:
                key = k.value if isinstance(k, yaml.ScalarNode) else "<key>"
                path = f"{where}.{key}" if where else str(key)
                if key in seen:
                    raise ScenarioError(path, f"is given twice in one mapping (lines {seen[key]} and "
                                              f"{k.start_mark.line + 1}); the second would replace the first")
                seen[key] = k.start_mark.line + 1
                stack.append((v, path, depth + 1))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                stack.append((v, f"{where}[{i}]", depth + 1))
