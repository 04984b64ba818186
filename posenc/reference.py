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

# (end of bias references)
