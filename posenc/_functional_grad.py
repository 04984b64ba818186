"""The backward of the learned biases of :mod:`posenc.functional_bias`.

From the gradient of the loss with respect to the bias ``(..., n_heads,
q_len, k_len)`` (or to the scores it was added into: leading axes are summed
over), the gradients with respect to the parameters, in float64:

* :func:`kerple_bias_grad`: ``r1`` and ``r2``.  The bias depends only on the
  diagonal ``q_len - 1 - i + j``, so the gradient is summed along each
  diagonal once (one read of `grad`), then multiplied by the derivatives at
  the ``q_len + k_len - 1`` distances.
* :func:`fire_bias_grad`: ``w1, b1, w2, b2, c, threshold``, by the chain rule
  through the MLP and the normalised distance, in the forward's tiles.

Future keys of a causal bias hold the constant ``-inf``: their gradient
entries are ignored.  Sandwich has no parameter, hence no backward.
"""

from __future__ import annotations

import numpy as np

from . import _validate as v
from ._distance_bias import distance_args
from ._dtypes import is_bfloat16, widen
from ._kerple_fire import distances, fire_inputs, fire_params, kerple_params, log1p_product, tiles


def _ratio(x, y):
    """``x / (1 + y x)`` for ``x, y >= 0``, as ``1 / (1/x + y)`` so that a
    huge ``y x`` does not overflow (0 where ``x`` is 0)."""
    x, y = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(y, np.float64))
    out = np.zeros(x.shape)
    pos = x > 0
    with np.errstate(over="ignore"):
        out[pos] = 1.0 / (1.0 / x[pos] + y[pos])
    return out


def _grad_array(grad):
    """`grad` (..., n_heads, q_len, k_len) checked, and its last three sizes."""
    arr = grad if isinstance(grad, np.ndarray) else np.asarray(grad)
    v.float_array_dtype(arr, "grad", bfloat16=True)
    if arr.ndim < 3:
        raise ValueError(f"grad must have shape (..., n_heads, q_len, k_len), not {arr.shape}")
    n_heads, q_len, k_len = arr.shape[-3:]
    if min(n_heads, q_len, k_len) < 1:
        raise ValueError(f"grad must have at least one head, query and key, not shape {arr.shape}")
    return arr, n_heads, q_len, k_len


def _summed(part):
    """`part` (..., n_heads, r, s) summed over its leading axes, float64."""
    if is_bfloat16(part.dtype):
        part = widen(part)
    lead = tuple(range(part.ndim - 3))
    return np.sum(part, axis=lead, dtype=np.float64) if lead else part.astype(np.float64)


def diagonal_sums(arr):
    """float64 (n_heads, q_len + k_len - 1): ``sums[h, q_len - 1 - i + j]``
    accumulates ``arr[..., h, i, j]`` (leading axes summed), by rows or by
    columns, whichever are fewer."""
    n_heads, q_len, k_len = arr.shape[-3:]
    sums = np.zeros((n_heads, q_len + k_len - 1), np.float64)
    if q_len <= k_len:
        for i in range(q_len):
            t = q_len - 1 - i
            sums[:, t : t + k_len] += _summed(arr[..., i : i + 1, :])[:, 0, :]
    else:
        for j in range(k_len):
            sums[:, j : j + q_len] += _summed(arr[..., :, j : j + 1])[:, ::-1, 0]
    return sums


def kerple_bias_grad(grad, r1, r2, *, kind="log", causal=True, q_offset=None):
    """The gradients of :func:`posenc.kerple_bias` with respect to r1 and r2.

    Parameters
    ----------
    grad : array_like of shape (..., n_heads, q_len, k_len)
        The gradient with respect to the bias (or the scores it was added
        into), float16, bfloat16, float32 or float64.
    r1, r2, kind, causal, q_offset
        As given to :func:`posenc.kerple_bias` (q_len, k_len from `grad`).

    Returns
    -------
    (grad_r1, grad_r2) : float64 arrays of the shapes of r1 and r2
        With ``d = |qpos - j|``: log kernel ``-log(1 + r2 d)`` and
        ``-r1 d / (1 + r2 d)``; power kernel ``-d ** r2`` and
        ``-r1 d ** r2 log d`` (0 at ``d = 0``), each summed against `grad`.
    """
    a, b, kind, a_shape, b_shape = kerple_params(r1, r2, kind)
    arr, n_heads, q_len, k_len = _grad_array(grad)
    if n_heads != a.shape[0]:
        raise ValueError(f"grad has {n_heads} heads (axis -3), r1 and r2 {a.shape[0]}")
    q_len, k_len, q_offset, causal = distance_args(q_len, k_len, q_offset, causal)
    delta = distances(q_len, k_len, q_offset)
    sums = diagonal_sums(arr)
    keep = delta >= 0 if causal else np.ones(delta.shape, bool)
    d = np.abs(delta[keep])[None, :]
    g = sums[:, keep]
    ra, rb = a[:, None], b[:, None]
    if kind == "log":
        g_r1 = -(g * log1p_product(rb, d)).sum(axis=1)
        g_r2 = -(g * ra * _ratio(d, rb)).sum(axis=1)
    else:
        power = d**rb
        with np.errstate(divide="ignore"):
            log_d = np.where(d > 0, np.log(d), 0.0)
        g_r1 = -(g * power).sum(axis=1)
        g_r2 = -(g * ra * power * log_d).sum(axis=1)
    return g_r1.reshape(a_shape), g_r2.reshape(b_shape)


def fire_bias_grad(grad, w1, b1, w2, b2, c, threshold, *, eps=1e-6, causal=True, q_offset=None):
    """The gradients of :func:`posenc.fire_bias` with respect to its parameters.

    Parameters
    ----------
    grad : array_like of shape (..., n_heads, q_len, k_len)
        The gradient with respect to the bias (or the scores it was added
        into), float16, bfloat16, float32 or float64.
    w1, b1, w2, b2, c, threshold, eps, causal, q_offset
        As given to :func:`posenc.fire_bias` (q_len, k_len from `grad`).

    Returns
    -------
    (grad_w1, grad_b1, grad_w2, grad_b2, grad_c, grad_threshold)
        float64, the arrays in the shapes of w1, b1, w2, b2, the last two
        Python floats.  ReLU's derivative is 0 at 0 (as torch's); the
        threshold's gradient comes from the queries with
        ``threshold > qpos`` (where ``max(qpos, threshold)`` is the
        threshold), and half of it from a query at ``qpos == threshold``,
        as torch's ``max`` shares its gradient at a tie (the authors'
        module); ``|c|``'s derivative is ``sign(c)`` (0 at ``c = 0``).
    """
    w1, b1, w2, b2, c, threshold, eps, shapes = fire_params(w1, b1, w2, b2, c, threshold, eps)
    arr, n_heads, q_len, k_len = _grad_array(grad)
    if n_heads != w2.shape[0]:
        raise ValueError(f"grad has {n_heads} heads (axis -3), w2 {w2.shape[0]} rows")
    q_len, k_len, q_offset, causal = distance_args(q_len, k_len, q_offset, causal)
    width = w1.shape[0]
    g_w1 = np.zeros(width)
    g_b1 = np.zeros(width)
    g_w2 = np.zeros((n_heads, width))
    g_b2 = np.zeros(n_heads)
    g_c = 0.0
    g_l = 0.0
    sign_c = float(np.sign(c))
    keys = np.arange(k_len, dtype=np.float64)
    qpos = float(q_offset) + np.arange(q_len, dtype=np.float64)
    for rows, cols in tiles(q_len, k_len, 2 * width + n_heads):
        x, d, m, num, den = fire_inputs(qpos[rows], keys[cols], c, threshold, eps)
        pre = x[..., None] * w1 + b1
        hidden = np.maximum(pre, 0.0)
        g_out = np.moveaxis(_summed(arr[..., rows, cols]), 0, -1)  # (r, s, heads)
        if causal:
            g_out[qpos[rows][:, None] < keys[cols][None, :]] = 0.0
        g_w2 += np.einsum("rsh,rsw->hw", g_out, hidden)
        g_b2 += g_out.sum(axis=(0, 1))
        g_pre = (g_out @ w2) * (pre > 0)
        g_w1 += np.einsum("rsw,rs->w", g_pre, x)
        g_b1 += g_pre.sum(axis=(0, 1))
        g_x = g_pre @ w1
        # x = num / den: d x / d|c| and d x / d m
        dnum = _ratio(d, abs(c))
        dden_c = _ratio(m, abs(c))
        g_c += sign_c * float((g_x * (dnum / den - num * dden_c / den**2)).sum())
        # the share of m's gradient that is the threshold's: 1 where m is
        # the threshold, 1/2 at a tie (torch's max), 0 where m is the position
        share = np.where(qpos[rows] < threshold, 1.0, np.where(qpos[rows] == threshold, 0.5, 0.0))
        dden_l = _ratio(abs(c), m)
        g_l += float((g_x * (share[:, None] * (-num * dden_l / den**2))).sum())
    return (
        g_w1.reshape(shapes[0]),
        g_b1.reshape(shapes[1]),
        g_w2.reshape(shapes[2]),
        g_b2.reshape(shapes[3]),
        g_c,
        g_l,
    )


__all__ = ["diagonal_sums", "fire_bias_grad", "kerple_bias_grad"]
