"""DCQCN's long flows settle at the fluid model's fixed point: the shipped long-flow scenario
(experiments/scenarios/dcqcn-long-flows.yaml, time_scale 400) cut to one round of four 6 MB flows
into h1's 10 Mbit/s port, through the real CLI. Over the second half of the time all four ran
(roce.fluid_fixed_point.settled), the port stays busy and its queue sits between Kmin and Kmax
most of the time; the model's q* is printed beside the measured median (a prediction, not a
bound: the model has no feedback delay and no pacer bursts)."""
import json

import pytest
import yaml

from .conftest import ROOT, assert_clean, run_accepting_cpu_shortfall

pytestmark = pytest.mark.lane("host", reason="the emulated CPU cannot keep a 10 Mbit/s RoCE port busy; "
                                             "the VM lane runs DCQCN in test_roce.py at 5 Mbit/s")


#: Bytes each of the four senders sends: 6 MB, about 19 s of the port shared four ways (10 MB, 32 s,
#: until 2026-12-07; the second half of either is far past DCQCN's convergence)
RESPONSE_BYTES = 6_000_000


def test_four_long_dcqcn_flows_keep_the_port_busy_and_the_queue_in_the_band(tmp_path, figure):
    sc = yaml.safe_load((ROOT / "experiments/scenarios/dcqcn-long-flows.yaml").read_text())
    sc["rounds"] = [{"name": "n4", "traffic": {"senders": 4}}]
    sc["traffic"]["response_bytes"] = RESPONSE_BYTES
    path = tmp_path / "dcqcn-n4.yaml"
    path.write_text(yaml.safe_dump(sc))
    results = tmp_path / "r"
    # a test of DCQCN's queue, not of the shapers' timing: a port's rate shortfall under a busy
    # host is accepted (and printed); the utilisation bound below still holds the port to its rate
    _, top = run_accepting_cpu_shortfall(path, results, timeout=400)
    summary = json.loads((top / "rounds" / "01-n4" / "summary.json").read_text())
    roce = summary["roce"]
    assert roce["delivered_exactly_once"], roce
    fp = roce["fluid_fixed_point"]
    st = fp["settled"]
    print(f"q* {fp['queue_packets']:.1f} pkts; second half {st['from_s']:.1f}-{st['to_s']:.1f} s: {st}")
    assert fp["n_flows"] == 4 and fp["port"] == "leaf1-eth1" and not fp["above_kmax"], fp
    assert st["samples"] > 1000, st
    # calibrated (10 runs beside a CPU-heavy process, 2026-12-03, 40 Mbit/s uplinks): utilisation
    # 0.9868 / 0.9977 / 0.9991 (1-in-1000 bound 0.978), in the band 0.879 / 0.952 / 1.0 (bound
    # 0.74), median over q* 1.23 / 2.45 / 3.80; the bounds are the issue's: a busy port, the band
    # most of the time
    # The port's busy share is DCQCN's (its queue never ran dry); the rate its shaper kept while
    # frames waited is the host's. Where the self-check accepted this port's rate shortfall (a host
    # short of CPU: on CI the hypervisor took up to 1.1 cores a second), the bound is on the
    # utilisation over that rate; with a shaper at its rate both are the same figure. Measured
    # (make test-repeat N=10 K=test_four_long_dcqcn_flows, beside a busy loop, 2026-12-06): 10 of 10
    # passed, no run's port short of its rate, so both figures 0.9908 / 0.9984 / 0.999 (1-in-1000
    # bound 0.986); the divided figure was seen only on CI's stolen CPU, not measured here.
    # With 6 MB flows (make test-repeat N=10 K=test_four_long_dcqcn_flows, beside a busy loop,
    # 2026-12-07): 10 of 10 passed in 31-33 s (10 MB: about 45 s); utilisation 0.9967 / 0.9985 /
    # 0.9998 (1-in-1000 bound 0.993), in the band 0.9145 / 0.960 / 1.0 (bound 0.84), median over
    # q* 1.10 / 1.23 / 2.09; every second half 2000 or more samples
    port = summary["fidelity"]["serialisation"]["ports"].get(fp["port"], {})
    shaper = port.get("rate_share_backlogged") if any(
        line.startswith(f"{fp['port']}: sent ") for line in summary["fidelity"]["serialisation"]["failures"]) else None
    busy = st["utilisation"] / shaper if shaper else st["utilisation"]
    print(f"utilisation {st['utilisation']:.4f}; shaper's share while backlogged "
          f"{port.get('rate_share_backlogged')} ({'accepted shortfall' if shaper else 'not short'})")
    figure("utilisation", st["utilisation"])
    assert figure("utilisation_over_shaper_rate", busy) >= 0.95, (st, port)
    assert figure("in_band_share", st["in_band_share"]) >= 0.5, st
    figure("median_over_q_star", st["median_packets"] / fp["queue_packets"])
    assert_clean(str(top))
