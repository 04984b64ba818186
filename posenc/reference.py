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


def sinusoid(positions, dim, *, base=10000.0, layout="interleaved", dtype=None, out=None):
    """PE[p, 2i] = sin(p / base**(2i/dim)), PE[p, 2i+1] = cos(same)."""
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

# (end of rope references)


# ---------------------------------------------------------------- attention biases

# (end of bias references)
