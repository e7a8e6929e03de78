"""The interface every RoCE rate controller implements (re-exported by traffic.ratecontrol, where
plug-ins and built-ins import it from; it lives here so that the plug-in loader,
traffic.ccplugin, and the registry can both use it without an import cycle).

A sender queue pair (traffic.roce.SenderQp) owns one controller and calls it from the agent's
one loop thread; nothing else calls it. Rates are in bit/s, times in seconds on the agent's
monotonic clock, byte counts are payload bytes (``on_sent`` counts a whole frame on the wire).
The guide with a worked example is docs/roce-cc.md.
"""
from __future__ import annotations


class RateController:
    """What sets a sender QP's rate. The QP calls, in this order over its life:

    - :meth:`from_job` once (a class method: the controller for one QP of the agent's job);
    - :meth:`start` once, when the QP's clock starts (the QP then paces at :meth:`rate_bps`);
    - :meth:`advance` before every frame the QP considers sending (the timer tick: run timers
      due by then), :meth:`on_sent` after every frame that left, :meth:`on_cnp` for every
      congestion notification packet, :meth:`on_ack` for every ACK or NAK that acknowledged
      new data; after each of these the QP reads :meth:`rate_bps` again;
    - :meth:`record` once at the end, into the QP's result record.

    Attributes:
        name: the registry name (a scenario's ``roce.mode``; a plug-in's is recorded as
            ``plugin:<name>``).
        params: the algorithm's parameters (a dataclass such as common.dcqcn.DcqcnParams, a
            mapping, or None), recorded with the QP's results.
        wants_rtt_samples: whether the controller reads the RTT samples :meth:`on_ack` gets. If
            so (the default) and ``ack_every_packets`` is None, a QP slowed below ``ack_every``
            frames per half the responder's coalescing delay asks for an ACK on every packet, so
            the samples keep coming.
        ack_every_packets: how often the controller wants to hear from the responder: every this
            many packets ask for an ACK (the BTH AckReq bit; 1: every packet, as Swift's transport
            acknowledges; an ACK asked for is sent at once, so it always carries a sample); None
            (the default) leaves it to the responder's count (the job's ``ack_every``, 16), as a
            RoCE NIC coalesces ACKs. A plug-in's value is checked when it loads (1 to 65536).
    """
    #: The registry name (a scenario's ``roce.mode``).
    name = "controller"
    params = None
    #: A registered controller's own scenario keys, the section ``roce.<name>``:
    #: ``{key: common.params.F}`` (``*_mbps`` keys reach ``params_cls`` in bit/s as ``*_bps``).
    #: Empty: no section. A plug-in's parameters are ``roce.cc.params`` instead.
    PARAMS: dict = {}
    #: A registered controller's parameter set (common.ccparams.CcParams: ``scaled(line_rate_bps,
    #: time_scale, **overrides)``), built from its section; None without one.
    params_cls: type | None = None
    wants_rtt_samples = True
    ack_every_packets: int | None = None

    @classmethod
    def from_job(cls, job: dict) -> "RateController":
        """The controller for one QP of an agent's job (traffic.roce's job format: ``line_rate_mbps``,
        ``mtu_bytes``, ``ack_every``, the algorithm's own section such as ``dcqcn``, and for a
        plug-in ``cc_params``, the scenario's ``roce.cc.params``)."""
        raise NotImplementedError

    def start(self, now_s: float) -> None:
        """The QP's clock starts at ``now_s``."""

    def rate_bps(self) -> float:
        """The rate the QP may send at now (bit/s; a positive finite number)."""
        raise NotImplementedError

    def target_bps(self) -> float:
        """The rate the controller aims for now (recorded beside the rate)."""
        return self.rate_bps()

    def advance(self, now_s: float) -> None:
        """The timer tick: run the controller's timers up to ``now_s`` (called before each frame,
        and whenever the agent's loop turns while the QP has frames to send)."""

    def on_sent(self, nbytes: int, now_s: float) -> None:
        """A frame of ``nbytes`` on the wire (headers included) left at ``now_s``."""

    def on_cnp(self, now_s: float) -> None:
        """A congestion notification packet for this QP arrived at ``now_s``."""

    def on_ack(self, now_s: float, rtt_s: float | None, acked_bytes: int) -> None:
        """An ACK (or a NAK, which acknowledges what precedes its PSN) arrived at ``now_s`` and
        acknowledged ``acked_bytes`` payload bytes that were not acknowledged before.

        ``rtt_s`` is the round trip of the newest packet it acknowledges: the ACK's arrival minus
        that packet's send time on the same clock, in seconds. It is None when that packet was
        sent more than once (Karn's rule), for a NAK, and for an ACK the responder sent on its
        coalescing timer rather than at once (it would carry the timer's delay): see
        traffic.roce.SenderQp. Duplicate ACKs, which acknowledge nothing new, are not reported."""

    def record(self) -> dict:
        """The controller's figures for the QP's result record: ``target_rate_bps`` (a fixed
        rate's target, else None), ``cnps_reacted``, ``alpha`` (None without one); a controller
        may add keys of its own (JSON values)."""
        return {"target_rate_bps": None, "cnps_reacted": 0, "alpha": None}
