"""The run checks its own emulation (a round's ``fidelity`` section): every shaped port, switch
ports and host NICs, is watched by a BPF program at the qdisc dequeue tracepoint
(controller.dequeuebpf), which compares each gap between dequeues while the port was backlogged
with one frame's time on the wire (Mininet-HiFi's fidelity metric: Handigol et al., "Reproducible
Network Experiments Using Container-Based Emulation", CoNEXT 2012, section 3) and records the
longest packet its qdisc saw (a port that serialises sees single frames).

Each round's ``fidelity.serialisation`` holds, for the bottleneck port (the workload's, else the
port with the most backlogged gaps) and for every port that was backlogged: the share of gaps
within 10% of one frame time, the rate achieved while backlogged over the configured rate, the
histogram of gap / frame time, the longest packet, and the port's lead: the most it ran ahead of
its line over any window of frames, idle gaps included, each window measured from the end of a
dequeue (a frame the tracepoint saw late, after a CPU stall, and the next one on time are up to
a frame closer than the line allows whatever the shaper does; see controller/bpf/dequeue.bpf.c).
A check fails (one line naming the port; the run loop records it and the run exits 3 unless the
user accepts an unfaithful run) when a port ran ahead of its line by more than its shaper's bucket
and :data:`LEAD_TOLERANCE_US`; when a port backlogged for at least :data:`MIN_GAPS` gaps sent below :data:`MIN_RATE_SHARE` of its rate
or had fewer of its gaps within 10% of a frame time than :data:`SPACING_FLOORS` allow, beyond the
noise of its count (unless a feature paused its transmitter on purpose, a PFC pause, or a fault
changed its link); or when any qdisc saw a packet longer than one frame. A port with too few
backlogged gaps for the rate and spacing checks is listed as not checked, with the reason.
"""
from __future__ import annotations

import contextlib
import csv
from pathlib import Path

from common.errors import CapabilityError
from common.units import FRAME_BYTES
from controller.dequeuebpf import NBINS, OBJECT as DEQUEUE_OBJECT, DequeueGaps
from experiments.context import RoundRecord
from experiments.features.base import Feature

#: A port's rate and gap spacing are checked once it has this many gaps measured while frames
#: waited (1.2 s of backlog at 10 Mbit/s); a port with fewer is reported "not checked" with its
#: count. On a port backlogged for a few hundred frames, three timer wake-ups a frame time late
#: already cost 1%; a sender's uplink in the default incast's slow-start bursts measured 0.966 of
#: its rate over its backlogged gaps while the bottleneck, backlogged for 2750 gaps, measured
#: 0.993-0.999.
MIN_GAPS = 1000
#: A backlogged port fails the rate check when even the top of its confidence interval (see
#: :data:`Z`) is below this share of its configured rate (3%: a dequeue timer that fires late
#: beyond the shaper's bucket). Calibrated: the lowest of 70 rounds of backlogged bottlenecks was
#: 0.9777 (:data:`CALIBRATION`); a bare 0.97 flipped a 5 Mbit/s run on 0.969 before the interval.
MIN_RATE_SHARE = 0.97
#: A gap within this fraction of one frame time counts as exact (Mininet-HiFi's 10%).
WITHIN = 0.10
#: A backlogged port fails the spacing check when even the top of the confidence interval of its
#: share of gaps within 10% of a frame time is below the floor for its frame time: the first
#: (min frame time in microseconds, floor) pair whose frame time the port's reaches. Calibrated
#: (:data:`CALIBRATION`): 0.978 at the lowest of 40 rounds of long flows at 10 Mbit/s (1211 us
#: frames), 0.741 of 30 at 100 Mbit/s (121 us; the default 16-sender incast there measured
#: 0.73-0.76 before); and, in a CI rehearsal of the host lane (2026-12-06), a k=4 Fat-Tree
#: permutation at 2 Mbit/s 0.920, and the shipped ring AllReduce's host NICs at 10 Mbit/s
#: 0.617-0.72 (the ranks reduce their arrays on the same two cores, so their NICs' dequeue timers
#: fire late) while every one of those ports sent 0.989 or more of its rate. The floor sits below
#: the lowest of them: a port whose frames leave one frame time apart less than half the time is
#: no longer serialising, whatever its average rate. A port with frames shorter than 100 us is not
#: checked for spacing: 10% of its frame time is within the dequeue timer's jitter (at 200
#: Mbit/s about half the gaps are within 10%).
SPACING_FLOORS = ((100.0, 0.50),)
#: One-sided normal quantile of the checks' confidence intervals (0.999: a correct port fails
#: about once in a thousand checks by chance alone). The gaps are not independent (a busy CPU
#: delays several in a row), so the interval is narrower than the truth: the floors above sit
#: below the calibrated minimum as well.
Z = 3.09
#: How far beyond its bucket's time a port may run ahead of its line, in microseconds: clock and
#: token rounding. The lead is measured from the end of a dequeue (controller/bpf/dequeue.bpf.c):
#: every frame after it was released after it was traced, so HTB's bucket bounds the lead however
#: late the tracepoint fires. Measured from the start of a window, as before 2026-12-07, it did
#: not: the CPU can stall between the shaper's release of a frame and the tracepoint (an
#: interrupt, the hypervisor taking the vCPU), and the frame traced late is followed by the next
#: on the shaper's schedule, up to one frame time closer than the line allows. In the topology
#: comparison at 2 Mbit/s that went 1.6-3.3 ms beyond the bucket in 4 of 44 rounds here and
#: 1.97 ms in CI, beyond the 1.5 ms then allowed; measured from the end of a dequeue, no port
#: of 20 such rounds, of :data:`CALIBRATION`'s 60 nor of the default experiment's rounds without
#: priority classes (12, three runs) went beyond its bucket (at most -12.4 us).
LEAD_TOLERANCE_US = 100.0
#: Frames more a port with priority classes (PFC, ETS) may run ahead: HTB lets a class that has
#: tokens of its own (its assured rate, a thousandth of the link's with strict priority) send
#: without asking its parent, so the link's ceiling can pass by one frame when it does just after
#: another class borrowed the line. Measured: the default experiment's PFC rounds, 99-420 us beyond
#: the 121 us bucket on 10 Mbit/s spine ports (a frame is 1211 us; three runs, 2026-12-07).
PRIORITY_CLASS_FRAMES = 1
#: The calibration behind the floors and the tolerance: ``sudo make bench-shaper``
#: (bench/bench_shaper_ceiling.py; a 2-sender incast to one host on one leaf, the bottleneck's
#: figures; 10 rounds per set, idle or beside a busy loop on both cores): per case, min / median /
#: max over each set of the share of gaps within 10% and the rate share while backlogged
#: (2026-12-06), and of the bottleneck's lead (us) and the largest lead beyond its bucket of any
#: port (us), measured from the end of a dequeue (2026-12-07, the idle set beside another job's
#: unit tests; the loaded one beside the busy loop).
CALIBRATION = {
    "blocks 2 x 4 KB, 10 Mbit/s (bucket 121 us)": {
        "lead_us": [(0.0, 13.8, 57.3), (0.0, 17.1, 56.9)],
        "beyond_bucket_us": [(-120.8, -107.0, -63.5), (-120.8, -103.7, -63.9)]},
    "long flows, 10 Mbit/s": {
        "lead_us": [(0.0, 25.1, 61.1), (0.0, 0.0, 43.4)],
        "beyond_bucket_us": [(-99.6, -73.0, -57.1), (-96.5, -83.0, -57.7)],
        "within_10pct": [(0.9779, 0.9953, 0.9992), (0.9953, 0.9971, 0.9988), (0.9945, 0.9983, 0.9996),
                         (0.9934, 0.9981, 0.9992)],
        "rate_share": [(0.9887, 0.9924, 1.0), (0.9920, 0.9943, 0.9996), (0.9884, 0.9986, 1.0),
                       (0.9933, 0.9976, 0.9993)]},
    "long flows, 100 Mbit/s (bucket 100 us)": {
        "lead_us": [(14.9, 74.2, 86.9), (44.2, 77.3, 85.6)],
        "beyond_bucket_us": [(-85.1, -24.5, -12.5), (-50.5, -22.6, -14.4)],
        "within_10pct": [(0.7547, 0.7913, 0.8152), (0.7407, 0.8119, 0.8490), (0.7662, 0.8086, 0.8533)],
        "rate_share": [(0.9888, 0.9942, 0.9995), (0.9874, 0.9910, 0.9972), (0.9777, 0.9922, 0.9941)]},
}
#: A backlogged gap of this many frame times or more (the histogram's open last bin) is a stall:
#: the dequeue did not run for several frame times while frames waited. Measured: an 8-sender
#: RoCE incast beside a busy loop on 2 cores lost 272 ms of a bottleneck's 3.44 s backlog (0.921
#: of its rate) in 4 such gaps, while 99.5% of its gaps were within 10% of a frame time.
STALL_FRAMES = (NBINS - 1) // 10


def port_figures(raw: dict, rate_mbps: float, burst_bytes: int | None = None) -> dict:
    """One port's figures from its BPF counters ``raw`` (controller.dequeuebpf.DequeueGaps.read).

    Args:
        raw: the counters.
        rate_mbps: the port's configured rate.
        burst_bytes: its shaper's bucket in bytes (None: unknown, held to no bucket at all).

    Returns: ``rate_mbps``, ``packets``, ``max_packet_bytes``, ``backlogged_gaps``,
    ``backlogged_s`` (the backlogged gaps' total time, seconds), ``stalls`` (backlogged gaps of
    :data:`STALL_FRAMES` frame times or more: the port stood still with frames waiting),
    ``within_10pct`` (share of backlogged gaps within 10% of one frame time; None without gaps),
    ``rate_share_backlogged`` (achieved / configured rate while backlogged: the frames' wire time
    over the gaps' time; None without gaps), ``gap_ratio_sd`` (standard deviation of gap / frame
    time over the backlogged gaps; None below 2 gaps), ``gap_histogram`` (counts of gap / frame
    time in tenths, the last bin 3.0 and above), ``requeued`` (dequeues of packets the driver had
    refused, counted once), ``bucket_us`` (the bucket's time at the rate),
    ``lead_us`` (the most the port ran ahead of its line over any window of frames, idle gaps
    included; 0.0 if never) and ``lead_window`` (None, or that window: ``frames``, ``span_ms``
    it took, ``wire_ms`` its frames need on the line, ``mbps`` the rate that makes, ``end_s``
    when it ended, seconds after the port's first frame).
    """
    gaps = raw["gaps"]
    sd = None
    if gaps >= 2 and "ratio_sq" in raw:
        mean = raw["ratio_sum"] / gaps / 1000
        sd = round(max(0.0, raw["ratio_sq"] / gaps / 1e6 - mean * mean) ** 0.5, 5)
    return {"rate_mbps": rate_mbps, "packets": raw["packets"], "max_packet_bytes": raw["max_len"],
            "backlogged_gaps": gaps, "backlogged_s": round(raw["gap_ns"] / 1e9, 4), "stalls": raw["bins"][-1],
            "within_10pct": round(raw["within"] / gaps, 5) if gaps else None,
            "rate_share_backlogged": round(raw["frame_ns"] / raw["gap_ns"], 5) if raw["gap_ns"] else None,
            "gap_ratio_sd": sd, "gap_histogram": list(raw["bins"]), "requeued": raw.get("requeued", 0),
            "bucket_us": round(8 * (burst_bytes or 0) / rate_mbps, 1), **_lead(raw, rate_mbps)}


def _lead(raw: dict, rate_mbps: float) -> dict:
    """The ceiling's figures of one port (see :func:`port_figures`)."""
    lead_ns = max(0, raw.get("lead_ns", 0))
    if not lead_ns:
        return {"lead_us": 0.0, "lead_window": None}
    span_ns = raw["lead_span_ns"]
    wire_ns = span_ns + lead_ns
    return {"lead_us": round(lead_ns / 1e3, 1),
            "lead_window": {"frames": raw["lead_frames"], "span_ms": round(span_ns / 1e6, 4),
                            "wire_ms": round(wire_ns / 1e6, 4),
                            "mbps": round(rate_mbps * wire_ns / span_ns, 3) if span_ns else None,
                            "end_s": round((raw["lead_t_ns"] - raw["first_ns"]) / 1e9, 4)}}


def _ceiling(intf: str, f: dict, priority_classes: bool) -> tuple[dict, str | None]:
    """The ceiling check of one port: (its record, a failure line or None). A port with priority
    classes is allowed one more frame (:data:`PRIORITY_CLASS_FRAMES`)."""
    extra = PRIORITY_CLASS_FRAMES * _frame_us(f) if priority_classes else 0.0
    limit = f.get("bucket_us", 0.0) + LEAD_TOLERANCE_US + extra
    rec = {"lead_us": f.get("lead_us", 0.0), "limit_us": round(limit, 1),
           **({"priority_classes_us": round(extra, 1)} if extra else {})}
    w = f.get("lead_window")
    if rec["lead_us"] <= limit or not w:
        return rec, None
    fast = f"{w['mbps']:.2f} Mbit/s" if w["mbps"] else "at once"
    return rec, (f"{intf}: sent faster than its {f['rate_mbps']:g} Mbit/s: {w['frames']} frame(s) left in "
                 f"{w['span_ms']:.3f} ms for {w['wire_ms']:.3f} ms of wire time ({fast}), ending "
                 f"{w['end_s']:.3f} s after its first frame: {rec['lead_us']:.0f} us ahead of its line, "
                 f"beyond the {limit:.0f} us allowed (its bucket's {f.get('bucket_us', 0.0):.0f} us, "
                 f"{LEAD_TOLERANCE_US:.0f} us of rounding" + (f", {extra:.0f} us for its priority classes)"
                                                                     if extra else ")"))


def _rate(intf: str, f: dict) -> tuple[dict, str | None]:
    """The rate check of a backlogged port: (its record, a failure line or None). The interval is
    the mean gap / frame time's (its standard deviation over sqrt(gaps)), carried to the share."""
    share, n, sd = f["rate_share_backlogged"], f["backlogged_gaps"], f.get("gap_ratio_sd")
    hi = share
    if sd is not None and share:
        mean = 1 / share
        lo_mean = mean - Z * sd / n ** 0.5
        hi = 1 / lo_mean if lo_mean > 0 else float("inf")
    rec = {"share": share, "share_hi": round(min(hi, 9.99), 5), "floor": MIN_RATE_SHARE,
           "margin": round(share - MIN_RATE_SHARE, 5)}
    if hi >= MIN_RATE_SHARE:
        return rec, None
    lost_ms = 1000 * f["backlogged_s"] * (1 - share)
    return rec, (f"{intf}: sent {share:.3f} of its {f['rate_mbps']:g} Mbit/s while backlogged (at most {hi:.3f} "
                 f"within noise, floor {MIN_RATE_SHARE}): the shaper did not keep the line busy "
                 f"({lost_ms:.0f} ms lost in {f['backlogged_s']:.2f} s of backlog; {f['stalls']} "
                 f"stall(s) of {STALL_FRAMES}+ frame times)")


def _frame_us(f: dict) -> float:
    """One full frame's time on the port's line, microseconds."""
    return FRAME_BYTES * 8 / f["rate_mbps"]


def spacing_floor(frame_us: float) -> float | None:
    """The spacing floor (:data:`SPACING_FLOORS`) of a port whose frame time is ``frame_us``
    microseconds, or None when no floor was calibrated for frames that short."""
    return next((floor for at_least_us, floor in SPACING_FLOORS if frame_us >= at_least_us), None)


def _spacing(intf: str, f: dict) -> tuple[dict, str | None]:
    """The spacing check of a backlogged port (Mininet-HiFi's metric): (its record, a failure line
    or None). The interval is the binomial one of the share of gaps within 10% of a frame time."""
    w, n = f["within_10pct"], f["backlogged_gaps"]
    floor = spacing_floor(_frame_us(f))
    if floor is None:
        shortest = min(us for us, _ in SPACING_FLOORS)
        return {"share": w, "not_checked": f"a {_frame_us(f):.0f} us frame time, shorter than the {shortest:.0f} us "
                                           "the floor was calibrated for"}, None
    hi = min(1.0, w + Z * (w * (1 - w) / n) ** 0.5)
    rec = {"share": w, "share_hi": round(hi, 5), "floor": floor, "margin": round(w - floor, 5)}
    if hi >= floor:
        return rec, None
    return rec, (f"{intf}: {100 * w:.1f}% of its {n} backlogged gaps within {WITHIN:.0%} of a frame time (at most "
                 f"{100 * hi:.1f}% within noise), below the {100 * floor:.0f}% floor: its frames did not "
                 f"leave one frame time apart")


def serialisation_section(ports: dict, bottleneck: str | None, paused: frozenset = frozenset(),
                          faulted: frozenset = frozenset(), priority_ports: frozenset = frozenset()) -> dict:
    """The round's ``fidelity.serialisation`` from per-port figures (:func:`port_figures`).

    Three checks per port: the ceiling (every port: it never ran ahead of its line by more than its
    bucket and :data:`LEAD_TOLERANCE_US`, over any window of frames, idle gaps included), and on a
    port with at least :data:`MIN_GAPS` backlogged gaps the rate (:data:`MIN_RATE_SHARE`) and the
    spacing (:data:`SPACING_FLOORS`), each failing only when the top of its confidence interval
    (:data:`Z`) is below the floor. A port with fewer backlogged gaps is "not checked" for rate and
    spacing, and says why.

    Args:
        ports: interface -> figures, every watched port that dequeued a packet.
        bottleneck: the workload's bottleneck port, or None (then the port with the most backlogged gaps).
        paused: interfaces whose transmitter was paused on purpose in the round (PFC): their
            rate and spacing are reported (``paused``: true) but not checked, since a paused port
            is backlogged and silent by design.
        faulted: interfaces a fault slowed or took down in the round (a degraded link, a slow
            host's NIC, a flapping link): reported (``fault``: true), not held to their nominal rate.
        priority_ports: interfaces holding priority classes (an HTB class per priority): allowed
            :data:`PRIORITY_CLASS_FRAMES` more frames ahead of their line.

    Returns: ``bottleneck`` (its interface, figures and checks), ``ports`` (figures without
    histograms, and checks, of every port with at least :data:`MIN_GAPS` backlogged gaps or one
    that failed), ``max_packet_bytes`` over all ports, ``max_lead`` (the port closest to, or
    furthest beyond, its ceiling: its interface, lead and limit), ``not_checked`` (one line per
    port left unchecked for rate and spacing and why: the bottleneck, a paused or faulted port, or
    one with at least a tenth of :data:`MIN_GAPS` backlogged gaps), the floors, and
    ``failures``: one line per failed check, naming the port.
    """
    if bottleneck not in ports:
        busy = sorted(ports, key=lambda i: ports[i]["backlogged_gaps"], reverse=True)
        bottleneck = busy[0] if busy else None
    failures, not_checked, checks = [], [], {}
    for intf, f in sorted(ports.items()):
        c = checks[intf] = {}
        if f["max_packet_bytes"] > FRAME_BYTES:
            failures.append(f"{intf}: its qdisc saw a {f['max_packet_bytes']}-byte packet, longer than one "
                            f"{FRAME_BYTES}-byte frame (segmentation offload left on?)")
        c["ceiling"], fail = _ceiling(intf, f, intf in priority_ports)
        if fail:
            failures.append(fail)
        n = f["backlogged_gaps"]
        why = "its transmitter was paused (PFC)" if intf in paused else \
            "a fault changed its link" if intf in faulted else \
            f"{n} backlogged gaps, fewer than the {MIN_GAPS} they need" if n < MIN_GAPS else \
            f"its {n} backlogged gaps took no time: every frame that found others waiting left with them, " \
            "in one bulk dequeue" if f["rate_share_backlogged"] is None else None
        if why:
            c["not_checked"] = f"rate and spacing not checked: {why}"
            if n and (intf == bottleneck or n >= MIN_GAPS // 10 or intf in paused or intf in faulted):
                not_checked.append(f"{intf}: {c['not_checked']}")
            continue
        for name, check in (("rate", _rate), ("spacing", _spacing)):
            c[name], fail = check(intf, f)
            if fail:
                failures.append(fail)
    failed = {line.split(":")[0] for line in failures}
    worst = max(ports, key=lambda i: ports[i].get("lead_us", 0.0) - checks[i]["ceiling"]["limit_us"], default=None)
    return {"bottleneck": {"intf": bottleneck, **ports[bottleneck], "checks": checks[bottleneck]} if bottleneck else None,
            "ports": {i: {**{k: v for k, v in f.items() if k != "gap_histogram"}, "paused": i in paused,
                          **({"fault": True} if i in faulted else {}), "checks": checks[i]}
                      for i, f in sorted(ports.items()) if f["backlogged_gaps"] >= MIN_GAPS or i in failed},
            "max_packet_bytes": max((f["max_packet_bytes"] for f in ports.values()), default=0),
            "max_lead": {"intf": worst, **checks[worst]["ceiling"]} if worst else None,
            "not_checked": not_checked,
            "min_gaps": MIN_GAPS, "min_rate_share": MIN_RATE_SHARE,
            "spacing_floors": [{"frame_us_at_least": us, "floor": fl} for us, fl in SPACING_FLOORS],
            "within": WITHIN, "lead_tolerance_us": LEAD_TOLERANCE_US, "z": Z,
            "histogram_bins": f"gap / frame time in tenths, {NBINS} bins, the last 3.0 and above",
            "failures": failures}


def queue_failures(queues_csv: Path, buffer: tuple[str, int] | None) -> list[str]:
    """Impossible values in a round's sampled switch queues (``queues.csv``: t_s, intf,
    backlog_bytes, backlog_packets, drops_total, tx_bytes_total, tx_packets_total), one line per
    port at its first: a cumulative counter that went backwards (the port's qdisc was replaced
    under the run, e.g. by Open vSwitch applying a QoS; its counters restart at zero), or a
    backlog above the port's buffer. Times are seconds from the first sample.

    Args:
        queues_csv: the round's queue samples.
        buffer: ``("packets" | "bytes", limit)`` of a port's one FIFO, or None when ports hold
            several queues (priority classes), whose sum may exceed one buffer.
    """
    first: dict[str, str] = {}
    last: dict[str, tuple[int, int, int]] = {}
    t0 = None
    with open(queues_csv) as f:
        for row in csv.DictReader(f):
            intf = row["intf"]
            t0 = float(row["t_s"]) if t0 is None else t0
            if intf in first:
                continue
            t = float(row["t_s"]) - t0
            cur = (int(row["tx_bytes_total"]), int(row["tx_packets_total"]), int(row["drops_total"]))
            prev = last.get(intf)
            if prev is not None and any(c < p for c, p in zip(cur, prev)):
                first[intf] = (f"{intf}: its qdisc's counters went backwards at t = {t:.3f} s of the samples (sent bytes "
                               f"{prev[0]} -> {cur[0]}, packets {prev[1]} -> {cur[1]}): something replaced the "
                               "queue fabriclab installed (an Open vSwitch QoS on the port does)")
                continue
            last[intf] = cur
            if buffer is not None:
                unit, limit = buffer
                held = int(row["backlog_packets" if unit == "packets" else "backlog_bytes"])
                if held > limit:
                    first[intf] = f"{intf}: {held} {unit} queued at t = {t:.3f} s, above its {limit}-{unit} buffer"
    return [first[i] for i in sorted(first)]


class Fidelity(Feature):
    """Every round's serialisation check (see the module docstring)."""
    name = "fidelity"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.gaps: DequeueGaps | None = None
        self.rates: dict[str, float] = {}
        self.switch_ports: frozenset = frozenset()
        self.one_fifo = True

    def plan(self, queues_per_port: int) -> int:
        """Every shaped port and its rate; CapabilityError when the BPF program is not built."""
        if not DEQUEUE_OBJECT.exists():
            raise CapabilityError(f"fidelity: {DEQUEUE_OBJECT} is not built (run 'sudo make setup'; needs clang "
                                  "and libbpf-dev)")
        self.one_fifo = queues_per_port == 1
        self._ports()
        self.ctx.env["fidelity"] = {
            "serialisation": "BPF at the qdisc_dequeue tracepoint: gaps between dequeues of a backlogged "
                             "port against one frame time; the longest packet each qdisc saw",
            "shaper_slack_s": self.ctx.env["shaper"]["slack_s"],
            "one_fifo_per_port": self.one_fifo,
            "shaper_burst_bytes": self.ctx.sc.queues.burst_bytes or "per port: rate x shaper_slack_s, "
                                  f"{FRAME_BYTES // 10}..{FRAME_BYTES} bytes"}
        return 0

    def _ports(self) -> None:
        """Every shaped port (switch ports and host NICs) and its rate in Mbit/s, from the fabric map."""
        fmap = self.ctx.fabric_map
        self.rates = {p["intf"]: p["rate_mbps"] for s in fmap["switches"] for p in s["ports"]}
        self.switch_ports = frozenset(self.rates)
        self.rates.update({h["intf"]: h["rate_mbps"] for h in fmap["hosts"]})

    def restore(self) -> None:
        """For ``analyze``: the shaped ports, so that ports with priority classes get their allowance
        as they did in the run."""
        self._ports()
        self.one_fifo = self.ctx.env.get("fidelity", {}).get("one_fifo_per_port", True)

    def enter(self, stack: contextlib.ExitStack, state) -> None:
        """Load the dequeue-gap program for the run (unloaded at its end, whatever the exit)."""
        self.gaps = stack.enter_context(DequeueGaps.load())

    def before_round(self, lf, rnd: RoundRecord) -> dict:
        """Watch every shaped port from zero."""
        for intf, rate in self.rates.items():
            self.gaps.watch(intf, rate * 1e6)
        return {}

    def after_round(self, lf, rnd: RoundRecord) -> dict:
        """Every port's counters over the round (ports that dequeued nothing left out)."""
        out = {}
        slack_s = self.ctx.env["shaper"]["slack_s"]
        for intf, rate in self.rates.items():
            raw = self.gaps.read(intf)
            if raw and raw["packets"]:
                out[intf] = port_figures(raw, rate, self.ctx.sc.queues.burst_for(rate, slack_s))
        return {"serialisation": out}

    def summarize(self, rnd: RoundRecord, summary: dict) -> None:
        """The round's ``fidelity`` section."""
        rec = rnd.features.get(self.name)
        if not rec:
            return
        bn = (summary.get("bottleneck") or {}).get("intf")
        fid = summary.setdefault("fidelity", {})
        one = self.ctx.env.get("fidelity", {}).get("one_fifo_per_port")
        if one is None:                   # a run recorded before this key: priority queues came with PFC
            one = self.ctx.env.get("pfc") is None
        fid["serialisation"] = serialisation_section(rec["serialisation"], bn,
                                                     frozenset(summary.get("paused_transmitters", ())),
                                                     frozenset(summary.get("fault_ports", ())),
                                                     frozenset() if one else frozenset(self.rates))
        queues = rnd.dir / "queues.csv"
        if queues.exists():
            q = self.ctx.sc.queues
            one = self.ctx.env.get("fidelity", {}).get("one_fifo_per_port")
            if one is None:                   # a run recorded before this key: priority queues came with PFC
                one = self.ctx.env.get("pfc") is None
            buffer = (("packets", q.buffer_packets) if q.buffer_packets is not None else ("bytes", q.limit_bytes)) \
                if one else None
            fid["queues"] = {"checked": "sampled switch queues: counters never go backwards"
                                        + ("; no backlog above the buffer" if buffer else ""),
                             "failures": queue_failures(queues, buffer)}

    def failures(self, summary: dict) -> list[str]:
        """The failed serialisation and queue checks (one line each, naming the port)."""
        fid = summary.get("fidelity") or {}
        return [f for part in ("serialisation", "queues") for f in (fid.get(part) or {}).get("failures", [])]

    def report(self, summary: dict) -> str | None:
        """``fidelity: <ok|FAILED>; bottleneck <port> 99.2% of gaps within 10% of a frame time, at 0.998 of its rate; ...``."""
        fid = summary.get("fidelity") or {}
        sec = fid.get("serialisation")
        if not sec:
            return None
        verdict = "ok" if fid.get("ok", not sec["failures"]) else \
            ("FAILED, accepted" if fid.get("accepted_unfaithful") else "FAILED")
        b = sec["bottleneck"]
        parts = [f"fidelity: {verdict}"]
        if b and (b.get("checks") or {}).get("not_checked"):
            parts.append(f"{b['intf']} {b['checks']['not_checked']}")
        elif b and b["within_10pct"] is not None:
            c = b.get("checks") or {}
            sp = c.get("spacing") or {}
            floors = (f" (floors {100 * sp['floor']:.0f}%, {c['rate']['floor']})" if "floor" in sp else
                      f" (floor {c['rate']['floor']}; spacing not checked: {sp['not_checked']})" if sp else "")
            parts.append(f"{b['intf']} {100 * b['within_10pct']:.1f}% of {b['backlogged_gaps']} backlogged gaps "
                         f"within 10% of a frame time, at {b['rate_share_backlogged']:.3f} of its rate{floors}")
        lead = sec.get("max_lead")
        if lead:
            parts.append(f"closest to its ceiling {lead['intf']}, {lead['lead_us']:.0f} us ahead of its line "
                         f"(allowed {lead['limit_us']:.0f})")
        parts.append(f"longest packet at a qdisc {sec['max_packet_bytes']} B")
        return "; ".join(parts)
