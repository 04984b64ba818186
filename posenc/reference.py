"""Pure-NumPy twins of posenc's kernels: readable, slow, and the test oracle.

Each function has the signature of its fast counterpart and computes the
formula in the most direct way, in float64, rounding once at the end.  They
do not check their arguments beyond what NumPy does.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

# the reference reads NumPy arrays and plain dicts only
_Params = Dict[str, Any]
_Scaling = Optional[Mapping[str, Any]]
_Frequencies = Tuple[ArrayLike, float]


def _positions(positions: ArrayLike) -> NDArray[np.float64]:
    arr = np.asarray(positions)
    if arr.ndim == 0 and arr.dtype.kind in "iu":  # a length: int, 0-d integer array or tensor
        return np.arange(int(arr), dtype=np.float64)
    return arr.astype(np.float64)


def sinusoid(
    positions: ArrayLike,
    dim: int,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    dtype: Optional[DTypeLike] = None,
    out: Optional[NDArray[Any]] = None,
) -> NDArray[Any]:
    """PE[p, 2i] = sin(p * w_i), PE[p, 2i+1] = cos(p * w_i), w_i = 1 / base**(2i/dim)."""
    p = _positions(positions)
    inv_freq = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    angle = p[..., None] * inv_freq
    sin, cos = np.sin(angle), np.cos(angle)
    if layout == "interleaved":
        table = np.stack([sin, cos], axis=-1).reshape(p.shape + (dim,))
    else:
        table = np.concatenate([sin, cos], axis=-1)
    if out is None:
        return table.astype(dtype or np.float32)
    out[...] = table
    return out


# ---------------------------------------------------------------- rotary (RoPE)
#
# A second, independent reading of the RoPE families: written per pair with
# plain floats from the formulas (the library's posenc.rope_scaling uses
# array expressions), so that the tests compare two readings.


def _rope_theta(i: Any, dim: int, base: float) -> Any:
    return base ** (-2.0 * i / dim)


def _rope_default(dim: int, base: float, p: _Params, seq_len: Optional[int]) -> _Frequencies:
    return [_rope_theta(i, dim, base) for i in range(dim // 2)], 1.0


def _rope_linear(dim: int, base: float, p: _Params, seq_len: Optional[int]) -> _Frequencies:
    return [_rope_theta(i, dim, base) / p["factor"] for i in range(dim // 2)], 1.0


def _rope_dynamic(dim: int, base: float, p: _Params, seq_len: Optional[int]) -> _Frequencies:
    trained = p.get("max_position_embeddings") or p["original_max_position_embeddings"]
    n = trained if seq_len is None or seq_len < trained else seq_len
    s = p["factor"]
    grown = base * (s * n / trained - s + 1) ** (dim / (dim - 2))
    return [_rope_theta(i, dim, grown) for i in range(dim // 2)], 1.0


def _rope_ntk_alpha(dim: int, base: float, p: _Params, seq_len: Optional[int]) -> _Frequencies:
    return [
        _rope_theta(i, dim, base * p["alpha"] ** (dim / (dim - 2))) for i in range(dim // 2)
    ], 1.0


def _rope_yarn(dim: int, base: float, p: _Params, seq_len: Optional[int]) -> _Frequencies:
    trained = p["original_max_position_embeddings"]
    s = p.get("factor") or p["max_position_embeddings"] / trained

    def m(mu: float) -> float:
        return 0.1 * mu * np.log(s) + 1.0 if s > 1 else 1.0

    if p.get("attention_factor") is not None:
        attention = p["attention_factor"]
    elif p.get("mscale") and p.get("mscale_all_dim"):
        attention = m(p["mscale"]) / m(p["mscale_all_dim"])
    else:
        attention = m(1.0)

    # the pair index that turns `rotations` times in `trained`
    def dim_turning(rotations: float) -> float:
        return dim * np.log(trained / (2 * np.pi * rotations)) / (2 * np.log(base))

    lo, hi = dim_turning(p.get("beta_fast") or 32), dim_turning(p.get("beta_slow") or 1)
    if p.get("truncate", True):
        lo, hi = np.floor(lo), np.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if hi == lo:
        hi = hi + 0.001
    out = []
    for i in range(dim // 2):
        gamma = min(max((i - lo) / (hi - lo), 0.0), 1.0)  # 0: keep, 1: interpolate
        out.append(_rope_theta(i, dim, base) * (1.0 - gamma + gamma / s))
    return out, attention


def _rope_llama3(dim: int, base: float, p: _Params, seq_len: Optional[int]) -> _Frequencies:
    s, trained = p["factor"], p["original_max_position_embeddings"]
    lo_f, hi_f = p["low_freq_factor"], p["high_freq_factor"]
    out = []
    for i in range(dim // 2):
        theta = _rope_theta(i, dim, base)
        turns = trained * theta / (2 * np.pi)  # rotations over the trained length
        if turns > hi_f:
            out.append(theta)
        elif turns < lo_f:
            out.append(theta / s)
        else:
            mu = (turns - lo_f) / (hi_f - lo_f)
            out.append((1 - mu) * theta / s + mu * theta)
    return out, 1.0


def _rope_longrope(dim: int, base: float, p: _Params, seq_len: Optional[int]) -> _Frequencies:
    trained = p["original_max_position_embeddings"]
    lam = p["long_factor"] if seq_len is not None and seq_len > trained else p["short_factor"]
    if p.get("attention_factor") is not None:
        attention = p["attention_factor"]
    else:
        s = p.get("factor") or p["max_position_embeddings"] / trained
        attention = np.sqrt(1 + np.log(s) / np.log(trained)) if s > 1 else 1.0
    return [_rope_theta(i, dim, base) / lam[i] for i in range(dim // 2)], attention


def _rope_proportional(dim: int, base: float, p: _Params, seq_len: Optional[int]) -> _Frequencies:
    # the head's own frequencies for the first floor(fraction * dim / 2) pairs, angle 0 after
    fraction = p.get("partial_rotary_factor")
    fraction = 1.0 if fraction is None else fraction
    kept = int(np.floor(fraction * dim / 2))
    s = p.get("factor") or 1.0
    return [(_rope_theta(i, dim, base) if i < kept else 0.0) / s for i in range(dim // 2)], 1.0


_ROPE_FAMILIES = {
    "default": _rope_default,
    "linear": _rope_linear,
    "dynamic": _rope_dynamic,
    "ntk_alpha": _rope_ntk_alpha,
    "yarn": _rope_yarn,
    "llama3": _rope_llama3,
    "longrope": _rope_longrope,
    "proportional": _rope_proportional,
}


def _rope_resolve(dim: int, base: float, scaling: Any) -> Tuple[int, float, str, _Params]:
    p = dict(scaling or {})
    kind = p.get("rope_type") or p.get("type") or "default"
    if kind == "su" or (kind == "yarn" and "short_factor" in p):  # Phi-3's legacy names
        kind = "longrope"
    if kind == "dynamic" and p.get("alpha"):  # HunYuan
        kind = "ntk_alpha"
    if p.get("partial_rotary_factor") is not None and kind != "proportional":
        dim = int(dim * p["partial_rotary_factor"])
    if p.get("rope_theta") is not None:
        base = p["rope_theta"]
    return dim, base, kind, p


def rope_frequencies(
    dim: int,
    *,
    base: float = 10000.0,
    scaling: _Scaling = None,
    seq_len: Optional[int] = None,
) -> Tuple[NDArray[np.float64], float]:
    """theta_i = base**(-2i/dim) for each pair, rescaled by the family."""
    dim, base, kind, p = _rope_resolve(dim, base, scaling)
    inv_freq, attention = _ROPE_FAMILIES[kind](dim, base, p, seq_len)
    return np.array(inv_freq, dtype=np.float64), float(attention)


def _rope_seq_len(scaling: Any, pos: NDArray[Any]) -> Optional[int]:
    kind = _rope_resolve(2, 1.0, scaling)[2]
    if kind in ("dynamic", "longrope") and pos.size:
        return int(np.floor(pos.max())) + 1
    return None


def rope_cos_sin(
    positions: ArrayLike,
    dim: int,
    *,
    base: float = 10000.0,
    scaling: _Scaling = None,
    layout: str = "half",
    dtype: DTypeLike = "float32",
) -> Tuple[NDArray[Any], NDArray[Any]]:
    """cos/sin of positions[..., None] * theta, times the attention factor,
    each angle twice: as two halves, or twice in a row."""
    p = _positions(positions)
    inv_freq, attention = rope_frequencies(
        dim, base=base, scaling=scaling, seq_len=_rope_seq_len(scaling, p)
    )
    angle = p[..., None] * inv_freq
    cos, sin = np.cos(angle) * attention, np.sin(angle) * attention
    if layout == "half":
        cos, sin = np.concatenate([cos, cos], axis=-1), np.concatenate([sin, sin], axis=-1)
    else:
        cos, sin = np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1)
    return cos.astype(dtype), sin.astype(dtype)


def apply_rope(
    x: ArrayLike,
    positions: Optional[ArrayLike] = None,
    *,
    base: float = 10000.0,
    scaling: _Scaling = None,
    layout: str = "half",
    rotary_dim: Optional[int] = None,
    offset: float = 0,
    seq_axis: int = -2,
    inverse: bool = False,
    out: Optional[NDArray[Any]] = None,
) -> NDArray[Any]:
    """x * cos + rotate(x) * sin on the first rotary_dim features, in float64,
    with rotate_half (GPT-NeoX) or rotate_every_two (GPT-J)."""
    x = np.asarray(x)
    x64 = x.astype(np.float64)
    dim = x.shape[-1]
    if rotary_dim is None:
        prf = (scaling or {}).get("partial_rotary_factor")
        whole = _rope_resolve(dim, base, scaling)[2] == "proportional"
        rotary_dim = int(dim * prf) if prf is not None and not whole else dim
    if positions is None:
        axis = seq_axis % x.ndim
        pos = offset + np.arange(x.shape[axis], dtype=np.float64)
        pos = pos.reshape(pos.shape + (1,) * (x.ndim - 2 - axis))
    else:
        pos = np.asarray(positions, dtype=np.float64) + offset
        if 0 < pos.ndim < x.ndim - 1:  # last axis on seq_axis, leading ones on x's leading axes
            axis = seq_axis % x.ndim
            pos = np.expand_dims(
                pos, tuple(range(pos.ndim - 1, axis)) + tuple(range(axis + 1, x.ndim - 1))
            )
    unscaled = dict(scaling or {})
    if rotary_dim != dim:
        unscaled.pop("partial_rotary_factor", None)
    cos, sin = rope_cos_sin(
        pos, rotary_dim, base=base, scaling=unscaled, layout=layout, dtype=np.float64
    )
    if inverse:
        sin = -sin
    xr, rest = x64[..., :rotary_dim], x64[..., rotary_dim:]
    if layout == "half":
        h = rotary_dim // 2
        rotated = np.concatenate([-xr[..., h:], xr[..., :h]], axis=-1)
    else:
        rotated = np.stack([-xr[..., 1::2], xr[..., 0::2]], axis=-1).reshape(xr.shape)
    y = np.concatenate([xr * cos + rotated * sin, rest], axis=-1)
    if out is None:
        return y.astype(x.dtype.newbyteorder("="))
    out[...] = y
    return out


# ---------------------------------------------------------------- attention biases


def alibi_slopes(n_heads: int, *, max_bias: float = 8.0) -> NDArray[np.float64]:
    """Press et al.: 2 ** (-max_bias * (h+1) / n) for n a power of two; else those of
    the closest lower power of two c, then every other slope of 2c."""

    def power_of_two(n: int) -> List[float]:
        return [2.0 ** (-max_bias * (h + 1) / n) for h in range(n)]

    c = 1 << (n_heads.bit_length() - 1)
    slopes = power_of_two(c)
    if c < n_heads:
        slopes += power_of_two(2 * c)[0::2][: n_heads - c]
    return np.array(slopes)


def _add_or_return(
    bias: NDArray[Any],
    dtype: Optional[DTypeLike],
    scores: Optional[NDArray[Any]],
    out: Optional[NDArray[Any]],
) -> NDArray[Any]:
    """The bias as a new array of `dtype`, written into `out`, or added into `scores`."""
    if scores is not None:
        scores += bias.astype(scores.dtype)
        return scores
    if out is not None:
        out[...] = bias
        return out
    return bias.astype(dtype)


def _key_minus_query(q_len: int, k_len: int, q_offset: int) -> NDArray[np.int64]:
    """(q_len, k_len) int64: j - (q_offset + i)."""
    return np.arange(k_len)[None, :] - (q_offset + np.arange(q_len)[:, None])


def alibi_bias(
    n_heads: int,
    q_len: int,
    k_len: Optional[int] = None,
    *,
    slopes: Optional[ArrayLike] = None,
    max_bias: float = 8.0,
    causal: bool = True,
    q_offset: Optional[int] = None,
    dtype: Optional[DTypeLike] = None,
    scores: Optional[NDArray[Any]] = None,
    out: Optional[NDArray[Any]] = None,
) -> NDArray[Any]:
    """bias[h, i, j] = slope_h * (j - qpos) for j <= qpos, -inf after (causal),
    or -slope_h * |j - qpos|, with qpos = q_offset + i."""
    k_len = q_len if k_len is None else k_len
    q_offset = k_len - q_len if q_offset is None else q_offset
    if slopes is None:
        slopes = alibi_slopes(n_heads, max_bias=max_bias)
    slopes = np.asarray(slopes, dtype=np.float64)[:, None, None]
    rel = _key_minus_query(q_len, k_len, q_offset)
    if causal:
        bias = np.where(rel > 0, -np.inf, slopes * rel)
    else:
        bias = slopes * -np.abs(rel)
    return _add_or_return(bias, dtype or np.float32, scores, out)


def _log_bucket_exact(a: int, n: int, exact: int, max_distance: int) -> int:
    """floor(n ln(a / exact) / ln(max_distance / exact)) for one distance, in
    60-digit decimals, settled by integers when it is an integer itself."""
    with localcontext() as ctx:
        ctx.prec = 60
        v = n * (Decimal(a) / exact).ln() / (Decimal(max_distance) / exact).ln()
        k = int(v.to_integral_value())
        if abs(v - k) > Decimal(10) ** -40:
            return int(v.to_integral_value(rounding="ROUND_FLOOR"))
    # a**n vs exact**(n-k) * max_distance**k, exponents divided by gcd(k, n)
    g = math.gcd(k, n)
    if n // g <= 64 and a ** (n // g) == exact ** ((n - k) // g) * max_distance ** (k // g):
        return k
    return k if v > k else k - 1


def relative_position_bucket(
    relative_position: ArrayLike,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> NDArray[np.int64]:
    """T5's bucket of key_pos - query_pos: exact + floor(N ln(a / exact) /
    ln(max_distance / exact)) in exact arithmetic for a distance a past the
    exact buckets (float64, and decimals where float64 is too close to call)."""
    rel = np.asarray(relative_position, dtype=np.int64)
    bucket = np.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        bucket += (rel > 0) * num_buckets
        mag = [abs(int(r)) for r in rel.flat]
    else:
        mag = [max(-int(r), 0) for r in rel.flat]
    max_exact = num_buckets // 2
    if max_exact == 0:  # one bucket per direction
        return bucket
    n = num_buckets - max_exact
    a = np.maximum(np.array(mag, dtype=np.float64), max_exact)
    v = n * (np.log(a) - np.log(max_exact)) / (np.log(max_distance) - np.log(max_exact))
    steps = np.floor(np.minimum(v, n))
    for i in np.flatnonzero(np.abs(v - np.round(v)) < 1e-9 * np.maximum(v, 1.0)):
        if max_exact <= mag[i] < max_distance:
            steps[i] = _log_bucket_exact(mag[i], n, max_exact, max_distance)
    large = np.minimum(max_exact + steps.astype(np.int64), num_buckets - 1)
    small = np.array([min(m, max_exact) for m in mag], dtype=np.int64)
    return bucket + np.where(small < max_exact, small, large).reshape(rel.shape)


def t5_bias(
    table: ArrayLike,
    q_len: int,
    k_len: Optional[int] = None,
    *,
    bidirectional: bool = True,
    max_distance: int = 128,
    q_offset: int = 0,
    scores: Optional[NDArray[Any]] = None,
    out: Optional[NDArray[Any]] = None,
) -> NDArray[Any]:
    """bias[h, i, j] = table[bucket(j - (q_offset + i)), h]."""
    table = np.asarray(table)
    k_len = q_len if k_len is None else k_len
    buckets = relative_position_bucket(
        _key_minus_query(q_len, k_len, q_offset),
        bidirectional=bidirectional,
        num_buckets=table.shape[0],
        max_distance=max_distance,
    )
    bias = np.moveaxis(table[buckets], -1, 0)
    return _add_or_return(bias, table.dtype, scores, out)


def relative_positions(
    q_len: int,
    k_len: Optional[int] = None,
    *,
    max_distance: Optional[int] = None,
    q_offset: int = 0,
) -> NDArray[np.int64]:
    """clip(j - (q_offset + i), -max_distance, max_distance)."""
    k_len = q_len if k_len is None else k_len
    rel = _key_minus_query(q_len, k_len, q_offset)
    if max_distance is not None:
        rel = np.clip(rel, -max_distance, max_distance)
    return rel.astype(np.int64)

