"""The delay line's and RED's netlink requests on this kernel, on throwaway veths, read back with
the tools a user would use (``tc``, ``ip``), not with the code under test. Where the kernel has
netem or RED (the stock-kernel lane) the whole install is checked; where it has neither (the host
lane's kernel) the refusal must name the interface and carry the kernel's words, and the parts it
does have (ifb, clsact, the u32 redirect) are checked on their own."""
import json
import subprocess
import time

import pytest

from common.ecn import parse_profile
from common.errors import SetupError
from controller.dataplane import hostknobs, tcqdisc
from controller.dataplane.netlink import TC_ADD, ipr_entered, link_index, tc_message, tc_send
from pyroute2.netlink.rtnl import RTM_NEWQDISC, RTM_NEWTFILTER
from tests.conftest import kernel_features

from .conftest import own_netns

ROOT_PAIR = ("flnlr0", "flnlr1")


def _ns(pid, *argv) -> str:
    return subprocess.run(["nsenter", "-t", str(pid), "-n", "--", *argv], capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture
def netns():
    """The pid of a process in a new network namespace holding the veth pair flnl0 (the receiving
    end) / flnl1, both up."""
    holder = subprocess.Popen(["unshare", "-n", "sleep", "120"])
    try:
        pid = own_netns(holder)
        _ns(pid, "ip", "link", "add", "flnl0", "type", "veth", "peer", "name", "flnl1")
        for n in ("flnl0", "flnl1", "lo"):
            _ns(pid, "ip", "link", "set", n, "up")
        yield pid
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture
def shaped_root_port():
    """flnlr0 in the root namespace with the port's tree (htb 1: -> 1:1 at 10 Mbit/s -> pfifo 10:)."""
    try:
        subprocess.run(["ip", "link", "add", ROOT_PAIR[0], "type", "veth", "peer", "name", ROOT_PAIR[1]], check=True)
        subprocess.run(["tc", "qdisc", "add", "dev", ROOT_PAIR[0], "root", "handle", "1:", "htb", "default", "1"],
                       check=True)
        subprocess.run(["tc", "class", "add", "dev", ROOT_PAIR[0], "parent", "1:", "classid", "1:1", "htb", "rate",
                        "10mbit"], check=True)
        subprocess.run(["tc", "qdisc", "add", "dev", ROOT_PAIR[0], "parent", "1:1", "handle", "10:", "pfifo", "limit",
                        "100"], check=True)
        yield ROOT_PAIR[0]
    finally:
        hostknobs.delete_root_links(list(ROOT_PAIR))


def _rx_packets(pid, ifname) -> int:
    return json.loads(_ns(pid, "ip", "-s", "-j", "link", "show", ifname))[0]["stats64"]["rx"]["packets"]


def _redirected_frames_arrive(pid, ifb):
    """Frames sent from flnl1 arrive on flnl0 and are handed to ``ifb``."""
    before = _rx_packets(pid, ifb)
    _ns(pid, "sh", "-c", "ping -c 3 -i 0.2 -W 1 -I flnl1 10.254.254.254 >/dev/null 2>&1 || true")
    time.sleep(0.1)
    assert _rx_packets(pid, ifb) >= before + 3


def _redirect_read_back(pid, ifb):
    (f,) = [f for f in json.loads(_ns(pid, "tc", "-j", "filter", "show", "dev", "flnl0", "ingress"))
            if f.get("options", {}).get("actions")]
    assert (f["kind"], f["pref"], f["protocol"]) == ("u32", 1, "all")
    assert f["options"]["match"] == {"value": "0", "mask": "0", "offmask": "", "off": 0}
    (a,) = f["options"]["actions"]
    assert (a["kind"], a["mirred_action"], a["direction"], a["to_dev"]) == ("mirred", "redirect", "egress", ifb)
    assert a["control_action"]["type"] == "stolen"


def test_the_ifb_probe_leaves_nothing():
    assert tcqdisc.ifb_available()
    assert "flprobeifb" not in hostknobs.root_links()


def test_a_delay_line_in_a_host_namespace(netns):
    pid = netns
    feats, _ = kernel_features()
    if "qdisc:netem" in feats:
        tcqdisc.install_delay_line("flnl0", "flnlifb0", 2000, 100, 1000, pid)
        (q,) = json.loads(_ns(pid, "tc", "-j", "qdisc", "show", "dev", "flnlifb0"))
        assert (q["kind"], q["handle"], q["options"]["limit"]) == ("netem", "1:", 1000)
        # netem keeps its times in psched ticks of 64 ns (100 us is 1562.5 ticks: 1562 are kept, as
        # tc itself sends them), and tc prints them back in whole microseconds (99.968 us as 99 us)
        shown = 1e-6 + 64e-9
        assert q["options"]["delay"]["delay"] == pytest.approx(0.002, abs=shown)
        assert q["options"]["delay"]["jitter"] == pytest.approx(0.0001, abs=shown)
    else:
        with pytest.raises(SetupError, match=r"^delay line on flnl0: netem on flnlifb0: kernel refused "
                                             r"\(2: Specified qdisc kind is unknown\)$"):
            tcqdisc.install_delay_line("flnl0", "flnlifb0", 2000, 100, 1000, pid)
        # what this kernel has: the ifb device (made, up), then clsact and the redirect as the delay line sends them
        with ipr_entered(pid) as ipr:
            idx, ifb = link_index(ipr, "flnl0"), link_index(ipr, "flnlifb0")
            tc_send(ipr, tc_message("clsact", idx, tcqdisc.CLSACT_HANDLE, tcqdisc.TC_H_CLSACT), RTM_NEWQDISC, TC_ADD)
            tc_send(ipr, tcqdisc.redirect_filter_message(idx, ifb), RTM_NEWTFILTER, TC_ADD)
    link = json.loads(_ns(pid, "ip", "-j", "-d", "link", "show", "flnlifb0"))[0]
    assert link["linkinfo"]["info_kind"] == "ifb" and "UP" in link["flags"]
    assert ("clsact", "ffff:") in {(q["kind"], q["handle"]) for q in
                                    json.loads(_ns(pid, "tc", "-j", "qdisc", "show", "dev", "flnl0"))}
    _redirect_read_back(pid, "flnlifb0")
    _redirected_frames_arrive(pid, "flnlifb0")
    # the name is taken now: the refusal names the step and carries the kernel's words
    with pytest.raises(SetupError, match=r"^delay line on flnl0: ip link add flnlifb0 type ifb: kernel refused "
                                         r"\(17: File exists\)$"):
        tcqdisc.install_delay_line("flnl0", "flnlifb0", 2000, 0, 1000, pid)
    with pytest.raises(SetupError, match="^delay line: no interface 'flnope'$"):
        tcqdisc.install_delay_line("flnope", "flnlifb1", 2000, 0, 1000, pid)
    assert "flnlifb1" not in _ns(pid, "ip", "-o", "link")           # nothing made for a missing interface


def test_red_under_the_port_class(shaped_root_port):
    ifname = shaped_root_port
    feats, _ = kernel_features()
    prof = parse_profile({"step": {"k_packets": 20}}, 151400, "k")
    if "qdisc:red" in feats:
        tcqdisc.install_red(ifname, 10e6, 151400, prof)
        (q,) = [q for q in json.loads(subprocess.run(["tc", "-d", "-j", "qdisc", "show", "dev", ifname],
                                                     capture_output=True, text=True, check=True).stdout)
                if q["kind"] == "red"]
        assert (q["handle"], q["parent"]) == ("20:", "1:1")
        o = q["options"]
        assert (o["limit"], o["min"], o["max"], o["ewma"]) == (151400, 30280, 30281, 1)
        assert tcqdisc.red_flags_ok(o)
        c = tcqdisc.red_counters(ifname)
        assert set(c) == {"marked", "early", "pdrop", "other", "drops", "packets"}
        assert all(isinstance(v, int) for v in c.values())
    else:
        with pytest.raises(SetupError, match=rf"^tc on {ifname}: kernel refused RED \(2: Specified qdisc kind is "
                                             r"unknown\)$"):
            tcqdisc.install_red(ifname, 10e6, 151400, prof)
        assert tcqdisc.red_counters(ifname) is None           # a FIFO port has no RED counters
    with pytest.raises(SetupError, match="^tc: no interface 'flnope'$"):
        tcqdisc.install_red("flnope", 10e6, 151400, prof)
    with pytest.raises(SetupError, match="^tc: no interface 'flnope'$"):
        tcqdisc.red_counters("flnope")
