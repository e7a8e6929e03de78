"""The one place that imports the controller framework.

os-ken (the maintained fork of Ryu, same API under ``os_ken``) is used where
it imports; classic ``ryu`` is the fallback where it works (it does not on
Python 3.11: case C6). Everything else imports these names from here.
"""
from oslo_config.cfg import ArgsAlreadyParsedError  # os-ken's and Ryu's configuration library

try:  # pragma: no branch
    from os_ken import cfg, log
    from os_ken.base import app_manager
    from os_ken.base.app_manager import OSKenApp as BaseApp
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import CONFIG_DISPATCHER, HANDSHAKE_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
    from os_ken.lib import hub
    from os_ken.lib.packet import arp, ethernet, ether_types, packet
    from os_ken.ofproto import nicira_ext, ofproto_v1_3
    FRAMEWORK = "os_ken"
    PROJECT = "os_ken"
except ImportError:  # classic Ryu on an older Python
    from ryu import cfg, log  # type: ignore
    from ryu.base import app_manager  # type: ignore
    from ryu.base.app_manager import RyuApp as BaseApp  # type: ignore
    from ryu.controller import ofp_event  # type: ignore
    from ryu.controller.handler import CONFIG_DISPATCHER, HANDSHAKE_DISPATCHER, MAIN_DISPATCHER, set_ev_cls  # type: ignore
    from ryu.lib import hub  # type: ignore
    from ryu.lib.packet import arp, ethernet, ether_types, packet  # type: ignore
    from ryu.ofproto import nicira_ext, ofproto_v1_3  # type: ignore
    FRAMEWORK = "ryu"
    PROJECT = "ryu"

__all__ = ["ArgsAlreadyParsedError", "cfg", "log", "app_manager", "BaseApp", "ofp_event", "CONFIG_DISPATCHER", "HANDSHAKE_DISPATCHER", "MAIN_DISPATCHER",
           "set_ev_cls", "hub", "arp", "ethernet", "ether_types", "packet", "nicira_ext", "ofproto_v1_3", "FRAMEWORK", "PROJECT"]
