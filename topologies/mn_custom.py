"""fabriclab's fabrics on Mininet's own command line.

    sudo .venv/bin/python -m controller.main --topo fattree,4 --ready-file /tmp/ready &
    sudo mn --custom topologies/mn_custom.py --topo fattree,4 \\
        --switch fabriclab --controller fabriclab

``--topo spineleaf,SPINES,LEAVES,HOSTS_PER_LEAF[,HOST_RATE_MBPS,UPLINK_RATE_MBPS]``,
``--topo fattree,K[,RATE_MBPS]`` and
``--topo dragonfly,GROUPS,ROUTERS_PER_GROUP,HOSTS_PER_ROUTER,GLOBAL_LINKS_PER_ROUTER[,RATE_MBPS]``
(every registered topology's ``MN_ARGS``) take the same parameters as the builders
(rates only matter to fabriclab's own queues, which `mn` does not install).
The controller builds its fabric map from the same builder (:mod:`topologies.spec`), so both agree.

``--switch fabriclab`` is :class:`FabriclabSwitch`: Open vSwitch on OpenFlow 1.3 on the datapath
fabriclab's probe chooses (:func:`common.datapath.chosen_datapath`: the kernel datapath where the
openvswitch module loads, else the userspace one, with offloads off as fabriclab's own fabrics have
them). ``--controller fabriclab`` is Mininet's remote controller at 127.0.0.1:6653
(:class:`FabriclabController`). Tested end to end (``mn ... --test pingall``, 0% dropped) in both lanes
(tests/integration/test_mn_cli.py). Careful: when `mn` itself meets an error or Ctrl-C it runs
Mininet's clean-up, which kills processes by name (killall ... ping, controllers, ...), so do not
run it on a machine whose other programs matter.
"""
from __future__ import annotations

import os
import socket
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

from mininet.log import warn  # noqa: E402
from mininet.node import OVSSwitch, RemoteController  # noqa: E402

from common.datapath import chosen_datapath  # noqa: E402
from topologies import TOPOLOGIES  # noqa: E402
from topologies.mininet_topo import FabricTopo  # noqa: E402
from topologies.spec import build  # noqa: E402

#: What ``ethtool -K`` turns off on every port of a userspace-datapath fabric (case T1: with
#: checksum and segmentation offloads on, ping works and TCP stalls), as fabriclab's own fabrics do.
USER_DATAPATH_OFFLOADS_OFF = ("rx", "off", "tx", "off", "tso", "off", "gso", "off", "gro", "off")


class FabriclabSwitch(OVSSwitch):
    """Open vSwitch speaking OpenFlow 1.3 (fail mode ``secure``) on the datapath fabriclab's probe
    chooses (``kernel`` or ``user``: :func:`common.datapath.chosen_datapath`), as fabriclab's own
    fabrics build their switches (experiments.fabric). ``mn --switch fabriclab[,datapath=user]``.

    Args:
        name: the switch's (bridge's) name.
        datapath: ``kernel`` or ``user``; None (the default): the probe's choice.
        protocols, failMode, **params: as Mininet's ``OVSSwitch`` (defaults ``OpenFlow13``,
            ``secure``).

    On the userspace datapath (Open vSwitch's ``datapath_type=netdev``, which Mininet sets for
    ``datapath='user'``) :meth:`start` also turns checksum and segmentation offloads off on both
    ends of every link of the switch (``ethtool -K``; case T1). Mininet's ``stop`` deletes the
    bridge and, on that datapath, its tap device.
    """

    def __init__(self, name, datapath=None, protocols="OpenFlow13", failMode="secure", **params):
        super().__init__(name, datapath=datapath or chosen_datapath(), protocols=protocols,
                         failMode=failMode, **params)

    def start(self, controllers):
        """Start the bridge as Mininet's OVSSwitch does; on the userspace datapath, then turn
        offloads off on both ends of each of its links."""
        super().start(controllers)
        if self.datapath == "user":
            self._offloads_off()

    def _offloads_off(self):
        for intf in self.intfList():
            link = getattr(intf, "link", None)
            if link is None:   # the loopback
                continue
            for end in (link.intf1, link.intf2):
                # kept as ethtool through the node's shell: topologies may not use pyroute2 (import-linter)
                end.node.cmd("ethtool", "-K", end.name, *USER_DATAPATH_OFFLOADS_OFF)


class FabriclabController(RemoteController):
    """Mininet's remote controller at 127.0.0.1:6653 (``mn --controller fabriclab[,ip=IP,port=PORT]``),
    checked with a plain TCP connection.

    Why not ``--controller remote``: Mininet checks a remote controller by running ``telnet`` to
    it and reading what came back as strict UTF-8; the OpenFlow HELLO fabriclab's controller sends
    first need not be valid UTF-8, and Mininet then stopped with UnicodeDecodeError (about once in
    40 bring-ups here). Like Mininet's check, this one only warns when nothing listens.
    """

    def __init__(self, name, ip="127.0.0.1", port=6653, **kwargs):
        super().__init__(name, ip=ip, port=port, **kwargs)

    def checkListening(self):
        """Warn (as Mininet does) if nothing accepts a TCP connection at the controller's address."""
        try:
            with socket.create_connection((self.ip, int(self.port)), timeout=2):
                pass
        except OSError as e:
            warn(f"Unable to contact the remote controller at {self.ip}:{self.port}: {e}\n")


def _topo(name):
    def make(*args):
        return FabricTopo(build(",".join([name] + [str(a) for a in args])))
    return make


#: What `mn --custom` looks up: every registered topology.
topos = {name: _topo(name) for name in TOPOLOGIES}

#: ``mn --switch fabriclab``.
switches = {"fabriclab": FabriclabSwitch}

#: ``mn --controller fabriclab``.
controllers = {"fabriclab": FabriclabController}

__all__ = ["build", "topos", "switches", "controllers", "FabriclabSwitch", "FabriclabController",
           "USER_DATAPATH_OFFLOADS_OFF"]
