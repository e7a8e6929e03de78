"""Start the fabriclab controller as its own process.

``python -m controller.main (--fabric-map MAP | --topo fattree,4) --ready-file FILE [--host 127.0.0.1]
[--port 6653] [--routing ecmp|single] [--ecn-plan PLAN.json] [--pfc-plan PLAN.json] [--control-dir DIR]
[--rest-port 8080]``: the REST API (controller.rest) listens on 127.0.0.1 at ``--rest-port``
(0: none).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile

from controller.faultports import remove_everywhere


def main(argv=None) -> int:
    """Parse arguments, configure the framework and run the app until killed (exit 0 on SIGTERM)."""
    ap = argparse.ArgumentParser(description="fabriclab controller (os-ken / Ryu API)")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--fabric-map", help="fabric map JSON written by the runner")
    src.add_argument("--topo", help="build the map from a Mininet-style spec, e.g. fattree,4 (see topologies/mn_custom.py)")
    ap.add_argument("--ready-file", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=6653)
    ap.add_argument("--routing", choices=("ecmp", "single"), default="ecmp")
    ap.add_argument("--ecn-plan", help="ECN plan JSON (controller.ecnports); applied once all switches are up")
    ap.add_argument("--pfc-plan", help="PFC plan JSON (controller.pfcports); started on request once all switches are up")
    ap.add_argument("--control-dir", help="folder for the ECN marker's record (with --ecn-plan)")
    ap.add_argument("--rest-port", type=int, default=8080,
                    help="the REST API's port on 127.0.0.1 (Ryu's REST apps use 8080; 0: no API)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    def _stop(*_):
        # os-ken's own shutdown path raises on SystemExit (HubThread has no kill());
        # the controller holds no state worth flushing beyond its log.
        logging.getLogger("fabriclab.controller").info("stopping on SIGTERM")
        remove_everywhere()
        logging.shutdown()
        os._exit(0)
    signal.signal(signal.SIGTERM, _stop)
    if args.topo:
        from topologies.mn_custom import build   # the controller of a plain `mn --custom` run only
        fd, args.fabric_map = tempfile.mkstemp(prefix="fabriclab-map-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(build(args.topo).to_map(), f)
    # the framework loads after the arguments are parsed: os-ken patches the standard library as it
    # loads (eventlet), and --help or a bad argument needs none of it
    from controller import app
    from controller.ofp import PROJECT, app_manager, cfg
    cfg.CONF(args=[f"--ofp-listen-host={args.host}", f"--ofp-tcp-listen-port={args.port}"], project=PROJECT)
    app.FabricController.config = {"fabric_map": args.fabric_map, "ready_file": args.ready_file,
                                   "routing": args.routing, "ecn_plan": args.ecn_plan,
                                   "pfc_plan": args.pfc_plan, "control_dir": args.control_dir,
                                   "rest_port": args.rest_port or None}
    app_manager.AppManager.run_apps(["controller.app"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
