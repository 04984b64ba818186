"""The float64 NumPy twins of posenc.functional_bias: the tests' oracle.

Each bias is written as its paper writes it, on the full ``(q_len, k_len)``
grid of query and key positions by broadcasting, then rounded once to the
dtype (or added into scores) by :func:`posenc._reference_rounding.add_or_return`.
Nothing here is shared with posenc.functional_bias.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._reference_rounding import add_or_return


def _on_grid(
    values: Callable[[Any, Any], Any],
    q_len: int,
    k_len: Optional[int] = None,
    *,
    causal: bool = True,
    q_offset: Optional[int] = None,
    dtype: Any = None,
    scores: Optional[NDArray[Any]] = None,
) -> NDArray[Any]:
    """The bias `values(i, j)` on the grid of query positions ``i`` (q, 1)
    and key positions ``j`` (1, k) as float64 (query ``i`` at ``q_offset +
    i``, by default ``k_len - q_len``), with -inf at the keys after the query
    (``j > i``) when `causal`, rounded to `dtype` (float32 by default) or
    added into `scores`: the keyword options every bias here takes."""
    k_len = q_len if k_len is None else k_len
    q_offset = k_len - q_len if q_offset is None else q_offset
    i = (q_offset + np.arange(q_len, dtype=np.float64))[:, None]
    j = np.arange(k_len, dtype=np.float64)[None, :]
    bias = values(i, j)
    if causal:
        bias = np.where(j > i, -np.inf, bias)
    return add_or_return(bias, dtype or np.float32, scores, None)


def kerple_bias(
    r1: ArrayLike,
    r2: ArrayLike,
    q_len: int,
    k_len: Optional[int] = None,
    *,
    kind: str = "log",
    **grid: Any,
) -> NDArray[Any]:
    """-r1 log(1 + r2 |i - j|) or -r1 |i - j| ** r2; -inf for j > i (causal)."""
    p = np.asarray(r1, dtype=np.float64).reshape(-1, 1, 1)
    a = np.asarray(r2, dtype=np.float64).reshape(-1, 1, 1)

    def values(i: Any, j: Any) -> Any:
        dist = np.abs(i - j)
        bias = -p * np.log(1.0 + a * dist) if kind == "log" else -p * dist**a
        return bias + 0.0  # +0.0 at distance 0

    return _on_grid(values, q_len, k_len, **grid)


def sandwich_bias(
    n_heads: int, q_len: int, k_len: Optional[int] = None, *, dim: int, **grid: Any
) -> NDArray[Any]:
    """(sum_{k=1}^{dim/2} cos((i - j) 10000 ** (-2k/dim)) - dim/2) / ((h+1) 8 / H)."""
    k = np.arange(1, dim // 2 + 1, dtype=np.float64)
    omega = 1.0 / 10000.0 ** (2.0 * k / dim)
    h = np.arange(n_heads, dtype=np.float64)[:, None, None]

    def values(i: Any, j: Any) -> Any:
        inner = np.cos((i - j)[..., None] * omega).sum(axis=-1)
        return (inner - dim / 2) / ((h + 1) * 8 / n_heads)

    return _on_grid(values, q_len, k_len, **grid)


def fire_bias(
    w1: ArrayLike,
    b1: ArrayLike,
    w2: ArrayLike,
    b2: ArrayLike,
    c: float,
    threshold: float,
    q_len: int,
    k_len: Optional[int] = None,
    *,
    eps: float = 1e-6,
    **grid: Any,
) -> NDArray[Any]:
    """W2 relu(W1 x + b1) + b2 with x = log(|c (i - j)| + 1) / (log(|c max(i, L)| + 1) + eps)."""
    weight1 = np.asarray(w1, dtype=np.float64).reshape(-1)

    def values(i: Any, j: Any) -> Any:
        x = np.log(np.abs(c * (i - j)) + 1) / (
            np.log(np.abs(c * np.maximum(i, threshold)) + 1) + eps
        )
        hidden = np.maximum(x[..., None] * weight1 + np.asarray(b1, dtype=np.float64), 0.0)
        out = hidden @ np.asarray(w2, dtype=np.float64).T + np.asarray(b2, dtype=np.float64)
        return np.moveaxis(out, -1, 0)

    return _on_grid(values, q_len, k_len, **grid)
