"""AIMD for fabriclab's RoCE queue pairs (docs/roce-cc.md): add a step per round trip of
acknowledged data, halve on a CNP (at most once per round trip)."""
from traffic.ratecontrol import RateController


class Aimd(RateController):
    name = "aimd"

    def __init__(self, line_bps, step_bps):
        self.line_bps, self.step_bps = line_bps, step_bps
        self.rate, self.rtt_s, self.last_cut_s, self.cuts = line_bps, None, None, 0
        self.params = {"step_bps": step_bps}

    @classmethod
    def from_job(cls, job):
        line_bps = job["line_rate_mbps"] * 1e6
        return cls(line_bps, job["cc_params"].get("step_fraction", 0.01) * line_bps)

    def rate_bps(self):
        return self.rate

    def on_ack(self, now_s, rtt_s, acked_bytes):
        self.rtt_s = rtt_s or self.rtt_s                  # a timer's ACK has no sample
        if self.rtt_s:                                    # + step per round trip's worth of bytes
            round_trips = acked_bytes * 8 / (self.rate * self.rtt_s)
            self.rate = min(self.line_bps, self.rate + self.step_bps * round_trips)

    def on_cnp(self, now_s):
        if self.last_cut_s is None or now_s - self.last_cut_s >= (self.rtt_s or 0):
            self.rate = max(self.line_bps / 100, self.rate / 2)
            self.last_cut_s, self.cuts = now_s, self.cuts + 1

    def record(self):
        return {"target_rate_bps": None, "cnps_reacted": self.cuts, "alpha": None}
