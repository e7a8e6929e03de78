"""The scenario's JSON Schema and the key reference generated from it.

The schema is generated from the typed models that validate a scenario
(:class:`experiments.model.ScenarioFile`, pydantic's ``model_json_schema``): every section, every
registered topology's own keys (one branch per kind), the rate controllers' and patterns' names.
The ECN, priority and PFC sections, which their own parsers read in their own syntax
(``common.ecn``, ``common.pfc``), bring their schema fragments here. The result is normalised
into plain draft 2020-12 (``$ref`` inlined, ``anyOf [X, null]`` as a type list, bounds as
``minimum``/``maximum``). ``fabriclab schema`` prints it; editors that read JSON
Schema (e.g. yaml-language-server with ``# yaml-language-server: $schema=...``) complete and check
scenario YAML with it. docs/scenario-keys.md is :func:`markdown` of it, and a unit test keeps the
two equal.

The schema checks the shape of a scenario (keys, types, ranges, choices); what needs the fabric
(a host that exists, a threshold under the buffer, a port name of this fabric) is checked by
``fabriclab check``.
"""
from __future__ import annotations

from typing import Any

from common.ecn import MARKERS, PORT_NAME
from common.pfc import WATCHDOG_ACTIONS
from experiments.model import ScenarioFile
from experiments.scenario import switch_layers
from topologies import TOPOLOGIES

#: What each top-level section is, for the reference.
SECTIONS = {
    "name": "the scenario's name (results folders are named after it)",
    "description": "free text",
    "seed": "the seed of every random choice (patterns, arrivals)",
    "variant": "every round's label in the results' tables, the variant column (default: each round's name; "
               "a study sets it to the cell's variant; a round may give its own)",
    "topology": "the fabric: its kind and that kind's sizes and link rates",
    "routing": "how switches route flows: a registered routing strategy",
    "queues": "every switch egress port's FIFO and shaper",
    "hosts": "the hosts' kernel TCP settings",
    "traffic": "the flows (pattern, sizes, transport)",
    "roce": "RoCEv2 queue pairs and their rate controller",
    "collective": "a collective over ranks on hosts, instead of the traffic section's flows",
    "training": "training iterations on GPU ranks (compute by time, real gradients in DDP buckets; tensor and "
                "pipeline parallelism beside the data parallelism), instead of the traffic section's flows",
    "measurement": "the queue sampler and the throughput window",
    "ecn": "ECN marking at switch egress ports (profile per port, layer or for all)",
    "priorities": "DSCP to priority classes and their scheduling",
    "pfc": "priority flow control for the lossless classes",
    "faults": "faults injected into the fabric in every round that gives none of its own: a link's CRC errors, "
              "rate or state, a switch's silent drops, a slow host",
    "rounds": "the same traffic several times on one fabric, changing ECN, hosts, PFC, RoCE mode, seed, the "
              "collective, the training or the faults",
}

_KEEP = ("type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "pattern", "default", "items",
         "properties", "additionalProperties", "required", "minItems", "maxItems", "oneOf",
         "propertyNames", "minProperties", "maxProperties", "minLength", "maxLength", "allOf", "$ref")


def _normalise(node: Any, defs: dict, title: bool = False) -> Any:
    """pydantic's schema node as plain JSON Schema: refs inlined (but the shared ECN profile),
    ``anyOf [X, null]`` -> X with ``null`` allowed, ``ge``/``le`` -> ``minimum``/``maximum``."""
    if isinstance(node, list):
        return [_normalise(x, defs) for x in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "x-fabriclab-section" in node:
        return _normalise(defs[node["x-fabriclab-section"]], defs)
    ref = node.pop("$ref", None)
    if ref is not None and not ref.endswith("/ecnProfile"):
        target = _normalise(defs[ref.rsplit("/", 1)[1]], defs, title)
        return {**target, **{k: _normalise(v, defs) for k, v in node.items() if k == "default"}}
    if ref is not None:
        node["$ref"] = ref
    if "ge" in node:
        node["minimum"] = node.pop("ge")
    if "le" in node:
        node["maximum"] = node.pop("le")
    any_of = node.pop("anyOf", None)
    if any_of is not None:
        members = [_normalise(m, defs) for m in any_of]
        nullable = any(m.get("type") == "null" for m in members)
        members = [m for m in members if m.get("type") != "null"]
        if {m.get("type") for m in members} == {"integer", "number"} and all(len(m) == 1 for m in members):
            members = [{"type": "number"}]
        base = members[0] if len(members) == 1 else {"anyOf": members}
        if nullable:
            t = base.get("type")
            if t is not None:
                base = {**base, "type": (t if isinstance(t, list) else [t]) + ["null"]}
                if "enum" in base:
                    base["enum"] = list(base["enum"]) + [None]
                if "const" in base:
                    base = {**{k: v for k, v in base.items() if k != "const"}, "enum": [base["const"], None]}
            elif "properties" not in base:
                base = {"anyOf": [base, {"type": "null"}]}
        for k in ("minimum", "maximum"):
            if k in node:
                base[k] = node.pop(k)
        node = {**base, **{k: v for k, v in node.items() if k == "default"}}
        return node
    out = {}
    for k, v in node.items():
        if k == "title" and title:
            out[k] = v
        elif k in ("properties",):
            out[k] = {name: _normalise(p, defs) for name, p in v.items()}
        elif k == "oneOf":
            out[k] = [_normalise(m, defs, title=True) for m in v]
        elif k == "patternProperties" and len(v) == 1:      # a mapping whose every key matches
            (pattern, value), = v.items()
            out["propertyNames"] = {"pattern": pattern}
            out["additionalProperties"] = _normalise(value, defs)
        elif k in _KEEP:
            out[k] = _normalise(v, defs)
    if isinstance(out.get("default"), dict):
        del out["default"]                  # a section's defaults are its keys' defaults
    return out


def _size(name: str) -> dict:
    return {f"{name}_bytes": {"type": "integer", "minimum": 1}, f"{name}_packets": {"type": "integer", "minimum": 1}}


def _one_of_sizes(*names: str) -> list:
    return [{"oneOf": [{"required": [f"{n}_bytes"]}, {"required": [f"{n}_packets"]}]} for n in names]


def _profile() -> dict:
    step = {"type": "object", "additionalProperties": False, "properties": _size("k"), "allOf": _one_of_sizes("k")}
    red = {"type": "object", "additionalProperties": False, "required": ["pmax"],
           "properties": {**_size("kmin"), **_size("kmax"),
                          "pmax": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                          "weight": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1}},
           "allOf": _one_of_sizes("kmin", "kmax")}
    return {"description": "an ECN marking profile: off, a step at K, or RED between Kmin and Kmax (thresholds in "
                           "bytes or packets, below the buffer)",
            "oneOf": [{"enum": ["off", False]},
                      {"type": "object", "additionalProperties": False, "required": ["step"],
                       "properties": {"step": step}},
                      {"type": "object", "additionalProperties": False, "required": ["red"],
                       "properties": {"red": red}}]}


def _ecn(marker: bool) -> dict:
    layers = sorted({layer for kind in TOPOLOGIES for layer in switch_layers(kind)})
    props = {"profile": {"$ref": "#/$defs/ecnProfile", "default": "off"},
             "layers": {"type": ["object", "null"], "propertyNames": {"enum": layers},
                        "additionalProperties": {"$ref": "#/$defs/ecnProfile"}},
             "ports": {"type": ["object", "null"], "propertyNames": {"pattern": f"^(?:{PORT_NAME})$"},
                       "additionalProperties": {"$ref": "#/$defs/ecnProfile"}}}
    if marker:
        props = {"marker": {"enum": list(MARKERS), "default": "auto"}, **props}
    return {"type": ["object", "null"], "additionalProperties": False, "properties": props}


def _priorities() -> dict:
    prio = {"type": "integer", "minimum": 0, "maximum": 7}
    return {"type": ["object", "null"], "additionalProperties": False, "properties": {
        "dscp": {"type": "object", "minProperties": 1, "propertyNames": {"pattern": "^[0-9]{1,2}$"},
                 "additionalProperties": prio},
        "default_priority": dict(prio, default=0),
        "scheduling": {"oneOf": [{"const": "strict"},
                                 {"type": "object", "additionalProperties": False, "required": ["weighted"],
                                  "properties": {"weighted": {
                                      "type": "object", "propertyNames": {"pattern": "^[0-7]$"},
                                      "additionalProperties": {"type": "number", "exclusiveMinimum": 0}}}}],
                       "default": "strict"}}}


def _pfc() -> dict:
    return {"type": ["object", "null"], "additionalProperties": False, "properties": {
        "enabled": {"type": "boolean", "default": True},
        "lossless": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0, "maximum": 7},
                     "default": [3]},
        **{f"{n}_{u}": {"type": "integer", "minimum": 0} for n in ("xoff", "xon") for u in ("bytes", "packets")},
        "watchdog": {"type": ["object", "null"], "additionalProperties": False, "required": ["timeout_s"],
                     "properties": {"timeout_s": {"type": "number", "exclusiveMinimum": 0},
                                    "action": {"enum": list(WATCHDOG_ACTIONS), "default": "keep"}}}}}


def _topology(node: dict) -> dict:
    branches = node["oneOf"]
    return {"type": ["object", "null"], "oneOf": branches + [{"type": "null"}]}


def scenario_schema() -> dict:
    """The JSON Schema (draft 2020-12) of a scenario file, as a dict."""
    raw = ScenarioFile.model_json_schema(ref_template="#/$defs/{model}")
    defs = {**raw.pop("$defs", {}), "ecn": _ecn(marker=True), "roundEcn": _ecn(marker=False),
            "priorities": _priorities(), "pfc": _pfc()}
    top = _normalise(raw, defs)
    top["properties"]["topology"] = _topology(top["properties"]["topology"])
    for key, text in SECTIONS.items():
        top["properties"][key]["description"] = text
    for sec in ("routing", "queues", "hosts", "traffic", "roce", "collective", "measurement"):
        top["properties"][sec]["type"] = ["object", "null"]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://fabriclab.invalid/scenario.schema.json",
            "title": "fabriclab scenario", "$defs": {"ecnProfile": _profile()}, **top}


def _bare(pattern: str) -> str:
    """A schema pattern without its anchors (``^(?:X)$`` or ``^X$`` -> ``X``)."""
    if pattern.startswith("^(?:") and pattern.endswith(")$"):
        return pattern[4:-2]
    return pattern[1 if pattern.startswith("^") else 0:-1 if pattern.endswith("$") else None]


def _describe(p: dict) -> tuple[str, str]:
    """(type and range, default) of one property, for the table."""
    if "$ref" in p:
        return "ECN profile", str(p.get("default", ""))
    if "oneOf" in p and "type" not in p:
        return "see below", str(p.get("default", ""))
    t = p.get("type", "")
    t = " or ".join(x for x in (t if isinstance(t, list) else [t]) if x != "null")
    if "enum" in p:
        t = " / ".join(str(x) for x in p["enum"] if x is not None)
    elif "const" in p:
        t = str(p["const"])
    bounds = []
    if "minimum" in p or "exclusiveMinimum" in p:
        bounds.append(f">= {p['minimum']}" if "minimum" in p else f"> {p['exclusiveMinimum']}")
    if "maximum" in p:
        bounds.append(f"<= {p['maximum']}")
    if "pattern" in p:
        bounds.append(f"matching `{p['pattern'][4:-2]}`")
    if p.get("type") in ("array", ["array", "null"]) and "items" in p:
        t = f"list of {_describe(p['items'])[0]}"
    if isinstance(p.get("additionalProperties"), dict) and "pattern" in p.get("propertyNames", {}):
        t = (f"mapping of names matching `{_bare(p['propertyNames']['pattern'])}` to "
             f"{_describe(p['additionalProperties'])[0]}")
    elif p.get("type") in ("object", ["object", "null"]) and "properties" in p:
        t = "mapping: " + ", ".join(f"`{k}`" for k in p["properties"])
    if "minLength" in p or "maxLength" in p:
        bounds.append(f"{p.get('minLength', 0)} to {p['maxLength']} characters" if "maxLength" in p
                      else f"at least {p['minLength']} characters")
    if "maxProperties" in p:
        bounds.append(f"at most {p['maxProperties']} entries")
    text = t + (f" ({', '.join(bounds)})" if bounds else "")
    default = p.get("default")
    if isinstance(default, bool):
        default = str(default).lower()      # as YAML writes it
    return text, "" if default is None else ("`\"\"`" if default == "" else f"`{default}`")


def markdown(schema: dict | None = None) -> str:
    """The scenario-key reference (docs/scenario-keys.md) from the schema."""
    s = scenario_schema() if schema is None else schema
    lines = ["# Scenario keys", "",
             "Back to [scenarios](scenarios.md). Generated from the scenario's JSON Schema "
             "(`fabriclab schema`, `fabriclab schema --markdown`); do not edit by hand.",
             "Units are in the key names: `_bytes`, `_packets`, `_s` (seconds), `_mbps` (Mbit/s), `_hz`.", "",
             "| key | type and range | default |", "|---|---|---|"]

    def rows(props: dict, prefix: str) -> None:
        for key, p in props.items():
            path = f"{prefix}{key}"
            if p.get("type") in ("object", ["object", "null"]) and "properties" in p:
                lines.append(f"| **`{path}`** | {p.get('description', 'section')} | |")
                rows(p["properties"], path + ".")
                continue
            text, default = _describe(p)
            lines.append(f"| `{path}` | {text} | {default} |")
    props = dict(s["properties"])
    topo = props.pop("topology")
    rnds = props.pop("rounds")
    faults = props.get("faults")
    rows({k: v for k, v in props.items()}, "")
    lines += ["", "## topology", "", topo["description"] + "; `kind` picks the keys that apply.", ""]
    for b in topo["oneOf"]:
        if b.get("type") == "null":
            continue
        lines += [f"### kind `{b['properties']['kind']['const']}`: {b['title']}", "",
                  "| key | type and range | default |", "|---|---|---|"]
        for key, p in b["properties"].items():
            if key != "kind":
                text, default = _describe(p)
                lines.append(f"| `topology.{key}` | {text} | {default} |")
        lines.append("")
    if faults is not None:
        lines += ["## faults", "", faults["description"] + f" (at most {faults['maxItems']}); `kind` picks the keys "
                  "that apply. A link is `a->b` (frames from a to b), `a<->b` (both directions) or, with parallel "
                  "links, `a:PORT->b`; times are seconds from the round's start.", ""]
        for b in faults["items"]["oneOf"]:
            lines += [f"### kind `{b['properties']['kind']['const']}`: {b['title']}", "",
                      "| key | type and range | default |", "|---|---|---|"]
            for key, p in b["properties"].items():
                if key != "kind":
                    text, default = _describe(p)
                    text = text.replace("|", "\\|")         # a pattern's alternatives, not a column
                    lines.append(f"| `faults[i].{key}` | {text} | "
                                 f"{default or ('required' if key in b.get('required', ()) else '')} |")
            lines.append("")
    lines += ["## rounds", "", rnds["description"] + f" (1 to {rnds['maxItems']} rounds); each round:", "",
              "| key | type and range |", "|---|---|"]
    for key, p in rnds["items"]["properties"].items():
        if "properties" in p:
            for sub, q in p["properties"].items():
                lines.append(f"| `rounds[i].{key}.{sub}` | {_describe(q)[0]} |")
        else:
            lines.append(f"| `rounds[i].{key}` | {_describe(p)[0]} |")
    lines += ["", "## ECN profile", "", s["$defs"]["ecnProfile"]["description"] + ":", "",
              "- `off`", "- `{step: {k_bytes: K}}` or `{step: {k_packets: K}}`",
              "- `{red: {kmin_bytes|kmin_packets, kmax_bytes|kmax_packets, pmax, weight}}` "
              "(pmax in (0, 1]; weight: the averaging weight, a power of two for kernel RED, absent = instantaneous)",
              "", "## priorities.scheduling", "",
              "- `strict`: the higher priority number first",
              "- `{weighted: {PRIO: WEIGHT}}`: shares of the port's rate (finite weights > 0), one for every "
              "priority in use", ""]
    return "\n".join(lines)
