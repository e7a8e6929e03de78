"""fabriclab's fabrics on Mininet's own command line.

    sudo .venv/bin/python -m controller.main --topo fattree,4 --ready-file /tmp/ready &
    sudo mn --custom topologies/mn_custom.py --topo fattree,4 \\
        --switch ovs,protocols=OpenFlow13 --controller remote,ip=127.0.0.1,port=6653

``--topo spineleaf,SPINES,LEAVES,HOSTS_PER_LEAF[,HOST_RATE_MBPS,UPLINK_RATE_MBPS]``,
``--topo fattree,K[,RATE_MBPS]`` and
``--topo dragonfly,GROUPS,ROUTERS_PER_GROUP,HOSTS_PER_ROUTER,GLOBAL_LINKS_PER_ROUTER[,RATE_MBPS]``
(every registered topology's ``MN_ARGS``) take the same parameters as the builders
(rates only matter to fabriclab's own queues, which `mn` does not install).
The controller builds its fabric map from the same builder, so both agree.
Tested end to end (mn ... --test pingall, 0% dropped) in the VM lane only
(tests/integration/test_mn_cli.py): `mn`'s own clean-up after an error kills
processes by name (killall ... ping, controllers, ...), so do not run it on a
machine whose other programs matter.
"""
from __future__ import annotations

import os
import sys


def _this_file() -> str:
    try:
        return __file__
    except NameError:   # `mn --custom FILE` execs the file without __file__
        argv = sys.argv
        for i, a in enumerate(argv):
            if a.startswith("--custom="):
                return a.split("=", 1)[1].split(",")[0]
            if a == "--custom" and i + 1 < len(argv):
                return argv[i + 1].split(",")[0]
        return os.path.join(os.getcwd(), "topologies", "mn_custom.py")


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(_this_file()))))

from topologies import TOPOLOGIES  # noqa: E402
from topologies.mininet_topo import FabricTopo  # noqa: E402


def build(spec: str):
    """The fabric named by a Mininet-style ``kind,arg,...`` string (a registered topology's
    ``from_mn_args``); ValueError if the kind is unknown."""
    name, *args = spec.split(",")
    if name not in TOPOLOGIES:
        raise ValueError(f"unknown topology {name!r} ({' or '.join(TOPOLOGIES)})")
    cls = TOPOLOGIES[name]
    usage = f"--topo {name},{','.join(a.upper() for a in cls.MN_ARGS)} (the last ones may be left out)"
    try:
        nums = [float(a) if "." in a else int(a) for a in args]
        if len(nums) > len(cls.MN_ARGS):
            raise ValueError(f"{len(nums)} numbers")
        return cls.from_mn_args(nums).build()
    except (TypeError, ValueError) as e:
        raise ValueError(f"{spec!r}: {e}; usage: {usage}") from None


def _topo(name):
    def make(*args):
        return FabricTopo(build(",".join([name] + [str(a) for a in args])))
    return make


#: What `mn --custom` looks up: every registered topology.
topos = {name: _topo(name) for name in TOPOLOGIES}
