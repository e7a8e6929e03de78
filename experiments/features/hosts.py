"""The hosts' kernel TCP settings (a scenario's ``hosts`` section, per round): each network
namespace's congestion control and ECN negotiation, set and read back before every round."""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from common.errors import CapabilityError, SetupError
from common.lazy import lazy_module
from experiments.context import RoundRecord
from experiments.features.base import Feature

if TYPE_CHECKING:
    from experiments import probe as envprobe
    from experiments.state import RunState
    from controller.dataplane import hostknobs
else:    # the live half, loaded when a live hook first runs (common.lazy): analyze and plot run without it
    hostknobs = lazy_module("controller.dataplane.hostknobs")
    envprobe = lazy_module("experiments.probe")


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
        allowed = hostknobs.get_sysctl(ALLOWED_CC).split()
        if self.name not in allowed:
            self.before = " ".join(allowed)
            self.state.remember("sysctl", [ALLOWED_CC, self.before])
            hostknobs.set_sysctl(ALLOWED_CC, " ".join(allowed + [self.name]))
        return self

    def __exit__(self, *exc):
        if self.before is not None:
            hostknobs.set_sysctl(ALLOWED_CC, self.before)
            self.state.forget("sysctl")
        return False


def configure_hosts(lf, hosts) -> dict:
    """Apply a round's ``hosts`` section (experiments.model.Hosts) to every host of the live fabric
    ``lf``: the namespace's congestion control, ECN negotiation and slow start after idle
    (sysctls, case H1), TIME_WAIT reuse for the planned source ports, no TCP metrics carried
    from one round's connections to the next, and on every route out of its NIC the minimum RTO
    and quick ACKs. Returns what was read back, per host.

    Raises:
        SetupError: a read-back differs from what was asked, or the kernel refused a setting.
    """
    asked = {"net.ipv4.tcp_congestion_control": hosts.tcp_congestion_control,
             "net.ipv4.tcp_ecn": str(hosts.tcp_ecn),
             "net.ipv4.tcp_slow_start_after_idle": str(int(hosts.slow_start_after_idle)),
             # flows bind their planned source ports (traffic.patterns.source_ports): a round that
             # repeats an earlier round's seed reuses its 4-tuples, whose senders are in TIME_WAIT
             "net.ipv4.tcp_tw_reuse": "1",
             # no TCP metrics cache: a round's connections would otherwise start from the ssthresh and
             # RTT the previous round's connections to the same host left behind, a carry-over from one
             # variant of a study to the next on one fabric
             "net.ipv4.tcp_no_metrics_save": "1"}
    intfs = {h["name"]: h["intf"] for h in lf.fabric_map["hosts"]}
    seen = {}
    for h in lf.net.hosts:
        got = hostknobs.set_sysctls(asked, h.pid)
        if got != asked:
            raise SetupError(f"{h.name}: sysctls read back as {got}, asked {asked}")
        routes = hostknobs.set_route_tcp(intfs[h.name], h.pid, hosts.rto_min_ms, not hosts.delayed_ack)
        seen[h.name] = {"tcp_congestion_control": got["net.ipv4.tcp_congestion_control"],
                        "tcp_ecn": int(got["net.ipv4.tcp_ecn"]),
                        "slow_start_after_idle": got["net.ipv4.tcp_slow_start_after_idle"] == "1",
                        "routes": routes}
    return seen


def effective_rto_min_ms(rto_min_ms: int, hz: int | None) -> float | None:
    """The minimum RTO the kernel applies for a route's ``rto_min_ms``: it keeps timers in jiffies of
    1/``hz`` s and rounds up (msecs_to_jiffies), so 5 ms is 8 ms at HZ=250. None when ``hz`` is unknown."""
    if hz is None:
        return None
    return -(-rto_min_ms * hz // 1000) * 1000 / hz


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
        hz = hostknobs.kernel_hz()
        ctx.env["kernel_hz"] = hz
        asked = sorted({r.hosts.rto_min_ms for r in ctx.rounds if r.hosts.rto_min_ms is not None})
        if asked:
            ctx.env["rto_min_effective_ms"] = {str(ms): effective_rto_min_ms(ms, hz) for ms in asked}
        return 0

    def enter(self, stack: contextlib.ExitStack, state) -> None:
        """Allow each round's congestion control in the namespaces for the run."""
        for cc in sorted({r.hosts.tcp_congestion_control for r in self.ctx.rounds}):
            stack.enter_context(AllowCongestionControl(cc, state))

    def describe_round(self, rnd: RoundRecord) -> str | None:
        """The round's TCP timer and ACK settings when they are not the kernel's, e.g. ``RTOmin 5 ms, quick ACKs``."""
        h = rnd.round.hosts
        parts = ([f"RTOmin {h.rto_min_ms} ms"] if h.rto_min_ms is not None else []) \
            + ([] if h.delayed_ack else ["quick ACKs"]) + ([] if h.slow_start_after_idle else ["no slow start after idle"])
        return ", ".join(parts) or None

    def before_round(self, lf, rnd: RoundRecord) -> dict:
        """Set the round's sysctls on every host; ``host_config`` is what was read back."""
        return {"host_config": configure_hosts(lf, rnd.round.hosts)}
