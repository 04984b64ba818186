"""The float64 NumPy twins of posenc.functional_bias: the tests' oracle.

Each bias is written as its paper writes it, on the full ``(q_len, k_len)``
grid of query and key positions by broadcasting, then rounded once to the
dtype (or added into scores) by :func:`posenc.reference._add_or_return`.
Nothing here is shared with posenc.functional_bias.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .reference import _add_or_return


def _grid(q_len: int, k_len: Optional[int], q_offset: Optional[int]) -> Any:
    """(query positions (q, 1), key positions (1, k)) as float64."""
    k_len = q_len if k_len is None else k_len
    q_offset = k_len - q_len if q_offset is None else q_offset
    i = (q_offset + np.arange(q_len, dtype=np.float64))[:, None]
    j = np.arange(k_len, dtype=np.float64)[None, :]
    return i, j


def _masked(bias: Any, i: Any, j: Any, causal: bool, dtype: Any, scores: Any) -> NDArray[Any]:
    """`bias` with -inf at the keys after the query (``j > i``) when `causal`,
    rounded to `dtype` (float32 by default) or added into `scores`."""
    if causal:
        bias = np.where(j > i, -np.inf, bias)
    return _add_or_return(bias, dtype or np.float32, scores, None)


def kerple_bias(
    r1: ArrayLike,
    r2: ArrayLike,
    q_len: int,
    k_len: Optional[int] = None,
    *,
    kind: str = "log",
    causal: bool = True,
    q_offset: Optional[int] = None,
    dtype: Any = None,
    scores: Optional[NDArray[Any]] = None,
) -> NDArray[Any]:
    """-r1 log(1 + r2 |i - j|) or -r1 |i - j| ** r2; -inf for j > i (causal)."""
    i, j = _grid(q_len, k_len, q_offset)
    p = np.asarray(r1, dtype=np.float64).reshape(-1, 1, 1)
    a = np.asarray(r2, dtype=np.float64).reshape(-1, 1, 1)
    dist = np.abs(i - j)
    if kind == "log":
        bias = -p * np.log(1.0 + a * dist)
    else:
        bias = -p * dist**a
    bias = bias + 0.0  # +0.0 at distance 0
    return _masked(bias, i, j, causal, dtype, scores)


def sandwich_bias(
    n_heads: int,
    q_len: int,
    k_len: Optional[int] = None,
    *,
    dim: int,
    causal: bool = True,
    q_offset: Optional[int] = None,
    dtype: Any = None,
    scores: Optional[NDArray[Any]] = None,
) -> NDArray[Any]:
    """(sum_{k=1}^{dim/2} cos((i - j) 10000 ** (-2k/dim)) - dim/2) / ((h+1) 8 / H)."""
    i, j = _grid(q_len, k_len, q_offset)
    k = np.arange(1, dim // 2 + 1, dtype=np.float64)
    omega = 1.0 / 10000.0 ** (2.0 * k / dim)
    inner = np.cos((i - j)[..., None] * omega).sum(axis=-1)
    h = np.arange(n_heads, dtype=np.float64)[:, None, None]
    bias = (inner - dim / 2) / ((h + 1) * 8 / n_heads)
    return _masked(bias, i, j, causal, dtype, scores)


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
    causal: bool = True,
    q_offset: Optional[int] = None,
    dtype: Any = None,
    scores: Optional[NDArray[Any]] = None,
) -> NDArray[Any]:
    """W2 relu(W1 x + b1) + b2 with x = log(|c (i - j)| + 1) / (log(|c max(i, L)| + 1) + eps)."""
    i, j = _grid(q_len, k_len, q_offset)
    x = np.log(np.abs(c * (i - j)) + 1) / (np.log(np.abs(c * np.maximum(i, threshold)) + 1) + eps)
    weight1 = np.asarray(w1, dtype=np.float64).reshape(-1)
    hidden = np.maximum(x[..., None] * weight1 + np.asarray(b1, dtype=np.float64), 0.0)
    out = hidden @ np.asarray(w2, dtype=np.float64).T + np.asarray(b2, dtype=np.float64)
    bias = np.moveaxis(out, -1, 0)
    return _masked(bias, i, j, causal, dtype, scores)
