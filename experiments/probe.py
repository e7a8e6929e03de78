"""Environment probe: what this kernel and machine offer, and what fabriclab chose.

Run once per experiment (root needed for the qdisc probe); the result goes
into every results folder as ``environment.json``.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

from common.datapath import ovs_kernel_datapath_available
from common.errors import SetupError
from controller import timers
from controller.dataplane import tcqdisc
from controller.datapaths import registry as datapaths

#: qdisc kinds probed (each with the arguments of tc's shortest command line for it:
#: controller.dataplane.tcqdisc.probe_qdisc_message).
QDISC_PROBES = ("htb", "tbf", "pfifo", "bfifo", "prio", "red", "netem", "fq_codel", "clsact")
PROBE_IF = "flprobe0"
PROBE_PEER = "flprobe1"


def _out(argv: list[str]) -> tuple[int, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=15)
        return p.returncode, (p.stdout + p.stderr).strip()
    except (FileNotFoundError, subprocess.TimeoutExpired) as e:
        return 127, str(e)


def probe_qdiscs() -> dict[str, bool]:
    """Which qdisc kinds the kernel accepts, tried over netlink on a throwaway veth pair with the
    encoders fabriclab's own installs use (controller.dataplane.tcqdisc.qdisc_kinds_accepted).

    The veth pair ``flprobe0``/``flprobe1`` is fabriclab's own; a stale one is
    removed first and the pair is always deleted afterwards.
    """
    return tcqdisc.qdisc_kinds_accepted(PROBE_IF, PROBE_PEER, QDISC_PROBES)


def loadable_congestion_controls() -> list[str]:
    """Congestion controls shipped as modules for the running kernel (``tcp_<name>.ko*``), not yet loaded."""
    base = Path("/lib/modules", platform.release(), "kernel", "net", "ipv4")
    try:
        return sorted({p.name.split(".")[0][4:] for p in base.glob("tcp_*.ko*")})
    except OSError:
        return []


def tcp_congestion_controls() -> dict[str, object]:
    """Available (loaded or built in), loadable (module files) and default TCP congestion controls."""
    def rd(p):
        try:
            return Path(p).read_text().strip()
        except OSError:
            return ""
    return {"available": rd("/proc/sys/net/ipv4/tcp_available_congestion_control").split(),
            "loadable": loadable_congestion_controls(),
            "default": rd("/proc/sys/net/ipv4/tcp_congestion_control")}


def ensure_congestion_control(name: str) -> bool:
    """True if ``name`` is available, loading ``tcp_<name>`` if needed (never a fallback)."""
    if name in tcp_congestion_controls()["available"]:
        return True
    _out(["modprobe", "-q", f"tcp_{name}"])
    return name in tcp_congestion_controls()["available"]


def _version(argv: list[str]) -> str:
    rc, out = _out(argv)
    return out.splitlines()[0] if rc == 0 and out else "not found"


def probe() -> dict:
    """Probe the machine and choose the datapath.

    Returns a JSON-serialisable dict: kernel, ovs_version, datapath_impl (the registered datapath
    chosen: controller.datapaths.registry.choose, ``ovs``; None when none can run here), datapath
    (its mode: ``kernel`` if the openvswitch module is usable, else ``user``), routes_via (how the
    controller's routes reach its switches),
    offloads_off (always true: cases T1/L5), qdiscs {kind: bool},
    tcp_congestion_control {available, default}, shaper {slack_s, timer_lateness} (how late
    this machine's timers fire and the port shapers' slack that follows,
    controller.timers.shaper_slack_s), python, versions of os-ken, mininet, pyroute2, scapy.
    """
    kernel_dp = ovs_kernel_datapath_available()
    try:
        dp = datapaths.choose()
        chosen = {"datapath_impl": dp.name, "datapath": dp.mode, "routes_via": dp.routes_via}
    except SetupError:
        chosen = {"datapath_impl": None, "datapath": "kernel" if kernel_dp else "user", "routes_via": None}
    versions = {}
    for mod in ("os_ken", "mininet.net", "pyroute2", "scapy", "matplotlib"):
        try:
            m = __import__(mod, fromlist=["x"])
            if mod == "mininet.net":
                versions["mininet"] = getattr(m, "VERSION", "?")
            else:
                versions[mod] = getattr(m, "__version__", "?")
        except Exception as e:  # a missing optional piece is recorded, not fatal here
            versions[mod.split(".")[0]] = f"unavailable: {type(e).__name__}"
    return {
        "kernel": platform.release(),
        "machine": platform.machine(),
        "ovs_version": _version(["ovs-vsctl", "--version"]),
        "ovs_kernel_module": kernel_dp,
        **chosen,
        "offloads_off": True,
        "qdiscs": probe_qdiscs(),
        "tcp_congestion_control": tcp_congestion_controls(),
        "shaper": {"slack_s": timers.shaper_slack_s(), "timer_lateness": timers.machine_timers().record()},
        "python": sys.version.split()[0],
        "versions": versions,
        "cpus": os.cpu_count(),
    }
