"""Scenario files: YAML plus a strict schema.

Every key is declared in :data:`SCHEMA` with its type, range and default.
Unknown keys, wrong types and out-of-range values raise
:class:`common.errors.ScenarioError` naming the dotted key, before anything
is started. :func:`load_scenario` returns the *resolved* scenario (defaults
filled in), which every run stores in its results folder.
"""
from __future__ import annotations

import copy
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from common.dcqcn import DcqcnParams
from common.ecn import resolve_ecn
from common.errors import ScenarioError
from common.params import _REQUIRED, F, ListOf
from common.pfc import config_sections, parse_pfc
from common.units import FRAME_BYTES  # noqa: F401 (re-exported: the scenario's sizes)
from topologies import TOPOLOGIES
from traffic.patterns import PATTERNS
from traffic.ratecontrol import RATE_CONTROLLERS

NUM = (int, float)
NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
HOST = r"h[0-9]{1,5}"

def _topology_params() -> dict:
    """Every registered topology's keys in one section (a key two kinds share is declared once)."""
    out: dict = {}
    for kind, cls in TOPOLOGIES.items():
        for key, spec in cls.PARAMS.items():
            if out.setdefault(key, spec) != spec:
                raise TypeError(f"topology {kind}: key {key} declared differently by another topology")
    return out


def _pattern_params() -> dict:
    """Every registered traffic pattern's own keys (stride, edge_p, ...) in one section."""
    out: dict = {}
    for cls in PATTERNS.values():
        for key, spec in cls.PARAMS.items():
            if out.setdefault(key, spec) != spec:
                raise TypeError(f"pattern {cls.NAME}: key {key} declared differently by another pattern")
    return out


#: Which pattern each pattern-specific ``traffic`` key belongs to.
PATTERN_KEYS = {key: cls.NAME for cls in PATTERNS.values() for key in cls.PARAMS}


#: The whole scenario schema. Nested dicts are sections.
SCHEMA: dict = {
    "name": F((str,), _REQUIRED, pattern=NAME),
    "description": F((str,), ""),
    "seed": F((int,), 1, lo=0, hi=2**31 - 1),
    # kind and the keys of every registered topology (topologies.TOPOLOGIES); a kind takes only its own
    "topology": {"kind": F((str,), "spineleaf", choices=tuple(TOPOLOGIES)), **_topology_params()},
    "routing": {
        "mode": F((str,), "ecmp", choices=("ecmp", "single")),
    },
    "queues": {
        # exactly one of buffer_bytes / buffer_packets (checked below)
        "buffer_bytes": F((int,), None, lo=FRAME_BYTES, hi=64 * 2**20),
        "buffer_packets": F((int,), None, lo=1, hi=100000),
        "burst_bytes": F((int,), 2 * FRAME_BYTES, lo=FRAME_BYTES, hi=2**20),
    },
    "hosts": {
        "tcp_congestion_control": F((str,), "cubic", pattern=r"[a-z0-9_]{1,16}"),
        "tcp_ecn": F((int,), 0, choices=(0, 1, 2)),
    },
    "traffic": {
        # incast: `senders` hosts -> `receiver`, response_bytes each (partition-aggregate);
        # permutation: every host -> one host of another leaf/pod; all-to-all: every ordered pair;
        # Hedera's stride, staggered, random, random-bijection and hotspot (traffic.patterns.PATTERNS).
        # All but incast send flows_per_pair flows of flow_bytes each, or for duration_s each.
        "pattern": F((str,), "incast", choices=tuple(PATTERNS)),
        **_pattern_params(),
        "receiver": F((str,), "h1", pattern=HOST),
        "senders": F((int,), 8, lo=1, hi=1000),
        "sender_hosts": ListOf(F((str,), pattern=HOST), None, min_len=1),
        "response_bytes": F((int,), 500_000, lo=1, hi=10**10),
        "flows_per_pair": F((int,), 1, lo=1, hi=64),
        "flow_bytes": F((int,), 1_000_000, lo=1, hi=10**10),
        "duration_s": F(NUM, None, lo=0.5, hi=3600),
        "port": F((int,), 5001, lo=1024, hi=65535),
        # tcp: kernel TCP; udp: sequence-numbered datagrams as fast as the host NIC takes them
        # (a full socket or a paused NIC blocks the send, counted; nothing is dropped at the host);
        # roce: RoCEv2 queue pairs with DCQCN or a fixed rate (the roce section; traffic.roce)
        "transport": F((str,), "tcp", choices=("tcp", "udp", "roce")),
        # incast responses (roce): how many each sender sends, and when: all at once
        # (synchronized; several: one round per load-worth of the receiver's link) or as Poisson
        # arrivals adding up to `load` of the receiver's link (case R4)
        "responses": F((int,), 1, lo=1, hi=100000),
        "arrival": F((str,), "synchronized", choices=("synchronized", "poisson")),
        "load": F(NUM, None, lo=0.001, hi=1.0),
        # the DSCP every flow carries: priorities.dscp maps it to a priority (26: lossless by default);
        # default 26 for roce (RoCE runs in the lossless class), else 0
        "dscp": F((int,), None, lo=0, hi=63),
        "start_delay_s": F(NUM, 0.5, lo=0.05, hi=60),
        "timeout_s": F(NUM, 120, lo=1, hi=3600),
    },
    "roce": {
        # dcqcn: DCQCN reaction point per QP (rates from common.dcqcn); none: a fixed rate, CNPs ignored
        "mode": F((str,), "dcqcn", choices=tuple(RATE_CONTROLLERS)),
        "rate_mbps": F(NUM, None, lo=0.01, hi=1000),        # mode none; default: the host link rate
        "mtu_bytes": F((int,), 1024, choices=(256, 512, 1024, 2048, 4096)),
        "ack_every": F((int,), 16, lo=1, hi=4096),
        "rto_s": F(NUM, None, lo=0.001, hi=60),             # default: experiments.rocerun.default_rto_s
        "cnp_dscp": F((int,), 48, lo=0, hi=63),
        "pcap_hosts": ListOf(F((str,), pattern=HOST), None),
        # DCQCN parameters (names as in Zhu et al. 2015); absent = the paper's NIC defaults scaled
        # to the host link rate (common.dcqcn.DcqcnParams.scaled)
        "dcqcn": {
            "time_scale": F(NUM, None, lo=1e-3, hi=1e6),
            "g": F(NUM, None, lo=1e-6, hi=1.0),
            "alpha_timer_s": F(NUM, None, lo=1e-6, hi=60),
            "cnp_interval_s": F(NUM, None, lo=0.0, hi=60),
            "timer_s": F(NUM, None, lo=1e-6, hi=60),
            "byte_counter_bytes": F(NUM, None, lo=1, hi=1e12),
            "fast_recovery_stages": F((int,), None, lo=1, hi=1000),
            "rate_ai_mbps": F(NUM, None, lo=1e-6, hi=1000),
            "rate_hai_mbps": F(NUM, None, lo=1e-6, hi=1000),
            "min_rate_mbps": F(NUM, None, lo=1e-6, hi=1000),
        },
    },
    # a collective (issue 8) instead of the traffic section's flows: ranks on hosts, real arrays
    # reduced over kernel TCP or RoCEv2 (traffic.collective); kind absent = no collective
    "collective": {
        "kind": F((str,), None, choices=("allreduce", "reduce_scatter", "all_gather", "all_to_all")),
        "ranks": F((int,), 8, lo=2, hi=1024),
        # local: consecutive ranks on a rack; spread: round-robin over leaves (pods); or `hosts`
        # (rank r on hosts[r]; when given it sets the number of ranks and `ranks` is not used)
        "placement": F((str,), "local", choices=("local", "spread")),
        "hosts": ListOf(F((str,), pattern=HOST), None, min_len=2),
        # bytes per rank (D); sizes_bytes: a sweep (busbw against size), size_bytes ignored then
        "size_bytes": F((int,), 1_000_000, lo=4, hi=2**31),
        "sizes_bytes": ListOf(F((int,), lo=4, hi=2**31), None, min_len=1),
        "repeat": F((int,), 1, lo=1, hi=100),
        "init": F((str,), "seeded", choices=("seeded", "textbook")),
        "timeout_s": F(NUM, 300, lo=1, hi=7200),
        # tcp: kernel TCP connections; roce: RoCEv2 queue pairs (traffic.roce: go-back-N, DCQCN
        # or the roce section's fixed rate; the roce section's mode, dcqcn, mtu_bytes, rto_s apply)
        "transport": F((str,), "tcp", choices=("tcp", "roce")),
    },
    "measurement": {
        "sample_hz": F(NUM, 200, lo=1, hi=2000),
        "post_s": F(NUM, 0.5, lo=0, hi=10),
        # throughput is averaged from warmup_s after the start (TCP slow start excluded)
        "warmup_s": F(NUM, 1.0, lo=0, hi=600),
    },
}


#: Top-level sections that their own parsers check (not fields of SCHEMA): named among the known keys.
OWN_SECTIONS = ("ecn", "priorities", "pfc", "rounds")


def _resolve(schema: dict, data: Any, prefix: str, also_known: tuple = ()) -> dict:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError(prefix or "<top>", f"expected a mapping, got {type(data).__name__}")
    for key in data:
        if key not in schema:
            where = f"{prefix}.{key}" if prefix else str(key)
            known = ", ".join(sorted([*schema, *also_known]))
            raise ScenarioError(where, f"unknown key (known keys here: {known})")
    out = {}
    for key, spec in schema.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(spec, dict):
            out[key] = _resolve(spec, data.get(key), path)
            continue
        if key not in data:
            if spec.default is _REQUIRED:
                raise ScenarioError(path, "is required")
            out[key] = copy.deepcopy(spec.default)
            continue
        value = data[key]
        if isinstance(spec, ListOf):
            if value is None:
                out[key] = None
                continue
            if not isinstance(value, list) or len(value) < spec.min_len:
                raise ScenarioError(path, f"expected a list of at least {spec.min_len} item(s)")
            out[key] = [spec.item.check(f"{path}[{i}]", v) for i, v in enumerate(value)]
        else:
            out[key] = spec.check(path, value)
    return out


#: Most links a fabric may have. Bring-up here grows about as links^1.5 (a k=8 Fat-Tree, 384 links:
#: 82 s on a 2-core machine), so 1024 links is several minutes; every link is two veth interfaces
#: and, on switch ends, a shaped queue.
MAX_FABRIC_LINKS = 1024

#: Most TCP flows one run may open (each is a socket in some host; an all-to-all grows as N^2).
MAX_FLOWS = 20000

#: The topology keys each fabric kind takes (the others are refused for it).
TOPOLOGY_KEYS = {kind: ("kind", *cls.PARAMS) for kind, cls in TOPOLOGIES.items()}


def topology_of(topology: dict):
    """The builder of a resolved ``topology`` section (not built yet: ``.build()`` makes the Fabric).

    Raises:
        ScenarioError: a value the builder refuses (e.g. an odd Fat-Tree k), naming ``topology.<key>``.
    """
    return TOPOLOGIES[topology["kind"]](**{k: v for k, v in topology.items() if k != "kind"})


def switch_layers(kind: str) -> tuple[str, ...]:
    """The switch layers of a registered topology kind, top first (ECN's ``layers`` keys)."""
    return tuple(layer for layer in TOPOLOGIES[kind].LAYERS if layer != "host")


def validate(data: Any) -> dict:
    """Validate a scenario mapping and return it resolved (defaults filled in).

    Raises:
        ScenarioError: unknown key, wrong type, out-of-range value or an
            inconsistent combination; the message names the dotted key.
    """
    if isinstance(data, dict):
        data = dict(data)
        ecn_data, rounds_data = data.pop("ecn", None), data.pop("rounds", None)
        prio_data, pfc_data = data.pop("priorities", None), data.pop("pfc", None)
    else:
        ecn_data = rounds_data = prio_data = pfc_data = None
    given_topology = data.get("topology") if isinstance(data, dict) else None
    if isinstance(given_topology, dict) and given_topology.get("kind", "spineleaf") in TOPOLOGY_KEYS:
        own = TOPOLOGY_KEYS[given_topology.get("kind", "spineleaf")]
        for key in given_topology:      # a misspelt key: name the keys of the kind given, not of every kind
            if key not in SCHEMA["topology"]:
                raise ScenarioError(f"topology.{key}", f"unknown key (known keys here: {', '.join(sorted(own))})")
    sc = _resolve(SCHEMA, data, "", also_known=OWN_SECTIONS)
    kind = sc["topology"]["kind"]
    given = data.get("topology") or {} if isinstance(data, dict) else {}
    for key in given:
        if key not in TOPOLOGY_KEYS[kind]:
            raise ScenarioError(f"topology.{key}", f"does not apply to kind {kind!r} "
                                                   f"(its keys: {', '.join(TOPOLOGY_KEYS[kind][1:])})")
    sc["topology"] = {k: v for k, v in sc["topology"].items() if k in TOPOLOGY_KEYS[kind]}
    builder = topology_of(sc["topology"])
    if builder.n_links > MAX_FABRIC_LINKS:
        raise ScenarioError("topology", f"this {kind} fabric has {builder.n_links} links; one machine builds at most "
                                        f"{MAX_FABRIC_LINKS} (about a k=10 Fat-Tree): fewer switches or hosts")
    q = sc["queues"]
    if (q["buffer_bytes"] is None) == (q["buffer_packets"] is None):
        if q["buffer_bytes"] is None:
            q["buffer_packets"] = 100
        else:
            raise ScenarioError("queues.buffer_bytes", "give either buffer_bytes or buffer_packets, not both")
    sc["ecn"] = resolve_ecn(ecn_data, kind, switch_layers(kind), buffer_bytes(q))
    sc["priorities"], sc["pfc"] = _resolve_pfc(prio_data, pfc_data, rounds_data, buffer_bytes(q))
    if sc["pfc"] is not None and sc["ecn"]["marker"] == "red":
        raise ScenarioError("ecn.marker", "red: kernel RED replaces a port's one FIFO, and this scenario has "
                                          "per-priority queues (priorities/pfc); use bpf or auto (the BPF marker "
                                          "sits in front of every queue)")
    sc["rounds"] = _resolve_rounds(rounds_data, sc)
    n_hosts = builder.n_hosts
    colls = [("collective", sc["collective"])] + [(f"rounds[{i}].collective", r["collective"])
                                                  for i, r in enumerate(sc["rounds"] or [])]
    for key, c in colls:
        _check_collective(key, c, n_hosts)
    if any(c["kind"] for _, c in colls):
        if isinstance(data, dict) and "traffic" in data:
            raise ScenarioError("traffic", "a collective scenario moves its own data (the collective section); "
                                           "it has no traffic section")
        if sc["roce"]["pcap_hosts"]:
            raise ScenarioError("roce.pcap_hosts", "captures the RoCE flows of a traffic section; a collective has "
                                                   "none (capture a host with tcpdump in its namespace instead)")
        # unused by a collective run; only the warm-up's RTT probe reads its receiver and first sender
        sc["traffic"]["senders"] = min(sc["traffic"]["senders"], n_hosts - 1)
    t = sc["traffic"]
    hosts = {f"h{i}" for i in range(1, n_hosts + 1)}
    if t["receiver"] not in hosts:
        raise ScenarioError("traffic.receiver", f"no host {t['receiver']!r} in a fabric of {n_hosts} hosts (h1..h{n_hosts})")
    pattern = PATTERNS[t["pattern"]]
    given_traffic = data.get("traffic") if isinstance(data, dict) and isinstance(data.get("traffic"), dict) else {}
    for key in given_traffic:
        if key in PATTERN_KEYS and key not in pattern.PARAMS:
            raise ScenarioError(f"traffic.{key}", f"applies to the {PATTERN_KEYS[key]} pattern, not {t['pattern']}")
    problem = pattern.check(n_hosts, builder.n_groups, t)
    if problem:
        raise ScenarioError(f"traffic.{problem[0]}", problem[1])
    if t["pattern"] != "incast":
        pairs = pattern.pair_count(n_hosts)
        if pairs * t["flows_per_pair"] > MAX_FLOWS:
            raise ScenarioError("traffic.flows_per_pair", f"{t['pattern']} on {n_hosts} hosts with "
                                f"{t['flows_per_pair']} flow(s) per pair is {pairs * t['flows_per_pair']} flows; "
                                f"at most {MAX_FLOWS} (fewer hosts, or fewer flows per pair)")
    if t["dscp"] is None:
        t["dscp"] = 26 if t["transport"] == "roce" else 0
    if t["transport"] != "roce":
        for k, default in (("responses", 1), ("arrival", "synchronized"), ("load", None)):
            if t[k] != default:
                raise ScenarioError(f"traffic.{k}", "applies to transport roce (the tcp and udp agents send one "
                                                    "flow per sender)")
    elif t["arrival"] == "poisson" and t["load"] is None:
        raise ScenarioError("traffic.load", "poisson arrivals need a load (a fraction of the receiver's link)")
    if t["transport"] == "roce" and t["pattern"] != "incast" and t["responses"] != 1:
        raise ScenarioError("traffic.responses", "applies to the incast pattern")
    for i, h in enumerate(sc["roce"]["pcap_hosts"] or []):
        if h not in hosts:
            raise ScenarioError(f"roce.pcap_hosts[{i}]", f"no host {h!r} in a fabric of {n_hosts} hosts")
    if t["pattern"] == "incast" and t["duration_s"] is not None:
        raise ScenarioError("traffic.duration_s", "applies to the pair patterns (permutation, all-to-all, ...), "
                                                  "not incast (an incast sends response_bytes per sender)")
    if t["sender_hosts"] is not None:
        for i, h in enumerate(t["sender_hosts"]):
            if h not in hosts:
                raise ScenarioError(f"traffic.sender_hosts[{i}]", f"no host {h!r} in a fabric of {n_hosts} hosts")
            if h == t["receiver"]:
                raise ScenarioError(f"traffic.sender_hosts[{i}]", "a sender cannot be the receiver")
        if len(set(t["sender_hosts"])) != len(t["sender_hosts"]):
            raise ScenarioError("traffic.sender_hosts", "lists a host twice")
        t["senders"] = len(t["sender_hosts"])
    elif t["senders"] > n_hosts - 1:
        raise ScenarioError("traffic.senders", f"{t['senders']} senders need more than the fabric's {n_hosts - 1} other hosts")
    return sc


def _check_collective(key: str, c: dict, n_hosts: int) -> None:
    """A collective section against the fabric's hosts (ScenarioError naming the key)."""
    if c["kind"] is None:
        return
    if c["hosts"] is not None:
        for i, h in enumerate(c["hosts"]):
            if not re.fullmatch(r"h[0-9]+", h) or not 1 <= int(h[1:]) <= n_hosts:
                raise ScenarioError(f"{key}.hosts[{i}]", f"no host {h!r} in a fabric of {n_hosts} hosts")
        if len(c["hosts"]) != c["ranks"]:
            c["ranks"] = len(c["hosts"])
    elif c["ranks"] > n_hosts:
        raise ScenarioError(f"{key}.ranks", f"{c['ranks']} ranks, one per host, on a fabric of {n_hosts} hosts "
                                            "(list hosts to put several ranks on one)")
    for i, s_bytes in enumerate(c["sizes_bytes"] or [c["size_bytes"]]):
        skey = f"{key}.sizes_bytes[{i}]" if c["sizes_bytes"] else f"{key}.size_bytes"
        if s_bytes % 4:
            raise ScenarioError(skey, f"{s_bytes} is not a whole number of float32 elements (a multiple of 4 bytes)")
        if s_bytes // 4 < c["ranks"]:
            raise ScenarioError(skey, f"{s_bytes} bytes is fewer float32 elements than {c['ranks']} ranks' chunks")


def buffer_bytes(queues: dict) -> int:
    """A resolved ``queues`` section's buffer in bytes (packets x FRAME_BYTES for a packet limit)."""
    return queues["buffer_bytes"] if queues["buffer_bytes"] is not None else queues["buffer_packets"] * FRAME_BYTES


def _resolve_pfc(prio_data, pfc_data, rounds_data, buf_bytes: int) -> tuple[dict | None, dict | None]:
    """The ``priorities`` and ``pfc`` sections, resolved (common.pfc.parse_pfc checks them), or
    ``(None, None)`` when the scenario has neither and no round turns PFC on: then every port keeps
    one FIFO, as before. A round's ``pfc: {enabled: true}`` alone brings the default classes
    (DSCP 26 -> priority 3 lossless, the rest priority 0) with PFC off in the other rounds."""
    rounds_pfc = isinstance(rounds_data, list) and any(isinstance(r, dict) and "pfc" in r for r in rounds_data)
    if prio_data is None and pfc_data is None and not rounds_pfc:
        return None, None
    if pfc_data is not None and not isinstance(pfc_data, dict):
        raise ScenarioError("pfc", f"expected a mapping, got {type(pfc_data).__name__}")
    if prio_data is not None and not isinstance(prio_data, dict):
        raise ScenarioError("priorities", f"expected a mapping, got {type(prio_data).__name__}")
    cfg = parse_pfc(prio_data, pfc_data if pfc_data is not None else {"enabled": False}, buf_bytes, FRAME_BYTES)
    return config_sections(cfg)


ROUND_KEYS = ("name", "ecn", "hosts", "pfc", "roce", "seed", "collective")
#: What a round may change of the collective section.
ROUND_COLLECTIVE_KEYS = ("placement", "hosts", "ranks", "kind", "transport")
#: Most rounds one run may have.
MAX_ROUNDS = 32


def _resolve_rounds(data, sc: dict) -> list[dict] | None:
    """Check ``rounds``: the same traffic run several times on one fabric, with ECN profiles and host
    settings changed between rounds by the controller (no rebuild). Each round's ``ecn`` keys
    (profile, layers, ports) and ``hosts`` keys replace the scenario's for that round.

    A round's ``pfc: {enabled}`` turns PFC on or off for it (the scenario's other PFC settings hold).

    A round's ``roce: {mode}`` sets the RoCE mode for it (A/B runs of dcqcn against none), and its
    ``seed`` the seed of its random choices (Poisson arrivals): rounds that differ only in their
    seed repeat an experiment (case R4).

    Returns None (no rounds) or ``[{"name", "ecn": {profile, layers, ports}, "hosts": {...},
    "pfc": {"enabled"}, "roce": {"mode"}, "seed"}]``.
    Raises ScenarioError naming e.g. ``rounds[1].ecn.profile.step.k_bytes``.
    """
    if data is None:
        return None
    if not isinstance(data, list) or not data:
        raise ScenarioError("rounds", "expected a list of at least one round")
    if len(data) > MAX_ROUNDS:
        raise ScenarioError("rounds", f"at most {MAX_ROUNDS} rounds, got {len(data)}")
    out, names = [], set()
    for i, r in enumerate(data):
        key = f"rounds[{i}]"
        if not isinstance(r, dict):
            raise ScenarioError(key, "expected a mapping with name, ecn, hosts, pfc")
        for k in r:
            if k not in ROUND_KEYS:
                raise ScenarioError(f"{key}.{k}", f"unknown key (known keys here: {', '.join(sorted(ROUND_KEYS))})")
        if "name" not in r:
            raise ScenarioError(f"{key}.name", "is required")
        name = F((str,), pattern=NAME).check(f"{key}.name", r["name"])
        if name in names:
            raise ScenarioError(f"{key}.name", f"two rounds are called {name!r}")
        names.add(name)
        base = {k: v for k, v in sc["ecn"].items() if k != "marker"}
        given = r.get("ecn") or {}
        if not isinstance(given, dict):
            raise ScenarioError(f"{key}.ecn", "expected a mapping")
        merged = resolve_ecn({**base, **given}, sc["topology"]["kind"], switch_layers(sc["topology"]["kind"]),
                             buffer_bytes(sc["queues"]),
                             key=f"{key}.ecn", allow_marker=False)
        hosts = _resolve(SCHEMA["hosts"], {**sc["hosts"], **(r.get("hosts") or {})}, f"{key}.hosts")
        pfc_on = sc["pfc"]["enabled"] if sc["pfc"] is not None else False
        if "pfc" in r:
            rp = r["pfc"]
            if not isinstance(rp, dict) or set(rp) - {"enabled"}:
                raise ScenarioError(f"{key}.pfc", "a round can only turn PFC on or off: {enabled: true|false}")
            pfc_on = F((bool,)).check(f"{key}.pfc.enabled", rp.get("enabled", pfc_on))
        mode = sc["roce"]["mode"]
        if "roce" in r:
            rr = r["roce"]
            if not isinstance(rr, dict) or set(rr) - {"mode"}:
                raise ScenarioError(f"{key}.roce", "a round can only set the RoCE mode: {mode: dcqcn|none}")
            mode = SCHEMA["roce"]["mode"].check(f"{key}.roce.mode", rr.get("mode", mode))
        seed = SCHEMA["seed"].check(f"{key}.seed", r["seed"]) if "seed" in r else sc["seed"]
        coll = dict(sc["collective"])
        if "collective" in r:
            rc = r["collective"]
            if not isinstance(rc, dict) or set(rc) - set(ROUND_COLLECTIVE_KEYS):
                raise ScenarioError(f"{key}.collective", "a round can set the collective's "
                                                         f"{', '.join(ROUND_COLLECTIVE_KEYS)}")
            if sc["collective"]["kind"] is None and "kind" not in rc:
                raise ScenarioError(f"{key}.collective", "the scenario has no collective (collective.kind)")
            coll = {**coll, **_resolve(SCHEMA["collective"], {**coll, **rc}, f"{key}.collective")}
            if "hosts" not in rc and "placement" in rc:
                coll["hosts"] = None
        out.append({"name": name, "ecn": merged, "hosts": hosts, "pfc": {"enabled": pfc_on}, "roce": {"mode": mode},
                    "seed": seed, "collective": coll})
    return out


#: A scenario file larger than this is refused before it is read (the bundled ones are under 4 KB).
MAX_FILE_BYTES = 1 << 20
#: Values (every mapping, list and scalar, counting what YAML aliases repeat) a scenario may hold.
MAX_VALUES = 100_000
#: How deeply mappings and lists may nest.
MAX_DEPTH = 32


def dcqcn_params(sc: dict) -> DcqcnParams:
    """The scenario's DCQCN parameters: the scaled NIC defaults for the host link rate, with the
    ``roce.dcqcn`` keys given replacing them (``*_mbps`` keys in bit/s). Raises ScenarioError
    naming ``roce.dcqcn.<key>`` when the result is inconsistent."""
    d = {k: v for k, v in sc["roce"]["dcqcn"].items() if v is not None}
    ts = d.pop("time_scale", None)
    over = {(k[:-5] + "_bps" if k.endswith("_mbps") else k): (v * 1e6 if k.endswith("_mbps") else v)
            for k, v in d.items()}
    try:
        return DcqcnParams.scaled(sc["topology"]["host_rate_mbps"] * 1e6, time_scale=ts, **over)
    except ValueError as e:
        name = str(e).split(" ")[0]
        key = next((k for k in sc["roce"]["dcqcn"] if k.replace("_mbps", "_bps") == name), name)
        raise ScenarioError(f"roce.dcqcn.{key}", str(e)) from None


def load_scenario(path: str | Path) -> dict:
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
