"""Link propagation delay: measured on the stock kernel (netem, the kernel datapath); refused,
naming the key, where the kernel or the datapath cannot delay."""
import json
import os

import pytest

from tests.conftest import kernel_features

from .conftest import NO_PLOTS, assert_clean, run_cli, small_scenario

#: 20 ms per link: the VM lane's emulated CPU adds about 3 ms of processing to a 4-link round trip
#: (measured: a small ping took 1.08 x the configured 40 ms at 5 ms per link), 2% of 160 ms.
DELAY_US = 20000


def _no_delay_lines_left():
    assert not [n for n in os.listdir("/sys/class/net") if n.startswith("fldelay")]


def _can_delay() -> bool:
    feats, _ = kernel_features()
    return "qdisc:netem" in feats and "ovs_kernel_datapath" in feats


def test_delay_where_the_kernel_cannot_is_refused_naming_the_key_and_starts_nothing(tmp_path):
    if _can_delay():
        pytest.skip("this kernel can delay: test_configured_delay_is_the_measured_round_trip runs instead")
    scenario = small_scenario(tmp_path, measurement=NO_PLOTS, links={"delay_us": DELAY_US})
    p = run_cli("run", str(scenario), "--results", str(tmp_path / "r"), timeout=120)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "fabriclab: links.delay_us: this kernel has no netem" in p.stderr, p.stderr
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())     # nothing started
    assert_clean(str(tmp_path))
    _no_delay_lines_left()


@pytest.mark.kernel("qdisc:netem", "ovs_kernel_datapath")
def test_configured_delay_is_the_measured_round_trip(tmp_path, figure):
    """20 ms on every link of a 2x2 Spine-Leaf: h3 -> h1 crosses 4 links, so the propagation round
    trip is 160 ms. A small ping sees that (plus microseconds); a full-frame ping adds at most one
    serialisation per hop each way (host NICs at 10 Mbit/s, uplinks at 40: 6.06 ms in all)."""
    scenario = small_scenario(tmp_path, measurement=NO_PLOTS, links={"delay_us": DELAY_US},
                              traffic={"response_bytes": 100_000, "timeout_s": 60})
    results = tmp_path / "r"
    p = run_cli("run", str(scenario), "--results", str(results), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    (top,) = [d for d in results.iterdir() if d.is_dir()]
    env = json.loads((top / "environment.json").read_text())
    links = env["links"]
    assert links["delay_us"] == DELAY_US and links["path_links"] == 4 and links["delay_lines"] == 2 * 8
    configured = links["configured_rtt_s"]
    assert configured == pytest.approx(8 * DELAY_US * 1e-6)
    serialisation = 2 * (2 * 1514 * 8 / 10e6 + 2 * 1514 * 8 / 40e6)
    small, full = env["scale"]["measured_rtt_s"], env["scale"]["measured_rtt_full_frame_s"]
    figure("small_ping_rtt_over_configured", small / configured)
    figure("full_frame_rtt_over_configured_plus_serialisation", full / (configured + serialisation))
    assert configured <= small <= 1.05 * configured, (small, configured)
    # a lone frame on an idle port leaves at once (HTB charges a frame after sending it), so an idle
    # full-frame ping adds at most the serialisations, not necessarily all of them
    assert configured <= full <= 1.05 * configured + 1.5 * serialisation, (full, configured)
    s = json.loads((top / "summary.json").read_text())
    assert s["flows"]["all_complete"], s["flows"]
    assert_clean(str(top))
    _no_delay_lines_left()
