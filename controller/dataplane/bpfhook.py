"""Attaching a BPF classifier to a port's tc ``clsact`` hook (ingress or egress), in direct-action mode."""
from __future__ import annotations

import errno

from pyroute2.netlink.exceptions import NetlinkError

from common.errors import SetupError
from controller.dataplane.netlink import ipr_given_or_in, link_index


#: tc parents of a clsact qdisc's two hooks.
CLSACT_EGRESS, CLSACT_INGRESS = "ffff:fff3", "ffff:fff2"


def attach_bpf_classifier(ifname: str, prog_fd: int, name: str, pref: int, ingress: bool = False,
                          netns_pid: int | None = None, ipr=None) -> None:
    """Attach a loaded direct-action BPF classifier (``prog_fd``) to ``ifname``'s egress (or ingress)
    hook at tc preference ``pref`` (lower runs first), adding the clsact qdisc if it is missing
    (``ipr``: an open ``IPRoute`` on the port's namespace to use, else one is opened in
    ``netns_pid``'s).

    Raises:
        SetupError: the interface is missing or tc refused the filter (the kernel's message).
    """
    try:
        with ipr_given_or_in(ipr, netns_pid) as ipr:
            idx = link_index(ipr, ifname)
            try:        # asked for, not looked up: a qdisc dump lists every port of the namespace
                ipr.tc("add", "clsact", idx)
            except NetlinkError as e:
                if e.code != errno.EEXIST:
                    raise
            ipr.tc("add-filter", "bpf", idx, ":1", fd=prog_fd, name=name,
                   parent=CLSACT_INGRESS if ingress else CLSACT_EGRESS, classid=1, direct_action=True, prio=pref)
    except NetlinkError as e:
        raise SetupError(f"tc refused the BPF filter {name} on {ifname}: {e}") from None
