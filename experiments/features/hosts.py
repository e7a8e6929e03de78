"""The hosts' kernel TCP settings (a scenario's ``hosts`` section, per round): each network
namespace's congestion control and ECN negotiation, set and read back before every round."""
from __future__ import annotations

import contextlib

from common.errors import CapabilityError, SetupError
from controller import dataplane
from experiments import probe as envprobe
from experiments.context import RoundRecord
from experiments.features.base import Feature
from experiments.state import RunState

ALLOWED_CC = "net.ipv4.tcp_allowed_congestion_control"


class AllowCongestionControl:
    """Context manager: let network namespaces pick ``name`` as their default.

    The kernel lets a non-initial namespace set ``tcp_congestion_control``
    only to an algorithm listed in the root namespace's
    ``tcp_allowed_congestion_control`` (EPERM otherwise). This adds ``name``
    for the run and restores the previous list afterwards (recorded in ``state`` meanwhile).
    """

    def __init__(self, name: str, state: RunState):
        self.name = name
        self.state = state
        self.before = None

    def __enter__(self):
        allowed = dataplane.get_sysctl(ALLOWED_CC).split()
        if self.name not in allowed:
            self.before = " ".join(allowed)
            self.state.remember("sysctl", [ALLOWED_CC, self.before])
            dataplane.set_sysctl(ALLOWED_CC, " ".join(allowed + [self.name]))
        return self

    def __exit__(self, *exc):
        if self.before is not None:
            dataplane.set_sysctl(ALLOWED_CC, self.before)
            self.state.forget("sysctl")
        return False


def configure_hosts(lf, hosts: dict) -> dict:
    """Set per-namespace TCP congestion control and ECN (a round's ``hosts`` section) on every host
    of the live fabric ``lf``; return what was read back, per host. Raises SetupError if a read-back
    differs."""
    cc = hosts.tcp_congestion_control
    ecn = str(hosts.tcp_ecn)
    seen = {}
    for h in lf.net.hosts:
        dataplane.set_sysctl("net.ipv4.tcp_congestion_control", cc, h.pid)
        dataplane.set_sysctl("net.ipv4.tcp_ecn", ecn, h.pid)
        got = (dataplane.get_sysctl("net.ipv4.tcp_congestion_control", h.pid),
               dataplane.get_sysctl("net.ipv4.tcp_ecn", h.pid))
        if got != (cc, ecn):
            raise SetupError(f"{h.name}: sysctls read back as {got}, asked {(cc, ecn)}")
        seen[h.name] = {"tcp_congestion_control": got[0], "tcp_ecn": int(got[1])}
    return seen


class HostTcp(Feature):
    """Every round's ``hosts`` section applied to every host namespace (recorded as ``host_config``)."""
    name = "hosts"

    def plan(self, queues_per_port: int) -> int:
        """Refuse a congestion control the kernel lacks (CapabilityError naming the round's key);
        record what the kernel offers under ``tcp_congestion_control``."""
        ctx = self.ctx
        for i, r in enumerate(ctx.rounds):
            cc = r.hosts.tcp_congestion_control
            if not envprobe.ensure_congestion_control(cc):
                key = f"rounds[{i}].hosts.tcp_congestion_control" if ctx.multi else "hosts.tcp_congestion_control"
                raise CapabilityError(f"{key}: the kernel has no '{cc}' "
                                      f"(available: {' '.join(envprobe.tcp_congestion_controls()['available'])})")
        ctx.env["tcp_congestion_control"] = envprobe.tcp_congestion_controls()
        return 0

    def enter(self, stack: contextlib.ExitStack, state) -> None:
        """Allow each round's congestion control in the namespaces for the run."""
        for cc in sorted({r.hosts.tcp_congestion_control for r in self.ctx.rounds}):
            stack.enter_context(AllowCongestionControl(cc, state))

    def before_round(self, lf, rnd: RoundRecord) -> dict:
        """Set the round's sysctls on every host; ``host_config`` is what was read back."""
        return {"host_config": configure_hosts(lf, rnd.round.hosts)}
