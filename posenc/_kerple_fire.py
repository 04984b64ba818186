"""KERPLE's and FIRE's parameters and formulas, shared by forward and backward.

What posenc.functional_bias (the biases) and posenc._functional_grad (their
gradients) both read: the parameters checked as float64
(:func:`kerple_params`, :func:`fire_params`), the distances of the
diagonals (:func:`distances`), ``log(1 + s d)`` without overflow
(:func:`log1p_product`), FIRE's normalised distance (:func:`fire_inputs`)
and the tiles the work is done in (:func:`tiles`).
"""

from __future__ import annotations

import numpy as np

from . import _validate as v
from ._dtypes import is_bfloat16

# float64 elements of one tile of work (the FIRE MLP's hidden layer of the
# rows by distance, the Sandwich cosines): 4 MiB
TILE = 1 << 19
_KINDS = ("log", "power")


# ---------------------------------------------------------------- arguments


def _scalar(value, name, *, positive=False, minimum=None):
    """A finite real number; a 0-d array (JAX's scalars) as its value."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        if value.dtype.kind not in "iuf" and not is_bfloat16(value.dtype):
            raise TypeError(f"{name} must be a real number, not an array of {value.dtype}")
        value = float(v.real_array(value, name)[()])
    value = v.real(value, name, positive=positive)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _float_params(value, name):
    """`value` as a float64 copy (never a view of the caller's memory), its
    elements finite."""
    arr = v.real_array(value, name)
    return np.array(arr, dtype=np.float64, copy=True)


def _per_head(value, name):
    """KERPLE's ``(n_heads,)`` parameter (or the authors' ``(n_heads, 1, 1)``)
    as a float64 vector, and the shape it came in."""
    arr = _float_params(value, name)
    if arr.ndim == 1 and arr.shape[0] >= 1:
        return arr, arr.shape
    if arr.ndim == 3 and arr.shape[0] >= 1 and arr.shape[1:] == (1, 1):
        return arr.reshape(-1), arr.shape
    raise ValueError(f"{name} must have shape (n_heads,) or (n_heads, 1, 1), not {arr.shape}")


def kerple_params(r1, r2, kind):
    """r1, r2 and kind checked: float64 vectors of one length, r1 > 0,
    r2 > 0 (and r2 <= 2 for the power kernel); with the shapes given."""
    kind = v.choice(kind, "kind", _KINDS)
    a, a_shape = _per_head(r1, "r1")
    b, b_shape = _per_head(r2, "r2")
    if a.shape != b.shape:
        raise ValueError(
            f"r1 and r2 must have one value per head each: r1 has {a.shape[0]}, r2 {b.shape[0]}"
        )
    if not (a > 0).all():
        raise ValueError(f"r1 must be > 0 (found {float(a[~(a > 0)][0])})")
    if not (b > 0).all():
        raise ValueError(f"r2 must be > 0 (found {float(b[~(b > 0)][0])})")
    if kind == "power" and not (b <= 2).all():
        raise ValueError(
            f"r2 must be <= 2 for kind='power' (0 < r2 <= 2 keeps the kernel conditionally "
            f"positive definite, as in the paper), found {float(b[b > 2][0])}"
        )
    return a, b, kind, a_shape, b_shape


def _layer_bias(value, name, rows, weight):
    """A linear layer's bias `value` as float64, one value per row of its
    `weight` (which has `rows`)."""
    arr = _float_params(value, name)
    if arr.shape != (rows,):
        raise ValueError(
            f"{name} must have shape ({rows},), as {weight} has {rows} rows; not {arr.shape}"
        )
    return arr


def fire_params(w1, b1, w2, b2, c, threshold, eps):
    """FIRE's MLP and scalars checked, as float64 (w1 as a vector), with the
    shapes given."""
    a1 = _float_params(w1, "w1")
    shapes = (a1.shape,)
    if a1.ndim == 2 and a1.shape[1] == 1:
        a1 = a1[:, 0]
    if a1.ndim != 1 or a1.shape[0] < 1:
        raise ValueError(
            f"w1 must have shape (width, 1) (torch's Linear(1, width).weight) or (width,), "
            f"not {shapes[0]}"
        )
    width = a1.shape[0]
    c1 = _layer_bias(b1, "b1", width, "w1")
    a2 = _float_params(w2, "w2")
    if a2.ndim != 2 or a2.shape[1] != width or a2.shape[0] < 1:
        raise ValueError(
            f"w2 must have shape (n_heads, {width}) (torch's Linear({width}, n_heads).weight), "
            f"not {a2.shape}"
        )
    c2 = _layer_bias(b2, "b2", a2.shape[0], "w2")
    c = _scalar(c, "c")
    threshold = _scalar(threshold, "threshold", minimum=0.0)
    eps = _scalar(eps, "eps", positive=True)
    shapes = (shapes[0], c1.shape, a2.shape, c2.shape)
    return a1, c1, a2, c2, c, threshold, eps, shapes


# ---------------------------------------------------------------- formulas


def distances(q_len, k_len, q_offset):
    """float64 ``qpos - j`` for the ``q_len + k_len - 1`` diagonals, index
    ``q_len - 1 - i + j`` (the order of ``_core.bias_given``'s vectors)."""
    return float(q_offset + q_len - 1) - np.arange(q_len + k_len - 1, dtype=np.float64)


def log1p_product(s, d):
    """``log(1 + s * d)`` for ``s, d >= 0``, also where the product overflows
    float64 (``log s + log d`` there, instead of infinity)."""
    with np.errstate(over="ignore"):
        x = s * d
    out = np.log1p(x)
    big = np.isinf(x)
    if big.any():
        s, d = np.broadcast_arrays(s, d)
        out[big] = np.log(s[big]) + np.log(d[big])
    return out


def tiles(q_len, k_len, per_pair):
    """(rows, cols) slices covering (q_len, k_len), each tile at most about
    `TILE` float64 elements when each pair holds `per_pair` of them."""
    cols = max(1, min(k_len, TILE // max(1, per_pair)))
    rows = max(1, TILE // (cols * max(1, per_pair)))
    for r in range(0, q_len, rows):
        for s in range(0, k_len, cols):
            yield slice(r, min(r + rows, q_len)), slice(s, min(s + cols, k_len))


def fire_inputs(qpos, keys, c, threshold, eps):
    """FIRE's normalised distance for queries at `qpos` (r,) and keys at
    `keys` (s,), float64 (r, s), with its parts: ``x = num / den``,
    ``num = log(1 + |c| d)``, ``den = log(1 + |c| m) + eps``, ``d = |qpos - j|``,
    ``m = max(qpos, threshold)``."""
    d = np.abs(qpos[:, None] - keys[None, :])
    m = np.maximum(qpos, threshold)[:, None]
    num = log1p_product(abs(c), d)
    den = log1p_product(abs(c), m) + eps
    return num / den, d, m, num, den
