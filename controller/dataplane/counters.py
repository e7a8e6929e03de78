"""Per-interface counters read over netlink (``IFLA_STATS64``), by name, for a whole namespace at once."""
from __future__ import annotations

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from common.errors import SetupError
from controller.dataplane.netlink import ipr_in


#: The link statistics a port counter reads (struct rtnl_link_stats64's names).
LINK_STATS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_errors", "tx_errors", "rx_dropped",
              "tx_dropped")


def link_counters(names: set[str] | None = None, netns_pid: int | None = None) -> dict[str, dict]:
    """Every interface's (or those in ``names``) counters and state in one netlink dump:
    ``{ifname: {"index", "operstate", "up" (administratively), "carrier", "carrier_changes" (the
    kernel's count of carrier transitions), and LINK_STATS}}``.

    Raises:
        SetupError: the namespace cannot be read.
    """
    out: dict[str, dict] = {}
    try:
        with ipr_in(netns_pid) as ipr:
            for m in ipr.get_links():
                name = m.get_attr("IFLA_IFNAME")
                if names is not None and name not in names:
                    continue
                st = m.get_attr("IFLA_STATS64") or m.get_attr("IFLA_STATS") or {}
                out[name] = {"index": m["index"], "operstate": m.get_attr("IFLA_OPERSTATE"),
                             "up": bool(m["flags"] & 1), "carrier": bool(m.get_attr("IFLA_CARRIER")),
                             "carrier_changes": int(m.get_attr("IFLA_CARRIER_CHANGES") or 0),
                             **{k: int(st.get(k, 0)) for k in LINK_STATS}}
    except NetlinkError as e:
        raise SetupError(f"link counters: {e}") from None
    return out


def index_names(ipr: IPRoute) -> dict[int, str]:
    """``{ifindex: ifname}`` of every interface in ``ipr``'s namespace."""
    return {m["index"]: m.get_attr("IFLA_IFNAME") for m in ipr.get_links()}
