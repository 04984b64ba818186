"""Pure-NumPy twins of posenc's kernels: readable, slow, and the test oracle.

Each function has the signature of its fast counterpart and computes the
formula in the most direct way, in float64, rounding once at the end.  They
do not check their arguments beyond what NumPy does.
"""

from __future__ import annotations

import numpy as np


def _positions(positions):
    if isinstance(positions, (int, np.integer)):
        return np.arange(positions, dtype=np.float64)
    return np.asarray(positions, dtype=np.float64)


def _split(a):
    """Dekker's split of float64 `a` into two halves of 26 bits."""
    t = a * 134217729.0  # 2**27 + 1
    hi = t - (t - a)
    return hi, a - hi


def exact_sincos(p, w):
    """sin and cos of the exact product p * w (broadcast), in float64.

    The rounded product x = p * w can be off by half an ulp of x (1e-9 at
    x ~ 2**24), many float32 ulps of a sine near a zero crossing.  Its error
    e = p*w - x is exact by Dekker's two-product, and sin(x + e) =
    sin(x) + e cos(x) to float64 precision since |e| < 1e-8.
    """
    p, w = np.broadcast_arrays(np.asarray(p, np.float64), np.asarray(w, np.float64))
    x = p * w
    ph, pl = _split(p)
    wh, wl = _split(w)
    e = ((ph * wh - x) + ph * wl + pl * wh) + pl * wl
    sin, cos = np.sin(x), np.cos(x)
    return sin + e * cos, cos - e * sin


def sinusoid(positions, dim, *, base=10000.0, layout="interleaved", dtype=None, out=None):
    """PE[p, 2i] = sin(p * w_i), PE[p, 2i+1] = cos(p * w_i), w_i = 1 / base**(2i/dim)."""
    p = _positions(positions)
    inv_freq = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    sin, cos = exact_sincos(p[..., None], inv_freq)
    if layout == "interleaved":
        table = np.stack([sin, cos], axis=-1).reshape(p.shape + (dim,))
    else:
        table = np.concatenate([sin, cos], axis=-1)
    if out is None:
        return table.astype(dtype or np.float32)
    out[...] = table
    return out


# ---------------------------------------------------------------- rotary (RoPE)

# (end of rope references)


# ---------------------------------------------------------------- attention biases


def alibi_slopes(n_heads, *, max_bias=8.0):
    """Press et al.: 2 ** (-max_bias * (h+1) / n) for n a power of two; else those of
    the closest lower power of two c, then every other slope of 2c."""

    def power_of_two(n):
        return [2.0 ** (-max_bias * (h + 1) / n) for h in range(n)]

    c = 1 << (n_heads.bit_length() - 1)
    slopes = power_of_two(c)
    if c < n_heads:
        slopes += power_of_two(2 * c)[0::2][: n_heads - c]
    return np.array(slopes)


def _add_or_return(bias, dtype, scores, out):
    """The bias as a new array of `dtype`, written into `out`, or added into `scores`."""
    if scores is not None:
        scores += bias.astype(scores.dtype)
        return scores
    if out is not None:
        out[...] = bias
        return out
    return bias.astype(dtype)


def _key_minus_query(q_len, k_len, q_offset):
    """(q_len, k_len) int64: j - (q_offset + i)."""
    return np.arange(k_len)[None, :] - (q_offset + np.arange(q_len)[:, None])


def alibi_bias(n_heads, q_len, k_len=None, *, slopes=None, max_bias=8.0, causal=True,
               q_offset=None, dtype=None, scores=None, out=None):
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


def relative_position_bucket(relative_position, *, bidirectional=True, num_buckets=32,
                             max_distance=128):
    """T5's bucket of key_pos - query_pos, the logarithmic part in float32."""
    rel = np.asarray(relative_position, dtype=np.int64)
    bucket = np.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        bucket += (rel > 0) * num_buckets
        rel = np.abs(rel)
    else:
        rel = -np.minimum(rel, 0)
    max_exact = num_buckets // 2
    if max_exact == 0:  # one bucket per direction
        return bucket
    is_small = rel < max_exact
    x = np.maximum(rel, max_exact).astype(np.float32) / np.float32(max_exact)
    log_x = np.log(x.astype(np.float64)).astype(np.float32)  # correctly rounded float32 log
    scale = np.float32(np.log(max_distance / max_exact))
    steps = log_x / scale * np.float32(num_buckets - max_exact)
    steps = np.minimum(steps, np.float32(num_buckets))  # beyond the last bucket anyway
    large = np.minimum(max_exact + steps.astype(np.int64), num_buckets - 1)
    return bucket + np.where(is_small, rel, large)


def t5_bias(table, q_len, k_len=None, *, bidirectional=True, max_distance=128, q_offset=0,
            scores=None, out=None):
    """bias[h, i, j] = table[bucket(j - (q_offset + i)), h]."""
    table = np.asarray(table)
    k_len = q_len if k_len is None else k_len
    buckets = relative_position_bucket(
        _key_minus_query(q_len, k_len, q_offset), bidirectional=bidirectional,
        num_buckets=table.shape[0], max_distance=max_distance,
    )
    bias = np.moveaxis(table[buckets], -1, 0)
    return _add_or_return(bias, table.dtype, scores, out)


def relative_positions(q_len, k_len=None, *, max_distance=None, q_offset=0):
    """clip(j - (q_offset + i), -max_distance, max_distance)."""
    k_len = q_len if k_len is None else k_len
    rel = _key_minus_query(q_len, k_len, q_offset)
    if max_distance is not None:
        rel = np.clip(rel, -max_distance, max_distance)
    return rel.astype(np.int64)

# (end of bias references)
