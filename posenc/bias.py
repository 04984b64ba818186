"""Attention biases: ALiBi, T5's bucketed relative biases, Shaw's clipped relative positions.

Each bias depends only on the distance ``j - (q_offset + i)`` from query ``i``
to key ``j``.  The tables are made in C: the values of the ``q_len + k_len - 1``
distinct distances once, then every row as a slice of them, so a fill runs at
the speed of writing memory.  With ``scores=`` the bias is added into
existing attention scores in place, with no ``(heads, q, k)`` temporary.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from . import _core, _t5, _t5_bias
from . import _validate as v
from ._distance_bias import distance_args, fill, lengths, offset, run_on_views, scores_target
from ._dtypes import is_bfloat16, narrow
from ._interop import accepts_tensors
from ._t5_bias import t5_bias_table_grad as t5_bias_table_grad
from ._typing import NDArray

# the arguments that set the size of a table, as its size check names them
_ALIBI_SIZES = "n_heads, q_len and k_len"


# ---------------------------------------------------------------- ALiBi


@accepts_tensors
def alibi_slopes(n_heads: int, *, max_bias: float = 8.0) -> NDArray[np.float64]:
    """The per-head slopes of ALiBi (Press et al., 2022).

    Parameters
    ----------
    n_heads : int
        Number of attention heads, >= 1.
    max_bias : float
        The exponent scale, 8 in the paper and in BLOOM, MPT, Falcon.
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray of float64, shape ``(n_heads,)``
        For a power of two ``n``: ``2 ** (-max_bias * (h + 1) / n)``.  For
        other ``n``, the slopes of the closest lower power of two ``c``,
        followed by every other slope of ``2c`` (``[0::2]``) until ``n`` are
        filled, as BLOOM's ``build_alibi_tensor`` in transformers (which
        rounds them to float32).

    Raises
    ------
    TypeError, ValueError
        Naming `n_heads` (not an int >= 1) or `max_bias` (not positive).


    Examples
    --------
    >>> posenc.alibi_slopes(4).tolist()
    [0.25, 0.0625, 0.015625, 0.00390625]
    >>> posenc.alibi_slopes(6).tolist()[4:]  # every other slope of 8 heads
    [0.5, 0.125]
    """
    n = v.integer(n_heads, "n_heads", minimum=1)
    max_bias = v.real(max_bias, "max_bias", positive=True)
    v.shape_size((n,), "n_heads", count=2)  # the slopes and their copy
    return _slopes(n, max_bias).copy()


@lru_cache(maxsize=64)
def _slopes(n, max_bias):
    """alibi_slopes, made once per (n, max_bias) and kept read-only (a
    decoding step asks for the same ones every time)."""
    c = 1 << (n.bit_length() - 1)  # the largest power of two <= n
    with np.errstate(over="ignore"):  # a huge max_bias: slopes of 0, as in the limit
        slopes = np.exp2(-max_bias * np.arange(1, c + 1) / c)
        if c < n:
            halves = np.exp2(-max_bias * np.arange(1, 2 * c + 1, 2) / (2 * c))
            slopes = np.concatenate([slopes, halves[: n - c]])
    slopes.setflags(write=False)
    return slopes


@accepts_tensors
def alibi_bias(
    n_heads,
    q_len,
    k_len=None,
    *,
    slopes=None,
    max_bias=8.0,
    causal=True,
    q_offset=None,
    dtype=None,
    scores=None,
    out=None,
):
    """ALiBi's linear attention bias, or its add into attention scores.

    Parameters
    ----------
    n_heads : int
        Number of heads.
    q_len, k_len : int
        Number of queries and keys (``k_len`` defaults to ``q_len``), >= 1.
    slopes : array_like of shape (n_heads,), optional
        The per-head slopes; :func:`alibi_slopes` ``(n_heads, max_bias=max_bias)``
        by default.
    max_bias : float
        Passed to :func:`alibi_slopes` when `slopes` is not given.
    causal : bool
        True: ``-slope * (qpos - j)`` for keys ``j <= qpos`` and ``-inf`` for
        future keys, so that the bias also masks.  False: the symmetric
        ``-slope * |qpos - j|`` of encoders.
    q_offset : int, optional
        Query ``i`` sits at position ``qpos = q_offset + i``; by default
        ``k_len - q_len``, the newest tokens of a KV cache (which needs
        ``q_len <= k_len``).  Any integer with ``|q_offset| <= 2**53``.
    dtype : float16, bfloat16, float32 or float64, optional
        Of the table: float32 by default, or `out`'s dtype.  With `scores`
        the bias is made in `scores`' dtype and `dtype` must be that or None.
        ``"bfloat16"`` (or ``"bf16"``) gives an array of ml_dtypes'
        bfloat16 (``pip install 'posenc[bfloat16]'``).
    scores : ndarray of shape (..., n_heads, q_len, k_len), optional
        Attention scores to add the bias into, in place (returned).  Any
        leading batch axes and strides; float16, bfloat16, float32 or
        float64.
    out : ndarray of shape (n_heads, q_len, k_len), optional
        Where to write the table (not together with `scores`).
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray
        The ``(n_heads, q_len, k_len)`` bias, or `scores` with the bias added.

    Raises
    ------
    TypeError, ValueError
        Naming the argument: lengths or offset out of range, `slopes` of another
        shape, `scores` / `out` of another shape or dtype, both given.

    Notes
    -----
    Each value is formed in float64 and rounded once to the dtype; the
    diagonal is ``+0.0``.  With `scores` the result is exactly that of
    ``scores += alibi_bias(..., dtype=scores.dtype)``: the bias rounded to
    the scores' dtype, then added with one rounding (float16 and bfloat16
    through float32, which rounds the same).  Future keys become ``-inf`` by that
    add, so a ``+inf`` or ``nan`` score there becomes ``nan``, as in NumPy.
    No bias array is made: the add reads and writes the scores once.

    Examples
    --------
    >>> posenc.alibi_bias(1, 3, dtype="float64")[0].tolist()
    [[0.0, -inf, -inf], [-0.00390625, 0.0, -inf], [-0.0078125, -0.00390625, 0.0]]
    >>> scores = np.zeros((2, 1, 3, 3), np.float32)
    >>> posenc.alibi_bias(1, 3, causal=False, scores=scores) is scores
    True
    >>> scores[1, 0, 0].tolist()
    [0.0, -0.00390625, -0.0078125]
    """
    n_heads = v.integer(n_heads, "n_heads", minimum=1)
    q_len, k_len, q_offset, causal = distance_args(q_len, k_len, q_offset, causal)
    shape = (n_heads, q_len, k_len)
    if scores is None:
        dtype = v.result_dtype(dtype, out, bfloat16=True)
        if out is None:  # the table made, checked before the slopes
            v.shape_size(shape, _ALIBI_SIZES, dtype.itemsize)
    if slopes is None:
        slopes = _slopes(n_heads, v.real(max_bias, "max_bias", positive=True))
    else:
        if max_bias != 8.0:
            raise ValueError("give slopes or max_bias, not both")
        slopes = v.native_copy(v.real_array(slopes, "slopes"), np.float64)
        if slopes.shape != (n_heads,):
            raise ValueError(f"slopes must have shape ({n_heads},), not {slopes.shape}")
    slopes = v.copy_if_shared(slopes, scores if scores is not None else out)
    if scores is not None:
        if out is not None:
            raise ValueError("give scores (to add into) or out (to write), not both")
        arr = scores_target(scores, shape, dtype)
        run_on_views(
            lambda dst: _core.alibi(slopes, v.for_kernel(dst), q_offset, causal, True),
            arr,
            read=True,
            name="scores",
        )
        return arr
    return fill(
        lambda dst: _core.alibi(slopes, v.for_kernel(dst), q_offset, causal, False),
        shape,
        dtype,
        out,
        _ALIBI_SIZES,
    )


@accepts_tensors
def alibi_key_bias(attention_mask, n_heads, *, slopes=None, max_bias=8.0, dtype=None):
    """ALiBi in the per-key form BLOOM and Falcon add: ``(batch, n_heads, 1, k)``.

    ``slope[h] * p[b, j]``, where ``p[b, j]`` is the position of key ``j``
    counted over the ones of `attention_mask` (``cumsum - 1``) and 0 at
    padding: transformers' ``build_alibi_tensor`` (BLOOM, Falcon), whose
    ``(batch * n_heads, 1, k)`` is this reshaped.  It differs from
    :func:`alibi_bias`'s ``-slope * (i - j)`` by ``slope * i`` along each
    query's row, which the softmax removes; with left padding it counts
    each row's positions from its first token.

    Parameters
    ----------
    attention_mask : array_like of shape (batch, k)
        Ones for tokens, zeros for padding (ints, bools or floats of 0 and
        1).
    n_heads : int
        Number of heads, >= 1.
    slopes : array_like of shape (n_heads,), optional
        The per-head slopes; :func:`alibi_slopes` ``(n_heads,
        max_bias=max_bias)`` by default (BLOOM's and Falcon's).
    max_bias : float
        Passed to :func:`alibi_slopes` when `slopes` is not given.
    dtype : float16, bfloat16, float32 or float64, optional
        Of the result, float32 by default.
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray of shape ``(batch, n_heads, 1, k)``

    Raises
    ------
    TypeError, ValueError
        Naming the argument: a mask not 2-D or not of 0 and 1, `slopes` of
        another shape, both `slopes` and `max_bias`.

    Notes
    -----
    Each value is formed in float64 and rounded once to `dtype`.  In
    float32 this is transformers' value bit for bit when its float32 slopes
    are exact (``n_heads <= 8``: powers of two; above, its slopes are
    float32 powers of a rounded ``2 ** -0.5`` or finer root, and differ
    from these by an ulp or two).  Falcon forms the products in bfloat16
    (``slopes.bfloat16() * positions``), whatever the model's dtype: up to
    about 0.4 % off, see the guide on models.

    Examples
    --------
    >>> bias = posenc.alibi_key_bias([[0, 1, 1]], 2)
    >>> bias.shape
    (1, 2, 1, 3)
    >>> bias[0, :, 0].tolist()
    [[0.0, 0.0, 0.0625], [0.0, 0.0, 0.00390625]]
    """
    mask = attention_mask if isinstance(attention_mask, np.ndarray) else np.asarray(attention_mask)
    mask = v.real_array(mask.view(np.uint8) if mask.dtype == np.bool_ else mask, "attention_mask")
    if mask.ndim != 2:
        raise ValueError(f"attention_mask must have shape (batch, k), not {mask.shape}")
    if mask.size and not ((mask == 0) | (mask == 1)).all():
        raise ValueError("attention_mask must hold only 0 and 1")
    n_heads = v.integer(n_heads, "n_heads", minimum=1)
    result = v.float_dtype(np.float32 if dtype is None else dtype, "dtype", bfloat16=True)
    batch, k = mask.shape
    v.shape_size((batch, n_heads, 1, k), "attention_mask and n_heads", 8, count=2)
    if slopes is None:
        per_head = _slopes(n_heads, v.real(max_bias, "max_bias", positive=True))
    else:
        if max_bias != 8.0:
            raise ValueError("give slopes or max_bias, not both")
        per_head = v.real_array(slopes, "slopes").astype(np.float64)
        if per_head.shape != (n_heads,):
            raise ValueError(f"slopes must have shape ({n_heads},), not {per_head.shape}")
    ones = mask.astype(np.int64)
    positions = ((np.cumsum(ones, axis=-1) - 1) * ones).astype(np.float64)
    values = per_head[None, :, None, None] * positions[:, None, None, :]
    return _rounded(values, result)


def _rounded(values, dtype):
    """float64 `values` rounded once to `dtype` (bfloat16 through float32
    rounded to odd, which then rounds to bfloat16 as the float64 would)."""
    if not is_bfloat16(dtype):
        return values.astype(dtype)
    f = values.astype(np.float32)
    wide = f.astype(np.float64)
    inexact = wide != values
    if inexact.any():  # truncate toward zero, then set the last bit
        over = inexact & (np.abs(wide) > np.abs(values))
        f[over] = np.nextafter(f[over], np.float32(0))
        bits = f.view(np.uint32)
        bits[inexact] |= 1
    return narrow(f).reshape(values.shape).view(dtype)


# ---------------------------------------------------------------- T5


@accepts_tensors
def relative_position_bucket(
    relative_position, *, bidirectional=True, num_buckets=32, max_distance=128
):
    """T5's bucket of each relative position ``key_pos - query_pos``.

    Parameters
    ----------
    relative_position : array_like of integers
        Any shape.
    bidirectional : bool
        True (encoders): half of the buckets for keys after the query.
        False (decoders): keys after the query share bucket 0.
    num_buckets : int
        Number of buckets, >= 2.
    max_distance : int
        Distances from here on share the last bucket of their direction.
        It must exceed the number of exact buckets (below).
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray of int64, the shape of `relative_position`

    Raises
    ------
    TypeError, ValueError
        Naming the argument: positions not integers, `num_buckets` below 2,
        `max_distance` not above the exact buckets.

    Notes
    -----
    As transformers' ``T5Attention._relative_position_bucket``: of the
    buckets of one direction (``num_buckets``, halved when bidirectional),
    half (``max_exact``) hold one distance each, the rest grow
    logarithmically up to `max_distance`: a distance ``a >= max_exact`` has
    bucket ``max_exact + floor(N ln(a / max_exact) / ln(max_distance /
    max_exact))``, ``N`` the number of logarithmic buckets, clipped to the
    last.  posenc decides that floor in exact arithmetic (the distances
    where the bucket steps are computed once per configuration and
    cached).  transformers evaluates the same formula in float32: on T5's
    configurations every distance agrees; in rare unusual configurations a
    distance whose exact value sits just below a bucket boundary (e.g. 926
    buckets, max_distance 31706, distance 20743, where the exact value is
    211.99998854 buckets past the exact ones) can land on the other side in
    float32, and posenc gives the exact bucket.  With two or three buckets
    bidirectional, ``max_exact`` is 0 and each direction has one bucket
    (transformers divides by zero there).

    Examples
    --------
    >>> posenc.relative_position_bucket(np.array([-3, 0, 2, 100])).tolist()
    [3, 0, 18, 31]
    >>> posenc.relative_position_bucket(np.array([-3, 0, 2]), bidirectional=False).tolist()
    [3, 0, 0]
    """
    arr = np.asarray(relative_position)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"relative_position must hold integers, not dtype {arr.dtype}")
    bidirectional = v.flag(bidirectional, "bidirectional")
    num_buckets, max_distance = _t5_bias.checked_options(bidirectional, num_buckets, max_distance)
    v.shape_size(arr.shape, "relative_position", count=2)  # its int64 copy and the result
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8:
        arr = np.minimum(arr, _t5_bias.MAX_DISTANCE)  # all of these share the last bucket
    rel = v.native_copy(arr, np.int64).reshape(-1)
    out = np.empty(rel.shape, np.int64)
    largest = max(int(rel.max()), -int(rel.min())) if rel.size else 0
    thresholds = _t5.thresholds(bidirectional, num_buckets, max_distance, largest)
    _core.t5_buckets(rel, out, bidirectional, num_buckets, thresholds)
    return out.reshape(arr.shape)


@accepts_tensors
def t5_bias(
    table,
    q_len,
    k_len=None,
    *,
    bidirectional=True,
    max_distance=128,
    q_offset=0,
    scores=None,
    out=None,
):
    """T5's relative attention bias from its learned bucket table.

    Parameters
    ----------
    table : array_like of shape (num_buckets, n_heads)
        The learned weights (transformers' ``relative_attention_bias.weight``),
        float16, bfloat16, float32 or float64; ``num_buckets >= 2``.
    q_len, k_len : int
        Number of queries and keys (``k_len`` defaults to ``q_len``), >= 1.
    bidirectional : bool
        True for encoders, False for decoders (see :func:`relative_position_bucket`).
    max_distance : int
        As in :func:`relative_position_bucket`.
    q_offset : int
        Query ``i`` sits at position ``q_offset + i`` (the tokens already in
        a KV cache), 0 by default.
    scores : ndarray of shape (..., n_heads, q_len, k_len), optional
        Attention scores to add the bias into, in place (returned).
    out : ndarray of shape (n_heads, q_len, k_len), optional
        Where to write the bias, of the table's dtype.
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray
        ``out[h, i, j] = table[bucket(j - (q_offset + i)), h]`` in the
        table's dtype, or `scores` with the bias added.

    Raises
    ------
    TypeError, ValueError
        Naming the argument: a table not 2-D with >= 2 rows, lengths or offset
        out of range, `scores` / `out` of another shape or dtype, both given.

    Notes
    -----
    Only the ``q_len + k_len - 1`` distinct distances are bucketed; the
    table is then a gather of those, row by row.  With `scores` the result
    is exactly that of ``scores += t5_bias(table.astype(scores.dtype), ...)``.

    Examples
    --------
    >>> table = np.arange(64.0).reshape(32, 2)
    >>> posenc.t5_bias(table, 2, 3)[0].tolist()
    [[0.0, 34.0, 36.0], [2.0, 0.0, 34.0]]
    >>> buckets = posenc.relative_position_bucket(np.arange(3) - np.arange(2)[:, None])
    >>> np.array_equal(posenc.t5_bias(table, 2, 3)[1], table[buckets, 1])
    True
    """
    return _t5_bias.bias(table, q_len, k_len, bidirectional, max_distance, q_offset, scores, out)


# ---------------------------------------------------------------- Shaw et al.


@accepts_tensors
def relative_positions(q_len, k_len=None, *, max_distance=None, q_offset=0):
    """Shaw et al.'s clipped relative positions.

    Parameters
    ----------
    q_len, k_len : int
        Number of queries and keys (``k_len`` defaults to ``q_len``), >= 1.
    max_distance : int, optional
        The clipping distance ``k`` of the paper (>= 0); None: no clipping.
    q_offset : int
        Query ``i`` sits at position ``q_offset + i``, 0 by default.
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray of int64, shape ``(q_len, k_len)``
        ``clip(j - (q_offset + i), -max_distance, max_distance)``; add
        `max_distance` to index a table of ``2 * max_distance + 1`` embeddings.

    Raises
    ------
    TypeError, ValueError
        Naming the argument: lengths below 1, a negative `max_distance`, an
        offset out of range.


    Examples
    --------
    >>> posenc.relative_positions(3, max_distance=1).tolist()
    [[0, 1, 1], [-1, 0, 1], [-1, -1, 0]]
    >>> posenc.relative_positions(1, 3, q_offset=2).tolist()
    [[-2, -1, 0]]
    """
    q_len, k_len = lengths(q_len, k_len)
    q_offset = offset(q_offset)
    clip = -1 if max_distance is None else v.integer(max_distance, "max_distance", minimum=0)
    clip = min(clip, _t5_bias.MAX_DISTANCE)  # beyond every distance there is
    v.shape_size((q_len, k_len), "q_len and k_len")
    result = np.empty((q_len, k_len), np.int64)
    _core.relative_positions(result[None, None], clip, q_offset)
    return result
