"""Start the fabriclab controller as its own process.

``python -m controller.main (--fabric-map MAP | --topo fattree,4) --ready-file FILE [--host 127.0.0.1]
[--port 6653] [--routing MODE] [--control-dir DIR]
[--rest-port 8080] [--token-file FILE]``: the REST API (controller.rest) listens on 127.0.0.1 at
``--rest-port`` (0: none); a request that changes anything must carry the token held in
``--token-file`` (without one the API only reads). ``--topo`` builds the fabric map in memory (no
file). ``--routing`` is a registered routing strategy (:data:`controller.routing.STRATEGIES`:
``ecmp``, the default, ``single``, ``valiant``).

The arguments become the app's os-ken configuration options (:mod:`controller.options`, group
``[fabriclab]``); ``python -m controller.manager controller/app.py --fabriclab-topo fattree,4``
runs the same app the way ``osken-manager`` runs Ryu apps.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from controller.faultports import remove_everywhere
from controller.routing import STRATEGIES


def exit_on_sigterm() -> None:
    """Make SIGTERM end the process at once with exit status 0, after removing the fault
    injections the controller made (:func:`controller.faultports.remove_everywhere`).

    Why not the default or os-ken's own shutdown: os-ken's shutdown path raises on SystemExit
    (HubThread has no kill()); the controller holds no state worth flushing beyond its log.

    A process forked from the controller inherits the handler: pyroute2 forks a helper to work in
    a host's network namespace and ends it with SIGTERM. There the handler takes the default
    action at once: removing the faults from a forked copy could wait forever on a lock another
    thread held at the fork, and the copy would keep the controller's listening sockets.
    """
    owner = os.getpid()

    def _stop(*_):
        if os.getpid() != owner:                  # a forked helper: die as SIGTERM would
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            os._exit(128 + signal.SIGTERM)
        logging.getLogger("fabriclab.controller").info("stopping on SIGTERM")
        remove_everywhere()
        logging.shutdown()
        os._exit(0)
    signal.signal(signal.SIGTERM, _stop)


def main(argv=None) -> int:
    """Parse arguments, configure the framework and run the app until killed (exit 0 on SIGTERM;
    argparse's exit 2 on a bad argument; a bad ``--topo`` or map file ends the app manager with
    its traceback)."""
    ap = argparse.ArgumentParser(description="fabriclab controller (os-ken / Ryu API)")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--fabric-map", help="fabric map JSON written by the runner")
    src.add_argument("--topo", help="build the map from a Mininet-style spec, e.g. fattree,4 (see topologies/mn_custom.py)")
    ap.add_argument("--ready-file", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=6653)
    ap.add_argument("--routing", choices=tuple(STRATEGIES), default="ecmp",
                    help="the routing strategy (controller.routing.STRATEGIES)")
    ap.add_argument("--control-dir", help="folder for the ECN marker's record (default: control/ beside the ready "
                                          "file); the ECN and PFC plans come in their start requests")
    ap.add_argument("--rest-port", type=int, default=8080,
                    help="the REST API's port on 127.0.0.1 (Ryu's REST apps use 8080; 0: no API)")
    ap.add_argument("--token-file", help="file holding the REST API's token (changes need it; without: reads only)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    exit_on_sigterm()
    # the framework loads after the arguments are parsed: os-ken patches the standard library as it
    # loads (eventlet), and --help or a bad argument needs none of it
    from controller import options
    from controller.ofp import PROJECT, app_manager, cfg
    options.register(cfg.CONF)
    cfg.CONF(args=[f"--ofp-listen-host={args.host}", f"--ofp-tcp-listen-port={args.port}"]
             + options.cli_args(topo=args.topo, fabric_map=args.fabric_map, ready_file=args.ready_file,
                                routing=args.routing, control_dir=args.control_dir, rest_port=args.rest_port,
                                token_file=args.token_file),
             project=PROJECT)
    app_manager.AppManager.run_apps(["controller.app"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
