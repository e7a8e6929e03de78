"""Gradient compressors (common.compression): wire bytes and ratios, each one's error bound on
real arrays, and top-k's error feedback carrying what it did not send."""
import numpy as np
import pytest

from common import compression as Z


def _grad(n, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(n) * scale).astype(np.float32)


@pytest.mark.parametrize("name,ratio", [("none", 1.0), ("fp16", 2.0), ("int8", 4 * 1000 / 1004), ("topk", 4000 / (8 * 63))])   # topk: k = ceil(1000 / 16) = 63 pairs of 8 bytes
def test_wire_bytes_and_ratio(name, ratio):
    c = Z.make(name)
    x = _grad(1000)
    data = c.encode(x, key="b0")
    assert len(data) == c.wire_bytes(1000)
    assert c.ratio(1000) == pytest.approx(ratio)


@pytest.mark.parametrize("name", ["none", "fp16", "int8"])
@pytest.mark.parametrize("scale", [1e-6, 1e-2, 1.0, 300.0])
def test_decoded_within_the_bound_on_every_element(name, scale):
    c = Z.make(name)
    for seed in range(5):
        x = _grad(4097, seed, scale)
        err = np.abs(c.decode(c.encode(x), len(x)).astype(np.float64) - x)
        assert np.all(err <= c.error_bound(x)), (name, scale, float(np.max(err - c.error_bound(x))))


def test_int8_error_is_within_half_a_step_and_uses_it():
    x = _grad(10000, 3)
    c = Z.Int8()
    s = c.scale(x)
    err = np.abs(c.decode(c.encode(x), len(x)) - x)
    assert np.max(err) <= s / 2 * (1 + 1e-6)
    assert np.max(err) > s / 2 * 0.9        # the bound is tight, not loose


def test_fp16_refuses_what_does_not_fit():
    with pytest.raises(ValueError, match="does not fit float16"):
        Z.Fp16().encode(np.array([1e5], dtype=np.float32))


def test_topk_sends_the_largest_and_carries_the_rest():
    c = Z.TopK(ratio=4)
    x = np.array([0.1, -5, 0.2, 3, 0, 0, 0.05, -0.3], dtype=np.float32)     # k = ceil(8 / 8) = 1
    got = c.decode(c.encode(x, key="b"), len(x))
    assert got.tolist() == [0, -5, 0, 0, 0, 0, 0, 0]
    assert np.array_equal(c.residual["b"], np.where(got != 0, 0, x))


def test_topk_error_feedback_loses_nothing_over_rounds():
    c = Z.TopK(ratio=16)
    total_in = np.zeros(2000, dtype=np.float64)
    total_out = np.zeros(2000, dtype=np.float64)
    for t in range(50):
        x = _grad(2000, 100 + t)
        total_in += x
        total_out += c.decode(c.encode(x, key=("bucket", 3)), len(x))
    # what was not sent is in the residual, not lost (float32 rounding of the running sums aside)
    np.testing.assert_allclose(total_out + c.residual[("bucket", 3)], total_in, atol=1e-4)
    # and every element was sent at some point: the residual stays bounded, not growing with t
    assert np.max(np.abs(c.residual[("bucket", 3)])) < 50 * 4


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="unknown compressor"):
        Z.make("zip")
    with pytest.raises(ValueError, match="fixed ratio"):
        Z.make("fp16", ratio=3)
    with pytest.raises(ValueError, match="ratio must be > 1"):
        Z.TopK(1)
    with pytest.raises(ValueError, match="1-D float32"):
        Z.Int8().encode(np.zeros(3))
    with pytest.raises(ValueError, match="NaN"):
        Z.Fp16().encode(np.array([np.nan], dtype=np.float32))
    with pytest.raises(ValueError, match="expected"):
        Z.Int8().decode(b"123", 10)
