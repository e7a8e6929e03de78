"""Queue percentiles, per-flow fairness and the CDF plots of a flows round, on synthetic inputs
with known answers."""
from types import SimpleNamespace

import numpy as np
import pytest

from common.stats import jain_index, sample_percentiles
from experiments import analysis, plot
from experiments.sections import SECTIONS
from experiments.plot import plt


# -- common.stats ------------------------------------------------------------------------------

def test_jain_index_equal_rates_is_one_and_one_hog_is_one_over_n():
    assert jain_index([3.0] * 7) == pytest.approx(1.0)
    for n in (2, 5, 16):
        assert jain_index([9.0] + [0.0] * (n - 1)) == pytest.approx(1 / n)
    # two flows at 1 and 3: (4)^2 / (2 * 10) = 0.8
    assert jain_index([1, 3]) == pytest.approx(0.8)


@pytest.mark.parametrize("bad", [[], [0, 0], [1, -1], [1, float("nan")], [float("inf"), 1]])
def test_jain_index_refuses_what_has_no_index(bad):
    with pytest.raises(ValueError):
        jain_index(bad)


def test_sample_percentiles_match_numpy_on_a_skewed_sample():
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.integers(0, 5, 900), rng.integers(80, 101, 100)]).astype(float)
    got = sample_percentiles(x)
    assert list(got) == ["p5", "p50", "p95", "p99"]
    for q in (5, 50, 95, 99):
        assert got[f"p{q}"] == pytest.approx(float(np.percentile(x, q)))
    # the known shape: a queue idle-ish 90% of the time, full the rest
    assert got["p50"] <= 4 and got["p95"] >= 80 and got["p99"] >= 80


def test_sample_percentiles_known_answer_and_edges():
    # 0..100: the q-th percentile of 101 evenly spaced samples is q itself
    assert sample_percentiles(range(101)) == {"p5": 5.0, "p50": 50.0, "p95": 95.0, "p99": 99.0}
    assert sample_percentiles([4]) == {"p5": 4.0, "p50": 4.0, "p95": 4.0, "p99": 4.0}
    assert sample_percentiles([]) is None
    assert sample_percentiles([1, 2], qs=(0, 100, 12.5)) == {"p0": 1.0, "p100": 2.0, "p12.5": 1.125}
    with pytest.raises(ValueError):
        sample_percentiles([1, 2], qs=(101,))
    with pytest.raises(ValueError):
        sample_percentiles([1, float("nan")])


# -- experiments.analysis: queue percentiles per port ------------------------------------------

def fake_run(duration_s=None, warmup_s=2.0, buffer_packets=100):
    """The few scenario fields the analysis reads, as attributes."""
    return SimpleNamespace(queues=SimpleNamespace(buffer_bytes=None, buffer_packets=buffer_packets),
                           traffic=SimpleNamespace(duration_s=duration_s, pattern="permutation", receiver=None),
                           measurement=SimpleNamespace(warmup_s=warmup_s))


def port_samples(t_s, packets):
    t_s, packets = np.asarray(t_s, dtype=float), np.asarray(packets, dtype=float)
    n = len(t_s)
    return {"t_s": t_s, "backlog_packets": packets, "backlog_bytes": packets * 1514,
            "drops_total": np.zeros(n), "tx_bytes_total": np.arange(n) * 1000.0, "tx_packets_total": np.arange(n)}


def test_port_percentiles_cover_the_window_only():
    rng = np.random.default_rng(3)
    t = np.arange(0, 10, 0.02)                        # 50 Hz for 10 s
    inside = (t >= 1.0) & (t <= 6.0)
    q = np.where(inside, rng.integers(0, 40, len(t)), 100)   # full outside the window: must not count
    fabric_map = {"switches": [{"name": "s1", "ports": [
        {"port": 1, "intf": "s1-eth1", "peer": "h1", "rate_mbps": 10},
        {"port": 2, "intf": "s1-eth2", "peer": "h2", "rate_mbps": 10}]}]}
    samples = {"s1-eth1": port_samples(t, q), "s1-eth2": port_samples([8.0, 9.0], [5, 7])}
    rows = analysis.port_summaries(samples, fabric_map, fake_run(), (1.0, 6.0))
    r = rows[0]
    for p in (5, 50, 95, 99):
        assert r[f"p{p}_backlog_packets"] == pytest.approx(float(np.percentile(q[inside], p)))
        assert r[f"p{p}_backlog_bytes"] == pytest.approx(float(np.percentile(q[inside] * 1514, p)))
    assert r["p99_backlog_packets"] < 40 and r["peak_backlog_packets"] == 100
    assert r["window_samples"] == int(inside.sum())
    # a port with no sample in the window: no percentile rather than a made-up zero
    assert rows[1]["window_samples"] == 0 and rows[1]["p50_backlog_packets"] is None
    bn = analysis.bottleneck_summary(analysis.bottleneck(rows), None, (1.0, 6.0))
    assert bn["intf"] == "s1-eth1" and bn["queue_window_s"] == [1.0, 6.0]
    assert {k: bn[k] for k in analysis.QUEUE_COLUMNS} == {k: r[k] for k in analysis.QUEUE_COLUMNS}


# -- experiments.analysis: fairness ------------------------------------------------------------

def flow(fid, rate_mbps=None, fct_s=None, bytes_received=None, burst_after_s=None):
    """A flows.csv row; with ``rate_mbps``, receiver samples every 10 ms at that rate (ten times
    faster after ``burst_after_s``)."""
    samples = []
    if rate_mbps is not None:
        b = 0.0
        for t in np.arange(0.01, fct_s + 1e-9, 0.01):
            b += rate_mbps * 1e6 / 8 * 0.01 * (10 if burst_after_s and t > burst_after_s else 1)
            samples.append((float(t), b))
        bytes_received = int(b)
    return {"flow_id": fid, "fct_s": fct_s, "bytes_received": bytes_received, "complete": bytes_received is not None,
            "_samples": samples}


def test_fairness_over_the_window_where_all_flows_run():
    # time-limited flows 0-10 s at 1 and 3 Mbit/s; the 1 Mbit/s one bursts after the window ends
    flows = [flow(0, 1.0, 10.0, burst_after_s=8.5), flow(1, 3.0, 10.0)]
    window = analysis.measurement_window(flows, fake_run(duration_s=8.0))
    assert window == (2.0, 8.0, "all flows running")
    fa = analysis.fairness_summary(flows, window)
    assert fa["how"] == "all_flows_window" and fa["window_s"] == [2.0, 8.0]
    assert fa["rate_mbps"]["min"] == pytest.approx(1.0, rel=1e-3)
    assert fa["rate_mbps"]["max"] == pytest.approx(3.0, rel=1e-3)
    assert fa["jain_index"] == pytest.approx(0.8, rel=1e-3) and fa["n_flows"] == 2


def test_fairness_of_short_responses_is_bytes_over_fct():
    # incast responses done before the 2 s warm-up ends: each flow's bytes over its own FCT
    equal = [flow(i, bytes_received=125_000, fct_s=0.5) for i in range(4)]
    window = analysis.measurement_window(equal, fake_run())
    assert window[2] == "whole run"
    fa = analysis.fairness_summary(equal, window)
    assert fa["how"] == "bytes_over_fct" and fa["window_s"] is None
    assert fa["jain_index"] == pytest.approx(1.0) and fa["rate_mbps"]["median"] == pytest.approx(2.0)
    # one of four hogs the port, three delivered nothing: 1/N; a flow without a record is left out
    hog = [flow(0, bytes_received=500_000, fct_s=0.5)] + [
        {"flow_id": i, "fct_s": None, "bytes_received": 0, "complete": False} for i in (1, 2, 3)] + [
        {"flow_id": 4, "fct_s": None, "bytes_received": None, "complete": False}]
    fa = analysis.fairness_summary(hog, analysis.measurement_window(hog, fake_run()))
    assert fa["jain_index"] == pytest.approx(1 / 4) and fa["n_flows"] == 4 and fa["flows_left_out"] == 1
    assert fa["rate_mbps"] == {"min": 0.0, "median": 0.0, "max": pytest.approx(8.0)}
    nothing = analysis.fairness_summary(hog[1:], (0.0, 0.0, "whole run"))
    assert nothing["jain_index"] is None and nothing["n_flows"] == 3
    assert "no flow delivered" in analysis._fairness_clause(nothing)
    assert analysis._fairness_clause(None) == "fairness: not measured"
    assert analysis._fairness_clause(fa).startswith("Jain's index 0.250 over 4 flows")


# -- experiments.plot: the CDF plots -----------------------------------------------------------

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture()
def kept_figures(monkeypatch):
    """The figures the plots draw, kept open (plot closes each after saving) for inspection."""
    figs, close = [], plt.close
    monkeypatch.setattr(plot.plt, "close", figs.append)
    yield figs
    for f in figs:
        close(f)


def synthetic_summary(fcts, ecn=None, buffer_packets=100):
    return {"scenario": "synthetic", "pattern": "permutation", "datapath": "user",
            "flows": {"per_flow": [{"flow_id": i, "fct_s": f, "complete": f is not None} for i, f in enumerate(fcts)],
                      "fct_max_s": max(f for f in fcts if f is not None)},
            "bottleneck": {"intf": "s1-eth1", "peer": "h1", "buffer_packets": buffer_packets, "buffer_bytes": None,
                           "queue_window_s": [0.0, 5.0]},
            "ecn": ecn or {}}


def test_queue_cdf_png_with_the_thresholds_and_the_buffer_as_vertical_lines(tmp_path, kept_figures):
    t = np.arange(0, 6, 0.02)
    samples = {"s1-eth1": port_samples(t, np.minimum(t * 20, 100)), "s1-eth2": port_samples(t, t % 3),
               "s1-eth3": port_samples(t, np.zeros(len(t)))}
    summary = synthetic_summary([1.0, 2.0], ecn={"bottleneck_kmin_kmax_bytes": [20 * 1514, 60 * 1514]})
    path = plot.plot_queue_cdf(tmp_path, summary, samples, sections=SECTIONS)
    assert path == tmp_path / "queue_cdf.png" and path.read_bytes()[:8] == PNG_MAGIC
    ax = kept_figures[-1].axes[0]
    labels = [ln.get_label() for ln in ax.get_lines()]
    # the bottleneck and the busy port drawn; the idle port left out
    assert any(lab.startswith("s1-eth1 -> h1 (bottleneck") for lab in labels)
    assert any(lab.startswith("s1-eth2") for lab in labels) and not any(lab.startswith("s1-eth3") for lab in labels)
    buffer = next(ln for ln in ax.get_lines() if ln.get_label().startswith("buffer"))
    assert list(buffer.get_xdata()) == [100, 100]
    # Kmin-Kmax as a band across the x axis, in packets
    assert any(p.get_label() == "ECN Kmin-Kmax 20-60 packets" for p in ax.patches)
    # samples after the window (t > 5 s) are left out: 251 samples in 0-5 s
    assert "251 samples" in ax.get_title()


def test_queue_cdf_marks_a_step_k(tmp_path, kept_figures):
    t = np.arange(0, 6, 0.02)
    summary = synthetic_summary([1.0], ecn={"bottleneck_k_bytes": 30 * 1514})
    plot.plot_queue_cdf(tmp_path, summary, {"s1-eth1": port_samples(t, t * 10)}, sections=SECTIONS)
    k = next(ln for ln in kept_figures[-1].axes[0].get_lines() if ln.get_label().startswith("ECN K"))
    assert list(k.get_xdata()) == [30, 30]


def test_fct_cdf_png_log_x_only_beyond_a_decade(tmp_path, kept_figures):
    summary = synthetic_summary([0.5, 0.7, 0.9, None])
    path = plot.plot_fct_cdf(tmp_path, summary)
    assert path == tmp_path / "fct_cdf.png" and path.read_bytes()[:8] == PNG_MAGIC
    ax = kept_figures[-1].axes[0]
    assert ax.get_xscale() == "linear"
    assert any(ln.get_label() == "3 of 4 flows completed" for ln in ax.get_lines())
    plot.plot_fct_cdf(tmp_path, synthetic_summary([0.01, 0.5, 2.0]))
    assert kept_figures[-1].axes[0].get_xscale() == "log"


def test_fct_cdf_without_a_completed_flow_still_writes_a_png(tmp_path, kept_figures):
    summary = synthetic_summary([1.0])
    summary["flows"]["per_flow"] = [{"flow_id": 0, "fct_s": None, "complete": False}]
    assert plot.plot_fct_cdf(tmp_path, summary).read_bytes()[:8] == PNG_MAGIC


def test_rounds_csv_carries_each_rounds_jain_index():
    s = {"flows": {"congestion_control_on_live_flows": ["cubic"], "all_complete": True, "fct_median_s": 1.0,
                   "fct_p99_s": 2.0}, "hosts_tcp": [["cubic", 0]], "total_drops": 0,
         "fairness": {"jain_index": 0.8, "how": "bytes_over_fct"}}
    row = analysis.round_row(0, "drop-tail", s, sections=SECTIONS)
    assert (row["jain_index"], row["fairness_how"]) == (0.8, "bytes_over_fct")
    assert set(row) <= set(analysis.round_columns(SECTIONS))
    assert analysis.round_row(0, "old", {k: v for k, v in s.items() if k != "fairness"}, sections=SECTIONS)["jain_index"] is None


def test_a_stopped_rounds_window_ends_at_its_last_byte():
    # 20 s time-limited flows stopped at 5 s: each unfinished flow's fct_s is its last byte's time
    flows = [dict(flow(0, 4.0, 5.0), complete=False), dict(flow(1, 4.0, 5.0), complete=False)]
    sc = fake_run(duration_s=20.0, warmup_s=1.0)
    assert analysis.measurement_window(flows, sc) == (1.0, 20.0, "all flows running")     # as planned
    t_a, t_b, kind = analysis.measurement_window(flows, sc, stopped=True)
    assert (t_a, kind) == (1.0, "all flows running, to the stop") and t_b == pytest.approx(5.0)
    fa = analysis.fairness_summary(flows, (t_a, t_b, kind))
    assert fa["how"] == "all_flows_window" and fa["rate_mbps"]["median"] == pytest.approx(4.0, rel=1e-2)
    # arrivals planned past the stop never came: the window ends at the stop, not the last arrival
    arriving = [dict(flow(i, 4.0, 1.0), start_s=float(i), complete=i < 4) for i in range(6)] + [
        {"flow_id": 9, "fct_s": None, "bytes_received": None, "complete": False, "start_s": 3977.6}]
    assert analysis.measurement_window(arriving, sc)[1] == pytest.approx(3977.6)
    assert analysis.measurement_window(arriving, sc, stopped=True) == (1.0, 6.0, "arrivals, to the stop")
    # a stop after the planned end changes nothing
    done = [flow(0, 4.0, 5.0), flow(1, 4.0, 5.0)]
    assert analysis.measurement_window(done, fake_run(duration_s=4.0, warmup_s=1.0), stopped=True) == \
        (1.0, 4.0, "all flows running")
