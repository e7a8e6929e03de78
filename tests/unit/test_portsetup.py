"""Pure parts of the bulk port set-up and of the bring-up benchmark."""
import math

import pytest

from controller.portsetup import offload_bits


def test_offload_bits_cover_every_tcp_segmentation_variant_and_only_the_named_features():
    names = ["tx-scatter-gather", "tx-checksum-ipv4", "tx-checksum-ip-generic", "tx-tcp-segmentation",
             "tx-tcp-ecn-segmentation", "tx-tcp6-segmentation", "tx-tcp-accecn-segmentation",
             "tx-generic-segmentation", "rx-gro", "rx-checksum", "tx-udp-segmentation", "rx-gro-list"]
    bits = offload_bits(names)
    assert bits == {"rx": [9], "tx": [1, 2], "tso": [3, 4, 5, 6], "gso": [7], "gro": [8]}


def test_growth_exponent_of_a_power_law_and_of_too_few_shapes():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from bench_fabric_up import growth_exponent
    ports = [96, 324, 768]
    assert growth_exponent(ports, [0.01 * p ** 1.5 for p in ports]) == pytest.approx(1.5)
    assert growth_exponent(ports, [2.0 * p for p in ports]) == pytest.approx(1.0)
    assert growth_exponent([96, 96], [1.0, 2.0]) is None
    assert growth_exponent(ports, [1.0, 0.0, 2.0]) is None
    assert math.isfinite(growth_exponent([96, 768], [3.0, 20.0]))
