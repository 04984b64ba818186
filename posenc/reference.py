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

from ._dtypes import is_bfloat16
from ._reference_rounding import add_or_return as _add_or_return
from ._reference_rounding import cast as _cast
from ._reference_rounding import widened as _widen

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
        return _cast(table, dtype or np.float32)
    out[...] = _cast(table, out.dtype)
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


def _rope_axial(dim: int, base: float, p: _Params, seq_len: Optional[int]) -> _Frequencies:
    """The vision towers' axial RoPE: the frequencies of a rotary part of
    dim / 2, for the rows' pairs and again for the columns'."""
    ladder = _rope_theta(np.arange(dim // 4), dim // 2, base)
    return np.concatenate([ladder, ladder]), 1.0


def _rope_resonance(dim: int, base: float, p: _Params, seq_len: Optional[int]) -> _Frequencies:
    # each wavelength 2 pi / theta_i rounded to a whole number of positions
    return [
        2 * math.pi / round(2 * math.pi / _rope_theta(i, dim, base)) for i in range(dim // 2)
    ], 1.0


_ROPE_FAMILIES = {
    "default": _rope_default,
    "linear": _rope_linear,
    "dynamic": _rope_dynamic,
    "ntk_alpha": _rope_ntk_alpha,
    "yarn": _rope_yarn,
    "llama3": _rope_llama3,
    "longrope": _rope_longrope,
    "proportional": _rope_proportional,
    "resonance": _rope_resonance,
    "axial": _rope_axial,
}


def _rope_resolve(dim: int, base: float, scaling: Any) -> Tuple[int, float, str, _Params]:
    p = dict(scaling or {})
    kind = p.get("rope_type") or p.get("type") or "default"
    if kind == "su" or (kind == "yarn" and "short_factor" in p):  # Phi-3's legacy names
        kind = "longrope"
    if kind == "dynamic" and p.get("alpha"):  # HunYuan
        kind = "ntk_alpha"
    if kind == "mrope":  # Qwen2-VL's name for the default frequencies with sections
        kind = "default"
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


def _mrope_angles(angles: NDArray[Any], sections: Any, interleaved: bool) -> NDArray[Any]:
    """M-RoPE: angles (rows, ..., half) of each row's positions with the
    same frequencies, pieced together: the half split into the sections in
    turn, piece j taken from row j (Qwen2-VL); or interleaved (Qwen3-VL): row
    0's angles with every n-th pair from pair c on, sections[c] of them,
    replaced by row c's."""
    n = len(sections)
    if not interleaved:
        pieces = np.split(angles, np.cumsum(sections)[:-1], axis=-1)
        return np.concatenate([piece[j] for j, piece in enumerate(pieces)], axis=-1)
    out = angles[0].copy()
    for c in range(1, n):
        pairs = np.arange(c, angles.shape[-1], n)[: sections[c]]
        out[..., pairs] = angles[c][..., pairs]
    return out


def _axial_sections(axial: Any, half: int) -> List[int]:
    if isinstance(axial, (int, np.integer)):
        return [half // int(axial)] * int(axial)
    return [int(s) for s in axial]


def rope_cos_sin(
    positions: ArrayLike,
    dim: int,
    *,
    base: float = 10000.0,
    scaling: _Scaling = None,
    layout: str = "half",
    dtype: DTypeLike = "float32",
    mrope_section: Any = None,
    mrope_interleaved: Optional[bool] = None,
    axial: Any = None,
    full: bool = True,
    xpos: Optional[str] = None,
    xpos_scale_base: float = 512.0,
    xpos_centre: float = 0.0,
) -> Tuple[NDArray[Any], NDArray[Any]]:
    """cos/sin of positions[..., None] * theta, times the attention factor
    (and xPos's zeta ** (+-(p - centre) / scale_base)), each angle twice: as
    two halves, or twice in a row; once (the angles in order) if not full.
    M-RoPE (`mrope_section`, or scaling's) and axial RoPE (`axial`: axes, or
    the pairs of each) take positions with a leading axis of rows: M-RoPE's
    angles of the head's frequencies taken from the rows by section, axial
    RoPE's of each row with the frequencies of a rotary part of twice its
    pairs, one after the other."""
    p = _positions(positions)
    params = dict(scaling or {})
    if mrope_section is None:
        mrope_section = params.get("mrope_section")
    if mrope_interleaved is None:
        mrope_interleaved = bool(params.get("mrope_interleaved"))
    if axial is None and _rope_resolve(dim, base, scaling)[2] == "axial":
        axial = 2  # a vision tower's config: rows and columns
    if axial is not None:
        rotary, base, _, _ = _rope_resolve(dim, base, scaling)
        sections = _axial_sections(axial, rotary // 2)
        ladders = [rope_frequencies(2 * s, base=base)[0] for s in sections]
        angle = np.concatenate([p[c][..., None] * w for c, w in enumerate(ladders)], axis=-1)
        attention = 1.0
    else:
        inv_freq, attention = rope_frequencies(
            dim, base=base, scaling=scaling, seq_len=_rope_seq_len(scaling, p)
        )
        angle = p[..., None] * inv_freq
        if mrope_section is not None:
            angle = _mrope_angles(angle, list(mrope_section), bool(mrope_interleaved))
    cos, sin = np.cos(angle) * attention, np.sin(angle) * attention
    if xpos is not None:
        scale = _xpos_scale(p, xpos, xpos_scale_base, xpos_centre, 2 * len(inv_freq))
        cos, sin = cos * scale, sin * scale
    if not full:
        return _cast(cos, dtype), _cast(sin, dtype)
    if layout == "half":
        cos, sin = np.concatenate([cos, cos], axis=-1), np.concatenate([sin, sin], axis=-1)
    else:
        cos, sin = np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1)
    return _cast(cos, dtype), _cast(sin, dtype)


def _xpos_scale(p: NDArray[Any], role: str, scale_base: float, centre: float, r: int) -> Any:
    """Sun et al.'s per-pair scale zeta_i ** ((p - centre) / scale_base) at
    positions p (a trailing axis of r/2 pairs), zeta_i = (2i + 0.4 r) / (1.4 r);
    its inverse for keys."""
    zeta = (np.arange(0, r, 2, dtype=np.float64) + 0.4 * r) / (1.4 * r)
    power = (np.asarray(p, dtype=np.float64)[..., None] - centre) / scale_base
    scale = zeta**power
    return scale if role == "query" else 1.0 / scale


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
    mrope_section: Any = None,
    mrope_interleaved: Optional[bool] = None,
    axial: Any = None,
    xpos: Optional[str] = None,
    xpos_scale_base: float = 512.0,
    xpos_centre: float = 0.0,
) -> NDArray[Any]:
    """x * cos + rotate(x) * sin on the first rotary_dim features, in float64,
    with rotate_half (GPT-NeoX) or rotate_every_two (GPT-J); xPos scales cos
    and sin (divides them for the inverse).  "interleaved_to_half" (DeepSeek-V3)
    gathers the even then the odd features into the half layout and rotates
    that; its inverse rotates back in the half layout and scatters them to
    even and odd places.  M-RoPE and axial RoPE as rope_cos_sin makes them
    (positions with a leading axis of rows, the rest placed as for one row)."""
    x = np.asarray(x)
    x64 = _widen(x).astype(np.float64)
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
        rows = mrope_section is not None or axial is not None
        rows = rows or (scaling or {}).get("mrope_section") is not None
        rows = rows or _rope_resolve(dim, base, scaling)[2] == "axial"
        lead = int(rows)  # the rows' axis stays first
        if 0 < pos.ndim - lead < x.ndim - 1:  # last axis on seq_axis, leading ones on x's
            axis = seq_axis % x.ndim + lead
            pos = np.expand_dims(
                pos,
                tuple(range(pos.ndim - 1, axis)) + tuple(range(axis + 1, x.ndim - 1 + lead)),
            )
    unscaled = dict(scaling or {})
    if rotary_dim != dim:
        unscaled.pop("partial_rotary_factor", None)
    relayout = layout == "interleaved_to_half"
    cos, sin = rope_cos_sin(
        pos,
        rotary_dim,
        base=base,
        scaling=unscaled,
        layout="half" if relayout else layout,
        dtype=np.float64,
        mrope_section=mrope_section,
        mrope_interleaved=mrope_interleaved,
        axial=axial,
    )
    if xpos is not None:
        scale = _xpos_scale(pos, xpos, xpos_scale_base, xpos_centre, rotary_dim)
        if inverse:
            scale = 1.0 / scale
        scale = (
            np.repeat(scale, 2, axis=-1)
            if layout == "interleaved"
            else np.concatenate([scale, scale], axis=-1)
        )
        cos, sin = cos * scale, sin * scale
    if inverse:
        sin = -sin
    xr, rest = x64[..., :rotary_dim], x64[..., rotary_dim:]
    h = rotary_dim // 2
    if relayout and not inverse:  # the pairs (x[2i], x[2i+1]) gathered to (i, i + h)
        xr = np.concatenate([xr[..., 0::2], xr[..., 1::2]], axis=-1)
    if layout == "interleaved":
        rotated = np.stack([-xr[..., 1::2], xr[..., 0::2]], axis=-1).reshape(xr.shape)
    else:
        rotated = np.concatenate([-xr[..., h:], xr[..., :h]], axis=-1)
    yr = xr * cos + rotated * sin
    if relayout and inverse:  # scattered back to the interleaved places
        yr = np.stack([yr[..., :h], yr[..., h:]], axis=-1).reshape(yr.shape)
    y = np.concatenate([yr, rest], axis=-1)
    if out is None:
        return _cast(y, x.dtype.newbyteorder("="))
    out[...] = _cast(y, out.dtype)
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


def t5_bias_table_grad(
    grad: ArrayLike,
    num_buckets: int,
    *,
    bidirectional: bool = True,
    max_distance: int = 128,
    q_offset: int = 0,
) -> NDArray[Any]:
    """table_grad[b, h] = the sum of grad[..., h, i, j] over the (i, j) with
    bucket(j - (q_offset + i)) == b: every element added into its bucket by
    np.add.at, in float64; float64 for float64 grad, else float32."""
    grad = np.asarray(grad)
    g = _widen(grad).astype(np.float64)
    n_heads, q_len, k_len = g.shape[-3:]
    g = g.reshape((-1, n_heads, q_len, k_len))
    buckets = relative_position_bucket(
        _key_minus_query(q_len, k_len, q_offset),
        bidirectional=bidirectional,
        num_buckets=num_buckets,
        max_distance=max_distance,
    )
    heads = np.arange(n_heads)[:, None, None]
    out = np.zeros((num_buckets, n_heads))
    np.add.at(out, (np.broadcast_to(buckets, g.shape), np.broadcast_to(heads, g.shape)), g)
    return out.astype(np.float64 if grad.dtype == np.float64 else np.float32)


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


# ---------------------------------------------------------------- relative terms inside attention
#
# The products of queries (or keys) with the relative tables are formed as
# posenc.relative forms them (NumPy's matmul, in float32, or float64 for
# float64 inputs), so that the twins differ from the kernels only in the
# gather: here an index array of the full (q, k) grid and take_along_axis.


def _rel_work(*arrays):
    # by kind and size: a byte-swapped float64 ('>f8') is not == np.float64
    wide = any(np.asarray(a).dtype.kind == "f" and np.asarray(a).itemsize == 8 for a in arrays)
    return np.float64 if wide else np.float32


def _rel_gather(products, col, by_key):
    """products[..., i, col[i, j]] (or [..., j, col[i, j]]): the (q, k) grid."""
    if by_key:  # row j of the products for column j of the scores
        products = np.swapaxes(products, -1, -2)  # (..., width, k)
        return np.take_along_axis(
            products, np.broadcast_to(col, products.shape[:-2] + col.shape), -2
        )
    return np.take_along_axis(products, np.broadcast_to(col, products.shape[:-2] + col.shape), -1)


def _rel_result(terms, scores, dtype):
    """Each term rounded to the scores' dtype and added in turn; or their sum
    in the working precision, rounded once to dtype."""
    if scores is not None:
        for term in terms:
            if is_bfloat16(scores.dtype):  # the term rounded, the sum of the two rounded
                total = _widen(scores).astype(np.float64) + _widen(_cast(term, scores.dtype))
                scores[...] = _cast(total, scores.dtype)
            else:
                scores += term.astype(scores.dtype)
        return scores
    total = terms[0] + 0.0  # -0.0 + 0.0 is +0.0, as the kernel's sum onto zeros
    for term in terms[1:]:
        total = total + term
    return total.astype(dtype)


def xl_relative_table(
    q_len,
    k_len=None,
    dim=None,
    *,
    attn_type="bi",
    bi_data=False,
    clamp_len=None,
    base=10000.0,
    dtype=None,
):
    """Rows of distances k_len, k_len - 1, ... down to 1 - q_len ("bi") or 0
    ("uni"): [sin(d w), cos(d w)], w_i = base**(-2i/dim); bi_data: the
    forward table and the backward one (-d), stacked."""
    k_len = q_len if k_len is None else k_len
    d = np.arange(k_len, -q_len if attn_type == "bi" else -1, -1, dtype=np.float64)
    tables = [d, -d] if bi_data else [d]
    if clamp_len is not None and clamp_len > 0:
        tables = [np.clip(t, -clamp_len, clamp_len) for t in tables]
    out = [sinusoid(t, dim, base=base, layout="concat", dtype=dtype or np.float32) for t in tables]
    return np.stack(out) if bi_data else out[0]


def xl_position_term(q, r, *, bias=None, k_len=None, q_offset=None, causal=False, scores=None):
    """(q_i + v) . r[k_len - (qpos - j)], qpos = q_offset + i (future keys skipped if causal)."""
    q, r = np.asarray(q), np.asarray(r)
    q_len, rows = q.shape[-2], r.shape[-2]
    if k_len is None:
        k_len = scores.shape[-1] if scores is not None else rows - q_len
    q_offset = k_len - q_len if q_offset is None else q_offset
    work = _rel_work(q, r, *([] if scores is None else [scores]))
    qb = q.astype(work) + (0 if bias is None else np.asarray(bias, work)[:, None, :])
    products = qb @ np.swapaxes(r.astype(work), -1, -2)
    dist = -_key_minus_query(q_len, k_len, q_offset)  # query - key
    term = _rel_gather(products, np.clip(k_len - dist, 0, rows - 1), False)
    if causal:  # future keys: nothing added
        term = np.where(dist >= 0, term, 0.0 if scores is None else -0.0)
    return _rel_result([term], scores, np.result_type(q, r))


def xl_content_bias(k, bias, *, scores=None):
    """u . k_j for every query: (..., heads, 1, k_len)."""
    k = np.asarray(k)
    work = _rel_work(k, bias)
    term = np.einsum("hd,...hkd->...hk", np.asarray(bias, work), k.astype(work))[..., None, :]
    return _rel_result([term], scores, np.result_type(k, np.asarray(bias)))


def tener_relative_table(length, dim, *, base=10000.0, dtype=None):
    """Row t: position p = t - length, [sin(p w), cos(p w)], w_i = base**(-i/(dim/2 - 1))."""
    half = dim // 2
    w = np.array([base ** (-i / (half - 1)) for i in range(half)])
    p = np.arange(-length, length, dtype=np.float64)[:, None] * w
    return np.concatenate([np.sin(p), np.cos(p)], axis=1).astype(dtype or np.float32)


def tener_position_term(q, k, table, *, v=None, key_term=True, scores=None):
    """(q_i + v) . R[j - i] + k_j . R[i - j], R[p] at row M + p."""
    q, k, table = np.asarray(q), np.asarray(k), np.asarray(table)
    length, m = q.shape[-2], table.shape[0] // 2
    work = _rel_work(q, k, table, *([] if scores is None else [scores]))
    rel = _key_minus_query(length, length, 0)  # j - i
    Rt = table.astype(work).T
    qb = q.astype(work) + (0 if v is None else np.asarray(v, work)[:, None, :])
    terms = [_rel_gather(qb @ Rt, m + rel, False)]
    if key_term:
        terms.append(_rel_gather(k.astype(work) @ Rt, m - rel, True))
    return _rel_result(terms, scores, np.result_type(q, k, table))


def tener_scores(q, k, table, *, u=None, v=None, scale=False, key_term=True):
    """((q + u) . k + the position terms) / sqrt(head_dim) if scale."""
    q, k, table = np.asarray(q), np.asarray(k), np.asarray(table)
    work = _rel_work(q, k, table)
    qu = q.astype(work) + (0 if u is None else np.asarray(u, work)[:, None, :])
    scores = qu @ np.swapaxes(k.astype(work), -1, -2)
    tener_position_term(q, k, table, v=v, key_term=key_term, scores=scores)
    if scale and q.shape[-1]:  # an empty head dim: sums of no products, 0 (not 0 / 0)
        scores /= np.sqrt(work(q.shape[-1]))
    return scores.astype(np.result_type(q, k, table))


def deberta_log_bucket(relative_pos, bucket_size, max_position, *, precision="float32"):
    """d for |d| <= mid, else sign(d) (mid + ceil(ln(|d|/mid) / ln((max_position-1)/mid) (mid-1))),
    mid = bucket_size // 2; in float32 (as transformers), or float64 (as the authors)."""
    rel = np.asarray(relative_pos, dtype=np.int64)
    mid = bucket_size // 2
    a = np.where(np.abs(rel) < mid, mid - 1, np.abs(rel))
    if precision == "float32":
        f = np.float32
        ratio = (a.astype(f) / f(mid)).astype(np.float64)
        num = np.log(ratio).astype(f)
        den = f(math.log(f((max_position - 1) / mid)))
        log_pos = np.ceil(num / den * f(mid - 1)) + f(mid)
    else:
        log_pos = np.ceil(np.log(a / mid) / np.log((max_position - 1) / mid) * (mid - 1)) + mid
    near = rel.astype(np.float32).astype(np.int64) if precision == "float32" else rel
    return np.where(a <= mid, near, np.sign(rel) * log_pos.astype(np.int64)).astype(np.int64)


def deberta_relative_positions(
    q_len, k_len=None, *, bucket_size=-1, max_position=-1, q_offset=0, precision="float32"
):
    """(q_offset + i) - j, log-bucketed when both sizes are > 0."""
    k_len = q_len if k_len is None else k_len
    rel = -_key_minus_query(q_len, k_len, q_offset)
    if bucket_size > 0 and max_position > 0:
        rel = deberta_log_bucket(rel, bucket_size, max_position, precision=precision)
    return rel.astype(np.int64)


def deberta_attention_bias(
    q,
    k,
    pos_key=None,
    pos_query=None,
    *,
    position_buckets=-1,
    max_relative_positions=512,
    q_offset=0,
    scale_factor=None,
    precision="float32",
    scores=None,
):
    """c2p: q_i . pos_key[c(i, j)] / s, p2c: k_j . pos_query[c(i, j)] / s,
    c = clip(span + bucket(qpos - j), 0, 2 span - 1), s = sqrt(head_dim * scale_factor)."""
    q, k = np.asarray(q), np.asarray(k)
    span = position_buckets if position_buckets > 0 else max_relative_positions
    terms = [t for t in (pos_key, pos_query) if t is not None]
    scale_factor = 1 + len(terms) if scale_factor is None else scale_factor
    work = _rel_work(q, k, *terms, *([] if scores is None else [scores]))
    # an empty head dim: sums of no products, 0 whatever the scale (not 0 / 0)
    s = np.sqrt(work(q.shape[-1]) * work(scale_factor)) if q.shape[-1] else work(1)
    rel = deberta_relative_positions(
        q.shape[-2],
        k.shape[-2],
        bucket_size=position_buckets,
        max_position=max_relative_positions,
        q_offset=q_offset,
        precision=precision,
    )
    col = np.clip(rel + span, 0, 2 * span - 1)
    parts = []
    if pos_key is not None:
        c2p = q.astype(work) @ np.swapaxes(np.asarray(pos_key, work), -1, -2) / s
        parts.append(_rel_gather(c2p, col, False))
    if pos_query is not None:
        p2c = k.astype(work) @ np.swapaxes(np.asarray(pos_query, work), -1, -2) / s
        parts.append(_rel_gather(p2c, col, True))
    return _rel_result(parts, scores, np.result_type(q, k, *[np.asarray(t) for t in terms]))


def _shaw_col(q_len, k_len, q_offset, max_distance):
    if q_offset is None:
        q_offset = k_len - q_len
    return (
        np.clip(_key_minus_query(q_len, k_len, q_offset), -max_distance, max_distance)
        + max_distance
    )


def shaw_key_term(q, rel_keys, *, max_distance, k_len=None, q_offset=None, scores=None):
    """q_i . a^K[clip(j - qpos, -k, k) + k], qpos = q_offset + i (k_len - q_len by default)."""
    q, rel_keys = np.asarray(q), np.asarray(rel_keys)
    q_len = q.shape[-2]
    k_len = (scores.shape[-1] if scores is not None else q_len) if k_len is None else k_len
    work = _rel_work(q, rel_keys, *([] if scores is None else [scores]))
    products = q.astype(work) @ np.swapaxes(rel_keys.astype(work), -1, -2)
    term = _rel_gather(products, _shaw_col(q_len, k_len, q_offset, max_distance), False)
    return _rel_result([term], scores, np.result_type(q, rel_keys))


def shaw_value_term(weights, rel_values, *, max_distance, q_offset=None):
    """sum_j w[i, j] a^V[clip(j - qpos, -k, k) + k]."""
    w, rel_values = np.asarray(weights), np.asarray(rel_values)
    q_len, k_len = w.shape[-2:]
    work = _rel_work(w, rel_values)
    col = _shaw_col(q_len, k_len, q_offset, max_distance)
    summed = np.zeros(w.shape[:-1] + (2 * max_distance + 1,), work)  # (..., q, 2k+1)
    rows = np.arange(q_len)
    for j in range(k_len):  # each key's weight into its bucket, keys in order
        summed[..., rows, col[:, j]] += w[..., :, j].astype(work)
    return (summed @ rel_values.astype(work)).astype(np.result_type(w, rel_values))


def tupe_bias(pos_q, pos_k, *, rel_table=None, max_distance=128, untie_cls=True, scores=None):
    """(p_i U_Q)(p_j U_K)^T / sqrt(2 d) + b[bucket(j - i)], [CLS] untied (row 0, column 0)."""
    pq, pk = np.asarray(pos_q), np.asarray(pos_k)
    work = _rel_work(pq, pk, *([] if rel_table is None else [rel_table]))
    d = pq.shape[-1]
    scale = 1.0 / math.sqrt(2 * d) if d else 1.0  # an empty head dim: sums of no products, 0
    a = (pq.astype(work) * work(scale)) @ np.swapaxes(pk.astype(work), -1, -2)
    if untie_cls and a.shape[-1] < 2:  # [CLS]'s slot alone: no tokens
        a = a[:, 1:, 1:]
    elif untie_cls:
        cls_to_others, others_to_cls = a[:, 0, 0].copy(), a[:, 1, 1].copy()
        a = a[:, 1:, 1:].copy()
        a[:, :, 0] = others_to_cls[:, None]
        a[:, 0, :] = cls_to_others[:, None]
    if rel_table is not None:
        table = np.asarray(rel_table, work)
        n = a.shape[-1]
        nb = table.shape[0] - (1 if untie_cls else 0)
        buckets = relative_position_bucket(
            _key_minus_query(n, n, 0), num_buckets=nb, max_distance=max_distance
        )
        if untie_cls and n:
            buckets[:, 0] = nb
            buckets[0, :] = nb // 2
        a = a + np.moveaxis(table[buckets], -1, 0)
    dtypes = [pq, pk] + ([] if rel_table is None else [np.asarray(rel_table)])
    return _rel_result([a], scores, np.result_type(*dtypes))


# the encodings since 2022, written out in their own files
from ._reference_functional import fire_bias, kerple_bias, sandwich_bias  # noqa: E402, F401
from ._reference_newer import (  # noqa: E402, F401
    chunked_causal_mask,
    complex_order_embedding,
    cope_bias,
    irope_rope_layers,
    pose_position_ids,
    randomized_position_ids,
)
