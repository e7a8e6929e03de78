"""The controller app's settings as os-ken configuration options, as Ryu apps take theirs.

Group ``[fabriclab]`` of os-ken's ``cfg.CONF`` (oslo.config). On a command line each option is
``--fabriclab-<name>`` (``--fabriclab-topo fattree,4``); in a configuration file
(``--config-file FILE``) it is ``<name>`` with underscores in section ``[fabriclab]``::

    [fabriclab]
    topo = spineleaf,2,4,6,10,10
    ready_file = /tmp/ready

The app (:mod:`controller.app`) registers them when it is imported; ``python -m controller.main``
and ``python -m controller.manager`` register them before they parse their arguments. Exactly one
of ``topo`` and ``fabric-map`` names the fabric.
"""
from __future__ import annotations

import json

from common.errors import SetupError
from controller.ofp import ArgsAlreadyParsedError, cfg
from controller.routing import STRATEGIES
from topologies.spec import build

GROUP = "fabriclab"

OPTS = [
    cfg.StrOpt("topo", help="the fabric as a Mininet-style spec, e.g. fattree,4 or spineleaf,2,2,2 "
                            "(the same as mn --custom topologies/mn_custom.py --topo); or fabric-map"),
    cfg.StrOpt("fabric-map", help="the fabric map JSON file (Fabric.to_map; fabriclab's runner writes one); "
                                  "or topo"),
    cfg.StrOpt("ready-file", help="written (JSON: switches, OpenFlow errors) once every switch of the "
                                  "fabric is configured"),
    cfg.StrOpt("routing", default="ecmp", choices=list(STRATEGIES),
               help="; ".join(f"{name}: {cls.TITLE}" for name, cls in STRATEGIES.items())),
    cfg.StrOpt("control-dir", help="folder for the ECN marker's record (default: control/ beside the ready file); "
                                   "the ECN and PFC plans come in their start requests (POST /fabriclab/ecn/start, "
                                   "/fabriclab/pfc/start)"),
    cfg.IntOpt("rest-port", default=8080, min=0, max=65535,
               help="the REST API's port on 127.0.0.1 (Ryu's REST apps use 8080; 0: no API)"),
    cfg.StrOpt("token-file", help="file holding the REST API's token: requests that change anything must carry "
                                  "it (Authorization: Bearer TOKEN); without it the API takes no changes"),
]


def register(conf=None) -> None:
    """Register :data:`OPTS` in group ``[fabriclab]`` of ``conf`` (default os-ken's ``cfg.CONF``):
    as command-line options while its arguments are not parsed yet, otherwise (an app loaded by a
    manager after parsing) as configuration-file options. Registering twice is harmless."""
    conf = cfg.CONF if conf is None else conf
    try:
        conf.register_cli_opts(OPTS, group=GROUP)
    except ArgsAlreadyParsedError:
        conf.register_opts(OPTS, group=GROUP)


def cli_args(**values) -> list[str]:
    """``--fabriclab-<name>=<value>`` arguments for the options given (keyword names with
    underscores, e.g. ``fabric_map=PATH``; None values are left out). KeyError for an unknown name."""
    known = {o.dest for o in OPTS}
    out = []
    for key, value in values.items():
        if key not in known:
            raise KeyError(key)
        if value is not None:
            out.append(f"--{GROUP}-{key.replace('_', '-')}={value}")
    return out


def settings(conf=None) -> dict:
    """The app's settings from ``conf`` (default os-ken's ``cfg.CONF``, parsed):
    ``{"topo", "fabric_map", "ready_file", "routing", "control_dir", "token_file"}`` as
    given (str or None) and ``"rest_port"`` (int, or None for 0: no API).

    Raises:
        SetupError: neither or both of ``topo`` and ``fabric-map`` given (the message names the
            options in both spellings).
    """
    conf = cfg.CONF if conf is None else conf
    register(conf)
    g = conf[GROUP]
    out = {o.dest: g[o.dest] for o in OPTS}
    if (out["topo"] is None) == (out["fabric_map"] is None):
        raise SetupError(f"the fabriclab controller needs exactly one of --{GROUP}-topo and --{GROUP}-fabric-map "
                         f"(topo or fabric_map in section [{GROUP}] of a --config-file); got "
                         f"{'both' if out['topo'] else 'neither'}")
    out["rest_port"] = out["rest_port"] or None
    return out


def fabric_map(s: dict) -> dict:
    """The fabric map of settings ``s`` (:func:`settings`): built in memory from ``topo``
    (:func:`topologies.spec.build`; no file) or read from the ``fabric_map`` JSON file.

    Raises:
        ValueError, common.errors.ScenarioError: a bad ``topo`` spec (topologies.spec.build).
        OSError, json.JSONDecodeError: the map file cannot be read or parsed.
    """
    if s.get("topo"):
        return build(s["topo"]).to_map()
    with open(s["fabric_map"]) as f:
        return json.load(f)
