"""Gradient compression: what goes on the wire instead of a float32 gradient, and what it costs.

Each compressor turns a 1-D float32 array of n elements into bytes (:meth:`Compressor.encode`)
and back (:meth:`Compressor.decode`); :meth:`Compressor.wire_bytes` says how many bytes that is,
so the ratio against 4n bytes is exact, and :meth:`Compressor.error_bound` how far a decoded
element may be from the encoded one.

- ``none``: the float32 bytes (ratio 1, no error).
- ``fp16``: IEEE half precision (ratio 2). Rounding to nearest: error at most 2^-11 of the
  value's magnitude in the normal range (|x| >= 2^-14), at most 2^-25 below it; magnitudes
  above 65504 do not fit and are refused (mixed-precision training scales the loss to stay
  inside; Micikevicius et al., "Mixed precision training", ICLR 2018).
- ``int8``: linear quantisation with one float32 scale per array (ratio 4n / (n + 4), about 4):
  scale = max|x| / 127, q = round(x / scale); error at most scale / 2 per element (as in
  8-bit gradient schemes, e.g. Dettmers, "8-bit approximations for parallelism in deep
  learning", ICLR 2016, here with a plain linear code).
- ``topk``: top-k sparsification with error feedback (Stich, Cordonnier and Jaggi,
  "Sparsified SGD with memory", NeurIPS 2018; Lin et al., "Deep gradient compression", ICLR
  2018): the k elements of largest magnitude of x plus the residual left by earlier rounds
  go out as (index, value) pairs, 8 bytes each; what was not sent becomes the new residual,
  kept per ``key`` (one bucket's slot), so nothing is lost, only delayed: over any number of
  rounds, sum(decoded) + residual = sum(inputs). k = ceil(n / (2 ratio)) for a target ratio.
"""
from __future__ import annotations

import math

import numpy as np

#: Largest finite float16.
FP16_MAX = 65504.0


def _check(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 1 or x.dtype != np.float32:
        raise ValueError(f"a 1-D float32 array, not {x.dtype} of shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("the array has NaN or infinite values")
    return x


class Compressor:
    """No compression: the float32 bytes. The base of the others (module docstring)."""
    name = "none"
    #: True for a compressor whose constructor takes its target ``ratio``.
    TAKES_RATIO = False

    def wire_bytes(self, n: int) -> int:
        """Bytes on the wire for ``n`` elements: 4n."""
        return 4 * n

    def ratio(self, n: int) -> float:
        """4n / :meth:`wire_bytes`."""
        return 4 * n / self.wire_bytes(n)

    def encode(self, x: np.ndarray, key=None) -> bytes:
        """``x``'s wire bytes (``key``: the slot of a stateful compressor; ignored here).
        Raises ValueError for an array that is not 1-D float32 or has NaN/inf."""
        return _check(x).tobytes()

    def decode(self, data: bytes, n: int) -> np.ndarray:
        """The float32 array of ``n`` elements that ``data`` encodes. Raises ValueError for a
        length that does not match."""
        if len(data) != self.wire_bytes(n):
            raise ValueError(f"{len(data)} bytes for {n} elements; {self.wire_bytes(n)} expected")
        return np.frombuffer(data, dtype=np.float32).copy()

    def error_bound(self, x: np.ndarray) -> np.ndarray:
        """Per element, the most ``decode(encode(x))`` may differ from ``x``: zeros."""
        return np.zeros(len(x), dtype=np.float64)


class Fp16(Compressor):
    """IEEE half precision (module docstring). encode raises ValueError above 65504."""
    name = "fp16"

    def wire_bytes(self, n: int) -> int:
        """2n."""
        return 2 * n

    def encode(self, x: np.ndarray, key=None) -> bytes:
        """Half-precision bytes, little-endian."""
        x = _check(x)
        if len(x) and float(np.max(np.abs(x))) > FP16_MAX:
            raise ValueError(f"|x| up to {float(np.max(np.abs(x))):g} does not fit float16 (max {FP16_MAX:g})")
        return x.astype("<f2").tobytes()

    def decode(self, data: bytes, n: int) -> np.ndarray:
        """float32 from half-precision bytes."""
        if len(data) != self.wire_bytes(n):
            raise ValueError(f"{len(data)} bytes for {n} elements; {self.wire_bytes(n)} expected")
        return np.frombuffer(data, dtype="<f2").astype(np.float32)

    def error_bound(self, x: np.ndarray) -> np.ndarray:
        """|x| 2^-11 in the normal range, 2^-25 below it."""
        a = np.abs(np.asarray(x, dtype=np.float64))
        return np.where(a >= 2.0 ** -14, a * 2.0 ** -11, 2.0 ** -25)


class Int8(Compressor):
    """Linear int8 with one float32 scale (module docstring)."""
    name = "int8"

    def wire_bytes(self, n: int) -> int:
        """n + 4 (the scale)."""
        return n + 4

    @staticmethod
    def scale(x: np.ndarray) -> float:
        """max|x| / 127 as float32 (1.0 for an all-zero array)."""
        m = float(np.max(np.abs(x))) if len(x) else 0.0
        return float(np.float32(m / 127.0)) if m > 0 else 1.0

    def encode(self, x: np.ndarray, key=None) -> bytes:
        """The scale (float32, little-endian), then round(x / scale) as int8."""
        x = _check(x)
        s = self.scale(x)
        q = np.clip(np.rint(x.astype(np.float64) / s), -127, 127).astype(np.int8)
        return np.float32(s).astype("<f4").tobytes() + q.tobytes()

    def decode(self, data: bytes, n: int) -> np.ndarray:
        """q x scale as float32."""
        if len(data) != self.wire_bytes(n):
            raise ValueError(f"{len(data)} bytes for {n} elements; {self.wire_bytes(n)} expected")
        s = float(np.frombuffer(data[:4], dtype="<f4")[0])
        return (np.frombuffer(data[4:], dtype=np.int8).astype(np.float64) * s).astype(np.float32)

    def error_bound(self, x: np.ndarray) -> np.ndarray:
        """scale / 2 for every element (plus float32 rounding of the product: 2^-24 of |x|)."""
        s = self.scale(np.asarray(x))
        return np.full(len(x), s / 2) + np.abs(np.asarray(x, dtype=np.float64)) * 2.0 ** -24


class TopK(Compressor):
    """Top-k sparsification with error feedback (module docstring).

    Args:
        ratio: the target compression ratio (> 1): k = ceil(n / (2 ratio)).

    Raises:
        ValueError: a ratio that is not above 1.
    """
    name = "topk"
    TAKES_RATIO = True

    def __init__(self, ratio: float = 8.0):
        if not ratio > 1:
            raise ValueError(f"topk ratio must be > 1, not {ratio}")
        self.target = float(ratio)
        self.residual: dict = {}

    def k(self, n: int) -> int:
        """Elements sent of ``n``: ceil(n / (2 ratio)), at least 1, at most n."""
        return max(1, min(n, math.ceil(n / (2 * self.target))))

    def wire_bytes(self, n: int) -> int:
        """8k: a uint32 index and a float32 value per element sent."""
        return 8 * self.k(n)

    def encode(self, x: np.ndarray, key=None) -> bytes:
        """The k largest of x + residual[key], as indices then values; the rest becomes the new
        residual[key]. Raises ValueError for a residual of another length under that key."""
        x = _check(x)
        y = x.astype(np.float32).copy()
        r = self.residual.get(key)
        if r is not None:
            if len(r) != len(x):
                raise ValueError(f"residual of {len(r)} elements under key {key!r} for an array of {len(x)}")
            y += r
        k = self.k(len(y))
        idx = np.sort(np.argpartition(np.abs(y), len(y) - k)[len(y) - k:]).astype("<u4")
        vals = y[idx].astype("<f4")
        rest = y.copy()
        rest[idx] = 0
        self.residual[key] = rest
        return idx.tobytes() + vals.tobytes()

    def decode(self, data: bytes, n: int) -> np.ndarray:
        """Zeros with the sent values at their indices."""
        if len(data) != self.wire_bytes(n):
            raise ValueError(f"{len(data)} bytes for {n} elements; {self.wire_bytes(n)} expected")
        k = self.k(n)
        idx = np.frombuffer(data[:4 * k], dtype="<u4")
        out = np.zeros(n, dtype=np.float32)
        out[idx] = np.frombuffer(data[4 * k:], dtype="<f4")
        return out

    def error_bound(self, x: np.ndarray) -> np.ndarray:
        """Without feedback, an element not sent is lost whole: |x| (the residual carries it)."""
        return np.abs(np.asarray(x, dtype=np.float64))


#: name -> class; ``topk`` takes its ratio.
COMPRESSORS = {c.name: c for c in (Compressor, Fp16, Int8, TopK)}


def make(name: str, ratio: float | None = None) -> Compressor:
    """A compressor by name (``ratio`` for one that takes it: ``topk``). Raises ValueError for an
    unknown name or a ratio given to a compressor with a fixed one."""
    if name not in COMPRESSORS:
        raise ValueError(f"unknown compressor {name!r}; one of {', '.join(COMPRESSORS)}")
    cls = COMPRESSORS[name]
    if cls.TAKES_RATIO:
        return cls() if ratio is None else cls(ratio)
    if ratio is not None:
        raise ValueError(f"{name} has a fixed ratio; only {', '.join(k for k, c in COMPRESSORS.items() if c.TAKES_RATIO)} "
                         "takes one")
    return cls()
