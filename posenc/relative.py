"""The relative encodings that live inside attention.

Transformer-XL / XLNet (relative sinusoid table, the position term with the
relative shift, the content bias), TENER (direction-aware relative
sinusoid), DeBERTa (log buckets, c2p and p2c), Shaw et al. (relative keys
and values, tensor2tensor's convention) and TUPE (untied positional
correlation, untied [CLS], T5 buckets).

Each position term is a product of queries (or keys) with a small table of
relative embeddings -- ``(rows, width)`` per head, done by NumPy's matmul
(BLAS) -- followed by a gather: score ``(i, j)`` takes the column its
distance names.  The gather and the add into the scores are one C kernel
(src/relative.c) that reads the products where they are: no shifted copy
and no ``(q, k)`` temporary of the term is made.  The products are made a
block of rows (or keys) at a time, each block for the columns its
distances reach only, and gathered while in cache; their last bits are
BLAS's, which may depend on a block's shape.  That engine is
posenc._relative_engine; the reading and checking of the arguments, and
each term's parts, are posenc._relative_terms' (which the backward,
posenc._grad, reads too); this module holds the public functions.

Distances: Transformer-XL, XLNet and DeBERTa count ``query - key`` (the
opposite sign of :func:`posenc.relative_positions`); Shaw, TENER's query
term and T5 count ``key - query``.  Each function says which.  Query ``i``
sits at position ``q_offset + i`` and key ``j`` at ``j``.

The inputs (queries, keys, tables, biases) may be float16, bfloat16,
float32 or float64: their exact values enter products formed in float32 (in
float64 if an input or the scores are float64), and a new result has the
inputs' promoted dtype (bfloat16 with float16 or float32: float32, as torch
promotes), rounded once.  Where every input of a term is bfloat16 (and
the scores are not float64), its products are formed as AVX-512 BF16's
dot-product instruction forms them, on every SIMD path: the elements in
pairs, in order, the second product of a pair added first, each addition
rounded once in float32, values below float32's smallest normal flushed
to zero; a bias is not rounded into the queries: the sums start at its
products (see the guide's "Dtypes and rounding").

``scores=`` may be float16, bfloat16 (ml_dtypes' arrays, torch's
tensors), float32 or float64, in any layout.  A gathered term is rounded to
the scores' dtype and added with one rounding (float16 and bfloat16 summed
in float32, as NumPy and ml_dtypes add two such arrays): the bits of
``scores += term.astype(scores.dtype)``, one term after the other, on every
SIMD path and thread count.  The dense terms (:func:`xl_content_bias`,
:func:`tupe_bias`) are added as ``np.add(scores, term, casting="unsafe")``
adds: the sum rounded once.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from . import _core, _t5_bias
from . import _validate as v
from ._interop import accepts_tensors

# the engine: products in blocks, the C gathers, scatters and dense adds,
# the precision rules
from ._relative_engine import (
    add_dense,
    bf16_kept,
    biased_products,
    dot_products,
    left_operand,
    operand,
    promoted_dtype,
    promoted_dtype_of,
    quiet_ieee,
    rounded,
    sum_by_distance,
    sum_parts,
    to_dtype,
    working_dtype,
)

# the arguments read and checked, each term made into parts
from ._relative_terms import (
    PRECISIONS,
    bias_vector,
    checked_buckets,
    checked_size,
    deberta_term,
    destination,
    distances,
    float_array,
    lead_shape,
    log_bucket,
    offset,
    qk_array,
    scores_array,
    scores_target,
    shaw_term,
    shaw_value_args,
    tener_table,
    tener_term,
    xl_term,
)
from ._typing import Array, ArrayLike, DTypeLike, NDArray
from .sinusoid import sinusoid

_check = v  # for the TENER functions, whose argument v (the position bias) hides the module


# ---------------------------------------------------------------- Transformer-XL / XLNet


@accepts_tensors
def xl_relative_table(
    q_len: int,
    k_len: Optional[int] = None,
    dim: Optional[int] = None,
    *,
    attn_type: str = "bi",
    bi_data: bool = False,
    clamp_len: Optional[int] = None,
    base: float = 10000.0,
    dtype: Optional[DTypeLike] = None,
) -> NDArray[Any]:
    """Transformer-XL / XLNet's relative sinusoid table.

    Parameters
    ----------
    q_len, k_len : int
        Queries and keys (``k_len = mem_len + q_len`` with a memory;
        ``q_len`` by default).
    dim : int
        The model dimension (even).
    attn_type : {"bi", "uni"}
        As XLNet: ``"bi"`` gives the rows of distances ``k_len`` down to
        ``1 - q_len`` (``k_len + q_len`` rows, every key of every query),
        ``"uni"`` those of ``k_len`` down to 0 (past keys only).
    bi_data : bool
        XLNet's bidirectional data pipeline: the table of the forward order
        and that of the backward order (positions negated), stacked as
        ``(2, rows, dim)``; XLNet gives the first half of a batch the first.
    clamp_len : int, optional
        Distances clipped to ``[-clamp_len, clamp_len]`` when ``clamp_len > 0``
        (XLNet's ``clamp_len``; 0, negative or None: no clipping).
    base : float
        Wavelength base, 10000 in both models.
    dtype : float16, bfloat16, float32 (default) or float64
        ``"bfloat16"`` (or ``"bf16"``) gives an array of ml_dtypes' bfloat16
        (``pip install 'posenc[bfloat16]'``), each value rounded once.
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray of shape ``(rows, dim)`` (``(2, rows, dim)`` with `bi_data`)
        Row ``t`` holds distance ``d = k_len - t`` (query minus key):
        ``[sin(d w_0), ..., sin(d w_{dim/2-1}), cos(d w_0), ..., cos(d w_{dim/2-1})]``,
        ``w_i = base ** (-2i / dim)`` -- the sines then the cosines.
        Transformers' ``XLNetModel.relative_positional_encoding`` forms it in
        float32; posenc forms every angle in float64 and rounds once.

    Raises
    ------
    TypeError
        `dim` not given, or a size, flag or dtype of the wrong kind.
    ValueError
        A size < 1, an odd `dim`, an `attn_type` other than "bi" or
        "uni", or a table too large to allocate.

    Examples
    --------
    >>> import numpy as np
    >>> import posenc
    >>> table = posenc.xl_relative_table(3, dim=4, dtype="float64")
    >>> table.shape  # k_len + q_len rows: distances 3 down to -2
    (6, 4)
    >>> d = 3 - np.arange(6)[:, None]
    >>> w = 10000.0 ** (-np.arange(0, 4, 2) / 4)
    >>> np.allclose(table, np.concatenate([np.sin(d * w), np.cos(d * w)], axis=1))
    True
    """
    q_len = v.integer(q_len, "q_len", minimum=1)
    k_len = q_len if k_len is None else v.integer(k_len, "k_len", minimum=1)
    if dim is None:
        raise TypeError("xl_relative_table() needs dim, the model dimension")
    dim = v.even_dim(dim, "dim")
    attn_type = v.choice(attn_type, "attn_type", ("bi", "uni"))
    bi_data = v.flag(bi_data, "bi_data")
    clamp = 0 if clamp_len is None else v.integer(clamp_len, "clamp_len")
    dtype = v.result_dtype(dtype, None, bfloat16=True)
    rows = k_len + q_len if attn_type == "bi" else k_len + 1
    v.shape_size(((2,) if bi_data else ()) + (rows, dim), "result")
    end = -q_len if attn_type == "bi" else -1
    fwd = np.arange(k_len, end, -1, dtype=np.float64)
    tables = [fwd, -fwd] if bi_data else [fwd]
    if clamp > 0:
        tables = [np.clip(t, -clamp, clamp) for t in tables]
    out = [sinusoid(t, dim, base=base, layout="concat", dtype=dtype) for t in tables]
    return np.stack(out) if bi_data else out[0]


@accepts_tensors
def xl_position_term(
    q: ArrayLike,
    r: ArrayLike,
    *,
    bias: Optional[ArrayLike] = None,
    k_len: Optional[int] = None,
    q_offset: Optional[int] = None,
    causal: bool = False,
    scores: Optional[Array] = None,
) -> Array:
    """Transformer-XL / XLNet's position term ``(q_i + v) . r[i - j]``, shifted by indexing.

    Parameters
    ----------
    q : array_like (..., heads, q_len, head_dim)
        The queries (XLNet's ``q_head``, heads before positions).
    r : array_like (..., heads, rows, head_dim)
        The projected relative table (XLNet's ``k_head_r``: the table of
        :func:`xl_relative_table` times ``W_R``, per head); row ``t`` holds
        distance ``k_len - t``.  Leading axes broadcast against `q`'s (with
        ``bi_data`` each half of the batch has its own).
    bias : array_like (heads, head_dim), optional
        The position bias ``v`` (XLNet's ``r_r_bias``, Transformer-XL's
        ``r_r_bias``).
    k_len : int, optional
        Number of keys: `scores`' last axis, else ``rows - q_len`` (the
        ``"bi"`` table).
    q_offset : int, optional
        Query ``i`` sits at ``q_offset + i``; ``k_len - q_len`` by default
        (the newest tokens after a memory).
    causal : bool
        Skip the keys after each query (they are masked), as the ``"uni"``
        table, which has no rows for them, requires; their scores are left
        as they are.
    scores : ndarray (..., heads, q_len, k_len), optional
        Scores to add the term into, in place (returned).
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray (..., heads, q_len, k_len)
        ``(q_i + v) . r[k_len - (q_offset + i - j)]``, or `scores` with it added.

    Notes
    -----
    Row ``i`` of ``(q + v) @ r^T`` read from column ``k_len - q_offset - i``
    on is row ``i`` of XLNet's ``rel_shift_bnij`` (Transformer-XL's
    ``_rel_shift`` for past keys).  BLAS makes those products a block of
    rows at a time, for the ``k_len + rows - 1`` columns the block reads,
    and the C kernel adds each row's slice into the scores directly.

    Raises
    ------
    TypeError
        `q`, `r` or `bias` not a float array; `scores` not writable in place.
    ValueError
        Mismatched heads, head_dim, leading axes or `scores` shape, or an
        `r` without rows for the distances the scores need (it says which).

    Examples
    --------
    The relative shift is an index: score (i, j) reads row ``k_len - (i - j)``.

    >>> import numpy as np
    >>> import posenc
    >>> rng = np.random.default_rng(0)
    >>> q = rng.standard_normal((2, 3, 4))  # (heads, q_len, head_dim)
    >>> r = rng.standard_normal((2, 6, 4))  # the "bi" table: k_len + q_len rows
    >>> term = posenc.xl_position_term(q, r)
    >>> term.shape
    (2, 3, 3)
    >>> i, j = np.arange(3)[:, None], np.arange(3)[None, :]
    >>> rows = r[:, 3 - (i - j)]  # row k_len - (q_offset + i - j), q_offset = 0
    >>> np.allclose(term, np.einsum("hid,hijd->hij", q, rows))
    True
    """
    return sum_parts(*xl_term(q, r, bias, k_len, q_offset, causal, scores))


@accepts_tensors
def xl_content_bias(k: ArrayLike, bias: ArrayLike, *, scores: Optional[Array] = None) -> Array:
    """Transformer-XL / XLNet's content bias ``u . k_j``, the same for every query.

    Parameters
    ----------
    k : array_like (..., heads, k_len, head_dim)
        The content keys (XLNet's ``k_head_h``).
    bias : array_like (heads, head_dim)
        ``u`` (XLNet's and Transformer-XL's ``r_w_bias``).
    scores : ndarray (..., heads, q_len, k_len), optional
        Scores to add it into, in place (returned).
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray (..., heads, 1, k_len)
        ``u . k_j``, which broadcasts over the queries; or `scores` with it
        added.  With the content product ``q @ k^T`` it makes XLNet's
        ``ac = (q + u) . k``.

    Raises
    ------
    TypeError
        `bias` None or not a float array, `k` not one, or `scores` that
        cannot be written in place.
    ValueError
        `bias` not of shape (heads, head_dim), or `scores` of a shape the
        term does not broadcast to.

    Examples
    --------
    One row per head, which broadcasts over the queries:

    >>> import numpy as np
    >>> import posenc
    >>> k = np.linspace(-1.0, 1.0, 40).reshape(2, 5, 4)  # (heads, k_len, head_dim)
    >>> u = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0]])
    >>> term = posenc.xl_content_bias(k, u)
    >>> term.shape
    (2, 1, 5)
    >>> np.allclose(term[:, 0], np.einsum("hd,hjd->hj", u, k))
    True
    """
    k = qk_array(k, "k")
    heads, k_len, d = k.shape[-3:]
    if bias is None:
        raise TypeError("bias must be an array of shape (heads, head_dim), not None")
    u = bias_vector(bias, heads, d, "bias")
    work = working_dtype(k.dtype, u.dtype)
    keep = bf16_kept(work, k.dtype, u.dtype)
    kw, uw = operand(k, work, keep), operand(u, work, keep, copy=True)
    if scores is None:
        term = dot_products(uw, kw)  # (..., h, 1, k)
        return rounded(term, promoted_dtype_of(k, u))
    sc = scores_array(scores)
    q_len = sc.shape[-2] if sc.ndim >= 3 else 0
    target = scores_target(scores, k.shape[:-3], (heads, q_len, k_len))
    term = dot_products(uw, kw)
    add_dense(target, term)
    return target


# ---------------------------------------------------------------- TENER


def _tener_frequencies(dim, base):
    half = dim // 2
    return np.exp(-np.arange(half, dtype=np.float64) * (math.log(base) / (half - 1)))


@accepts_tensors
def tener_relative_table(
    length: int,
    dim: int,
    *,
    base: float = 10000.0,
    dtype: Optional[DTypeLike] = None,
) -> NDArray[Any]:
    """TENER's direction-aware relative sinusoid table.

    Parameters
    ----------
    length : int
        The sequence length ``L``.
    dim : int
        The head dimension, even and >= 4.
    base : float
    dtype : float16, bfloat16, float32 (default) or float64
        As for :func:`xl_relative_table`.
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray (2 * length, dim)
        Row ``t`` holds position ``p = t - length`` (``-L .. L-1``):
        ``[sin(p w_0), ..., sin(p w_{h-1}), cos(p w_0), ..., cos(p w_{h-1})]``
        with ``h = dim / 2`` and ``w_i = base ** (-i / (h - 1))`` (the
        tensor2tensor spacing TENER's code uses, not ``-2i/dim``).  The sines
        change sign with the direction, the cosines do not: ``R[-p]`` and
        ``R[p]`` tell before from after.

    Raises
    ------
    TypeError
        A size, base or dtype of the wrong kind.
    ValueError
        `length` < 1, `dim` odd or < 4, `base` <= 0, or a table too large
        to allocate.

    Examples
    --------
    >>> import numpy as np
    >>> import posenc
    >>> table = posenc.tener_relative_table(3, 4, dtype="float64")
    >>> table.shape  # positions -3 .. 2
    (6, 4)
    >>> p = np.arange(-3, 3)[:, None]
    >>> w = 10000.0 ** -np.arange(2)  # h = 2: w_i = base ** (-i / (h - 1))
    >>> np.allclose(table, np.concatenate([np.sin(p * w), np.cos(p * w)], axis=1))
    True
    """
    length = v.integer(length, "length", minimum=1)
    dim = v.integer(dim, "dim")
    if dim < 4 or dim % 2:
        raise ValueError(f"dim must be an even integer >= 4, got {dim}")
    base = v.real(base, "base", positive=True)
    dtype = v.result_dtype(dtype, None, bfloat16=True)
    v.shape_size((2 * length, dim), "result")
    pos = np.arange(-length, length, dtype=np.float64)
    out = np.empty((2 * length, dim), dtype)
    _core.sinusoid(
        pos, _tener_frequencies(dim, base), v.for_kernel(out), _core.SINUSOID_LAYOUTS["concat"]
    )
    return out


@accepts_tensors
def tener_position_term(
    q: ArrayLike,
    k: ArrayLike,
    table: ArrayLike,
    *,
    v: Optional[ArrayLike] = None,
    key_term: bool = True,
    scores: Optional[Array] = None,
) -> Array:
    """TENER's position terms ``(q_i + v) . R[j - i] + k_j . R[i - j]``.

    Parameters
    ----------
    q, k : array_like (..., heads, L, head_dim)
        Queries and keys of one sequence (self-attention).
    table : array_like (2 * M, head_dim), M >= L
        :func:`tener_relative_table` ``(M, head_dim)``: row ``M + p`` holds
        position ``p``.
    v : array_like (heads, head_dim), optional
        The position bias (TENER's code calls it ``r_w_bias``).
    key_term : bool
        Include the key's term ``k_j . R[i - j]`` that TENER's code adds
        (its ``E_``, the ``_transpose_shift``); the paper's formula has
        only the query's.
    scores : ndarray (..., heads, L, L), optional
        Scores to add into, in place (returned).
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray (..., heads, L, L), or `scores` with the terms added.

    Raises
    ------
    ValueError
        `k` not as long as `q`, a `table` of fewer than ``2 * L`` rows or
        another head_dim, or mismatched heads, leading axes or `scores`.
    TypeError
        A float array expected (`q`, `k`, `table`, `v`) and something else
        given, or `scores` that cannot be written in place.

    Examples
    --------
    Row ``M + p`` of the table holds position ``p``, here with ``M = L = 3``:

    >>> import numpy as np
    >>> import posenc
    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.standard_normal((2, 2, 3, 4))  # (heads, L, head_dim) each
    >>> R = posenc.tener_relative_table(3, 4, dtype="float64")  # row 3 + p: position p
    >>> term = posenc.tener_position_term(q, k, R)
    >>> term.shape
    (2, 3, 3)
    >>> i, j = np.arange(3)[:, None], np.arange(3)[None, :]
    >>> query_side = np.einsum("hid,ijd->hij", q, R[3 + j - i])  # q_i . R[j - i]
    >>> key_side = np.einsum("hjd,ijd->hij", k, R[3 + i - j])  # k_j . R[i - j]
    >>> np.allclose(term, query_side + key_side)
    True
    """
    return sum_parts(*tener_term(q, k, table, v, key_term, scores))


@accepts_tensors
def tener_scores(
    q: ArrayLike,
    k: ArrayLike,
    table: ArrayLike,
    *,
    u: Optional[ArrayLike] = None,
    v: Optional[ArrayLike] = None,
    scale: bool = False,
    key_term: bool = True,
) -> Array:
    """TENER's attention scores (before the mask and softmax).

    Parameters
    ----------
    q, k, table : array_like
        As in :func:`tener_position_term`: queries and keys ``(..., heads,
        L, head_dim)`` and the table of :func:`tener_relative_table`.
    u, v : array_like (heads, head_dim), optional
        The content bias (TENER's code: ``r_r_bias``) and the position
        bias (``r_w_bias``).
    scale : bool
        Divide by ``sqrt(head_dim)`` (TENER drops the scale for NER).
    key_term : bool
        As in :func:`tener_position_term`.
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray (..., heads, L, L) of the inputs' promoted dtype
        ``((q_i + u) . k_j + (q_i + v) . R[j - i] + k_j . R[i - j]) / s``,
        ``s = sqrt(head_dim)`` with `scale`, else 1.

    Raises
    ------
    TypeError, ValueError
        As :func:`tener_position_term`, and for `u` as for `v`.

    Examples
    --------
    Without the key's term and with the scale, as the paper writes them:

    >>> import numpy as np
    >>> import posenc
    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.standard_normal((2, 2, 3, 4))  # (heads, L, head_dim) each
    >>> R = posenc.tener_relative_table(3, 4, dtype="float64")
    >>> scores = posenc.tener_scores(q, k, R, scale=True, key_term=False)
    >>> i, j = np.arange(3)[:, None], np.arange(3)[None, :]
    >>> want = (q @ np.swapaxes(k, -1, -2) + np.einsum("hid,ijd->hij", q, R[3 + j - i])) / 2
    >>> np.allclose(scores, want)  # divided by sqrt(head_dim) = 2
    True
    """
    q = qk_array(q, "q")
    heads, length, d = q.shape[-3:]
    k = qk_array(k, "k", heads, d)
    scale = _check.flag(scale, "scale")
    bias_u = bias_vector(u, heads, d, "u")
    R = tener_table(table, d, length)
    work = working_dtype(q.dtype, k.dtype, R.dtype)
    keep = bf16_kept(work, q.dtype, k.dtype, R.dtype, None if bias_u is None else bias_u.dtype)
    qu, ub, _ = left_operand(q, bias_u, work, keep, ("q", "u"))
    if k.shape[-2] != length:
        raise ValueError(
            f"k must have the {length} positions of q (self-attention), not {k.shape[-2]}"
        )
    bias_vector(v, heads, d, "v")  # checked before the product
    checked_size(
        None, lead_shape(q.shape[:-3], k.shape[:-3], names=("q", "k")), (heads, length, length)
    )
    kw = operand(k, work, keep)
    if ub is not None:  # bfloat16's products: the sums start at u's
        scores = biased_products(qu, kw, ub)
    else:
        scores = dot_products(qu, kw)
    tener_position_term.__wrapped_numpy__(q, k, R, v=v, key_term=key_term, scores=scores)
    if scale and d:  # an empty head dim: sums of no products, 0 whatever the scale
        scores /= np.sqrt(work.type(d))
    return rounded(scores, promoted_dtype_of(q, k, R))


# ---------------------------------------------------------------- DeBERTa


@accepts_tensors
def deberta_log_bucket(
    relative_pos: ArrayLike,
    bucket_size: int,
    max_position: int,
    *,
    precision: str = "float32",
) -> Array:
    """DeBERTa's logarithmic buckets of relative positions (``make_log_bucket_position``).

    Parameters
    ----------
    relative_pos : array_like of integers
        Relative positions (DeBERTa's are query - key).
    bucket_size : int
        ``position_buckets`` (256 in DeBERTa-v3), >= 4.
    max_position : int
        ``max_relative_positions`` (512), > bucket_size // 2 + 1; a
        config's -1 stands for its ``max_position_embeddings``, which is
        the number to pass.
    precision : {"float32", "float64"}
        The arithmetic of the logarithmic part: float32 as transformers'
        ``make_log_bucket_position`` (the default, so that posenc gives the
        buckets the models in transformers use), or float64 as the authors'
        code (NumPy).  They differ at some large distances, e.g. from
        ``|d| = 65317`` for (256, 512).
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray of int64, the shape of `relative_pos`
        ``d`` itself for ``|d| <= bucket_size // 2``, else
        ``sign(d) * (mid + ceil(ln(|d| / mid) / ln((max_position - 1) / mid) * (mid - 1)))``,
        ``mid = bucket_size // 2``.

    Raises
    ------
    TypeError
        `relative_pos` not of integers, or a size of the wrong kind.
    ValueError
        `bucket_size` < 4, `max_position` <= ``bucket_size // 2 + 1``,
        distances past +-2**62; and, naming the sizes, where the formula
        has no int64 bucket for a distance given past mid: in float32
        where ``(max_position - 1) / mid`` rounds to 1 (its logarithm 0
        divides; transformers' buckets are inf or nan there), in float64
        where a bucket passes 2**63.  Distances up to mid never read the
        logarithm.

    Examples
    --------
    >>> import numpy as np
    >>> import posenc
    >>> posenc.deberta_log_bucket(np.array([-300, -5, 0, 5, 300]), 256, 512).tolist()
    [-207, -5, 0, 5, 207]
    """
    arr = np.asarray(relative_pos)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"relative_pos must hold integers, not dtype {arr.dtype}")
    bucket_size, max_position = checked_buckets(bucket_size, max_position)
    if bucket_size <= 0:
        raise ValueError(f"bucket_size must be > 0, got {bucket_size}")
    precision = v.choice(precision, "precision", PRECISIONS)
    if arr.size and (arr.max() > 2**62 or arr.min() < -(2**62)):
        raise ValueError("relative_pos must be within +-2**62")
    return log_bucket(arr.astype(np.int64), bucket_size, max_position, precision)


@accepts_tensors
def deberta_relative_positions(
    q_len: int,
    k_len: Optional[int] = None,
    *,
    bucket_size: int = -1,
    max_position: int = -1,
    q_offset: int = 0,
    precision: str = "float32",
) -> NDArray[np.int64]:
    """DeBERTa's relative positions ``query - key`` (``build_relative_position``).

    Parameters
    ----------
    q_len, k_len : int
        Queries and keys (``k_len`` defaults to ``q_len``).
    bucket_size, max_position : int
        With ``bucket_size > 0`` the positions go through
        :func:`deberta_log_bucket` (DeBERTa-v2/v3), whose `max_position` must
        then be >= 1 (a config's -1 stands for its
        ``max_position_embeddings``: pass that); otherwise they are returned
        as they are (v1).
    q_offset : int
        Query ``i`` sits at ``q_offset + i``.
    precision : {"float32", "float64"}
        As in :func:`deberta_log_bucket`.
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray of int64 (q_len, k_len)
        ``(q_offset + i) - j``, bucketed: the opposite sign of
        :func:`posenc.relative_positions`.

    Raises
    ------
    TypeError
        A size or offset of the wrong kind.
    ValueError
        A size < 1, `max_position` < 1 with buckets, or sizes the log
        buckets refuse (:func:`deberta_log_bucket`).

    Examples
    --------
    >>> import posenc
    >>> posenc.deberta_relative_positions(2, 4).tolist()  # query - key
    [[0, -1, -2, -3], [1, 0, -1, -2]]
    """
    q_len = v.integer(q_len, "q_len", minimum=1)
    k_len = q_len if k_len is None else v.integer(k_len, "k_len", minimum=1)
    q_offset = offset(q_offset, q_len, k_len, 0)
    bucket_size, max_position = checked_buckets(bucket_size, max_position)
    precision = v.choice(precision, "precision", PRECISIONS)
    v.shape_size((q_len, k_len), "result")
    dist = -distances(q_len, k_len, q_offset)  # query - key at t
    if bucket_size > 0 and max_position > 0:
        dist = log_bucket(dist, bucket_size, max_position, precision)
    t = (q_len - 1) - np.arange(q_len)[:, None] + np.arange(k_len)[None, :]
    return dist[t]


@accepts_tensors
def deberta_attention_bias(
    q: ArrayLike,
    k: ArrayLike,
    pos_key: Optional[ArrayLike] = None,
    pos_query: Optional[ArrayLike] = None,
    *,
    position_buckets: int = -1,
    max_relative_positions: int = 512,
    q_offset: int = 0,
    scale_factor: Optional[float] = None,
    precision: str = "float32",
    scores: Optional[Array] = None,
) -> Array:
    """DeBERTa's disentangled attention bias: content-to-position and position-to-content.

    Parameters
    ----------
    q, k : array_like (..., heads, q_len | k_len, head_dim)
        Queries and keys (DeBERTa's ``query_layer``, ``key_layer``).
    pos_key : array_like (heads, 2 * span, head_dim), optional
        The relative embeddings through ``pos_key_proj`` (or ``key_proj``
        with ``share_att_key``), per head: the c2p term.  None: no c2p.
    pos_query : array_like (heads, 2 * span, head_dim), optional
        Through ``pos_query_proj`` (or ``query_proj``): the p2c term.
    position_buckets, max_relative_positions : int
        The config's values: ``span = position_buckets`` when > 0, else
        ``max_relative_positions``; with both > 0 the distances are
        log-bucketed (:func:`deberta_log_bucket`).  A config's
        ``max_relative_positions < 1`` (-1, DeBERTa-v3's) stands for its
        ``max_position_embeddings``, as transformers reads it: pass that
        (512 for DeBERTa-v3); -1 itself is refused.
    q_offset : int
        Query ``i`` sits at ``q_offset + i``.
    scale_factor : int, optional
        ``1 +`` the number of terms given (3 with both, as DeBERTa's
        ``pos_att_type = ["c2p", "p2c"]``); each term is divided by
        ``sqrt(head_dim * scale_factor)``.
    precision : {"float32", "float64"}
        Of the log buckets (:func:`deberta_log_bucket`).
    scores : ndarray (..., heads, q_len, k_len), optional
        Scores to add the bias into, in place (returned).
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray (..., heads, q_len, k_len), or `scores` with the bias added
        ``c2p[i, j] = q_i . pos_key[c(i, j)] / s`` and
        ``p2c[i, j] = k_j . pos_query[c(i, j)] / s`` with
        ``c(i, j) = clip(span + bucket((q_offset + i) - j), 0, 2 span - 1)``,
        as transformers' ``DisentangledSelfAttention.disentangled_attention_bias``
        (whose p2c index, ``span - bucket(j - i)``, is the same column
        since the buckets are odd).

    Raises
    ------
    ValueError
        Neither `pos_key` nor `pos_query`; a table without ``2 * span``
        rows; mismatched heads, head_dim, leading axes or `scores` shape;
        sizes the log buckets refuse (:func:`deberta_log_bucket`); or a
        `scale_factor` whose scale is 0, inf or nan.
    TypeError
        Queries, keys or tables not float arrays, sizes not integers, or
        `scores` that cannot be written in place.

    Examples
    --------
    The c2p term alone, without log buckets (span 4, distances clipped):

    >>> import numpy as np
    >>> import posenc
    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.standard_normal((2, 2, 3, 4))  # (heads, length, head_dim) each
    >>> pos_key = rng.standard_normal((2, 8, 4))  # span 4: 2 * span rows
    >>> bias = posenc.deberta_attention_bias(q, k, pos_key, max_relative_positions=4)
    >>> bias.shape
    (2, 3, 3)
    >>> i, j = np.arange(3)[:, None], np.arange(3)[None, :]
    >>> c = np.clip(4 + (i - j), 0, 7)
    >>> s = np.sqrt(4 * 2)  # sqrt(head_dim * scale_factor), c2p alone: scale_factor 2
    >>> np.allclose(bias, np.einsum("hid,hijd->hij", q, pos_key[:, c]) / s)
    True
    """
    return sum_parts(*deberta_term(**locals()))  # the arguments by name, as they came


# ---------------------------------------------------------------- Shaw et al.


@accepts_tensors
def shaw_key_term(
    q: ArrayLike,
    rel_keys: ArrayLike,
    *,
    max_distance: int,
    k_len: Optional[int] = None,
    q_offset: Optional[int] = None,
    scores: Optional[Array] = None,
) -> Array:
    """Shaw et al.'s relative key term ``q_i . a^K[clip(j - qpos, -k, k)]``.

    Parameters
    ----------
    q : array_like (..., heads, q_len, head_dim)
    rel_keys : array_like (2k + 1, head_dim), or (..., heads, 2k + 1, head_dim)
        The relative key embeddings ``a^K``, row ``k + d`` for distance
        ``d = j - qpos`` (shared by the heads, as in tensor2tensor, or one
        table per head).
    max_distance : int
        The clipping distance ``k`` (tensor2tensor's ``max_relative_position``).
    k_len : int, optional
        Number of keys: `scores`' last axis, else `q_len`.
    q_offset : int, optional
        Query ``i`` sits at ``qpos = q_offset + i``; by default
        ``k_len - q_len``, tensor2tensor's convention (the queries are the
        last ``q_len`` of the keys).
    scores : ndarray (..., heads, q_len, k_len), optional
        Scores to add into, in place (returned).
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray (..., heads, q_len, k_len), or `scores` with the term added.

    Raises
    ------
    TypeError
        `q` or `rel_keys` not a float array, `max_distance` not an
        integer, `scores` not writable in place.
    ValueError
        `rel_keys` without ``2 * max_distance + 1`` rows, a negative
        `max_distance`, mismatched heads, head_dim, leading axes or scores.

    Examples
    --------
    Four keys, the three queries the last three of them (``qpos = 1 + i``):

    >>> import numpy as np
    >>> import posenc
    >>> rng = np.random.default_rng(0)
    >>> q = rng.standard_normal((2, 3, 4))  # (heads, q_len, head_dim)
    >>> a = rng.standard_normal((5, 4))  # max_distance 2: distances -2 .. 2
    >>> term = posenc.shaw_key_term(q, a, max_distance=2, k_len=4)
    >>> i, j = np.arange(3)[:, None], np.arange(4)[None, :]
    >>> rows = a[np.clip(j - (1 + i), -2, 2) + 2]
    >>> np.allclose(term, np.einsum("hid,ijd->hij", q, rows))
    True
    """
    return sum_parts(*shaw_term(q, rel_keys, max_distance, k_len, q_offset, scores))


@accepts_tensors
def shaw_value_term(
    weights: ArrayLike,
    rel_values: ArrayLike,
    *,
    max_distance: int,
    q_offset: Optional[int] = None,
) -> Array:
    """Shaw et al.'s relative value term ``sum_j w_ij a^V[clip(j - qpos, -k, k)]``.

    Parameters
    ----------
    weights : array_like (..., heads, q_len, k_len)
        The attention weights (after the softmax).
    rel_values : array_like (2k + 1, head_dim), or (heads, 2k + 1, head_dim)
        The relative value embeddings ``a^V``, row ``k + d`` for distance
        ``d = j - qpos``.
    max_distance : int
        The clipping distance ``k``.
    q_offset : int, optional
        As in :func:`shaw_key_term` (``k_len - q_len`` by default).
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray (..., heads, q_len, head_dim)
        To be added to ``weights @ values``.  The weights are first summed
        per distance bucket (a C scatter, ``(q_len, 2k + 1)`` per head),
        then one BLAS product with the table.

    Raises
    ------
    TypeError
        An input that is not a float array.
    ValueError
        `rel_values` not of ``2k + 1`` rows (one table, or one per head),
        or a negative `max_distance`.

    Examples
    --------
    The weights summed by clipped distance ``j - i``, times the table's rows:

    >>> import numpy as np
    >>> import posenc
    >>> rng = np.random.default_rng(0)
    >>> w = rng.random((2, 3, 3))  # (heads, q_len, k_len)
    >>> a = rng.standard_normal((3, 4))  # max_distance 1: distances -1 .. 1
    >>> out = posenc.shaw_value_term(w, a, max_distance=1)
    >>> out.shape
    (2, 3, 4)
    >>> i, j = np.arange(3)[:, None], np.arange(3)[None, :]
    >>> np.allclose(out, np.einsum("hij,ijd->hid", w, a[np.clip(j - i, -1, 1) + 1]))
    True
    """
    w, rv, index, work = shaw_value_args(weights, rel_values, max_distance, q_offset)
    summed = sum_by_distance(w, index, rv.shape[-2], work)
    with quiet_ieee():
        result = summed @ np.ascontiguousarray(to_dtype(rv, work))
    return rounded(result, promoted_dtype_of(w, rv))


# ---------------------------------------------------------------- TUPE


@accepts_tensors
def tupe_bias(
    pos_q: ArrayLike,
    pos_k: ArrayLike,
    *,
    rel_table: Optional[ArrayLike] = None,
    max_distance: int = 128,
    untie_cls: bool = True,
    scores: Optional[Array] = None,
) -> Array:
    """TUPE's positional attention bias, computed once and shared by the layers.

    Parameters
    ----------
    pos_q, pos_k : array_like (heads, n + 1, head_dim) (or (heads, n, head_dim))
        The position embeddings after TUPE's positional LayerNorm, through
        its positional projections ``U_Q`` and ``U_K``, per head: row 0 is
        the [CLS] slot, rows 1..n the positions of tokens 0..n-1 (TUPE's
        fairseq encoder: ``pos_ln(pos.weight[:n + 1])`` through ``pos_proj``).
        Without `untie_cls`, the ``n`` positions only.
    rel_table : array_like (num_buckets + 1, heads), optional
        TUPE's relative bias (``relative_attention_bias.weight``): rows
        0..num_buckets-1 by T5's bidirectional bucket of ``j - i``
        (:func:`posenc.relative_position_bucket`), the last row for
        others-to-[CLS]; [CLS]-to-others takes row ``num_buckets // 2``.
        Without `untie_cls`, ``(num_buckets, heads)``.  None: no relative term.
    max_distance : int
        TUPE's ``max_rel_pos``.
    untie_cls : bool
        Untie [CLS] (TUPE's default).
    scores : ndarray (..., heads, n, n), optional
        Scores to add the bias into, in place (returned).
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray (heads, n, n), or `scores` with it added
        ``(p_i U_Q)(p_j U_K)^T / sqrt(2 head_dim) + b[bucket(j - i)]``; with
        `untie_cls` row 0 is ``(p_0 U_Q)(p_0 U_K)^T / sqrt(2 d) + b[nb // 2]``
        ([CLS] to others) and column 0 of the other rows
        ``(p_1 U_Q)(p_1 U_K)^T / sqrt(2 d) + b[nb]`` (others to [CLS]).

    Raises
    ------
    ValueError
        `pos_q` and `pos_k` of different shapes, no [CLS] row with
        `untie_cls`, a `rel_table` not of shape (buckets (+ 1), heads) with
        an even number of buckets, or `scores` of another shape.
    TypeError
        `pos_q`, `pos_k` or `rel_table` not float arrays, or `scores` that
        cannot be written in place.

    Examples
    --------
    The positional term alone, [CLS] tied, then the shape with [CLS] untied:

    >>> import numpy as np
    >>> import posenc
    >>> rng = np.random.default_rng(0)
    >>> pos_q, pos_k = rng.standard_normal((2, 2, 4, 8))  # (heads, 1 + n, head_dim) each
    >>> bias = posenc.tupe_bias(pos_q, pos_k, untie_cls=False)
    >>> bias.shape
    (2, 4, 4)
    >>> np.allclose(bias, pos_q @ np.swapaxes(pos_k, -1, -2) / np.sqrt(2 * 8))
    True
    >>> posenc.tupe_bias(pos_q, pos_k).shape  # row 0 the [CLS] slot: n = 3 tokens
    (2, 3, 3)
    """
    pq = float_array(pos_q, "pos_q", 3)
    pk = float_array(pos_k, "pos_k", 3)
    if pq.ndim != 3 or pq.shape != pk.shape:
        raise ValueError(
            f"pos_q and pos_k must have the same shape (heads, positions, head_dim), not "
            f"{pq.shape} and {pk.shape}"
        )
    untie_cls = v.flag(untie_cls, "untie_cls")
    heads, rows, d = pq.shape
    n = rows - 1 if untie_cls else rows
    if n < 0:
        raise ValueError("pos_q must have at least 1 row with untie_cls (the [CLS] slot), not 0")
    table = None
    if rel_table is not None:
        table = float_array(rel_table, "rel_table", 2)
        extra = 1 if untie_cls else 0
        if table.ndim != 2 or table.shape[1] != heads or table.shape[0] < 2 + extra:
            raise ValueError(
                f"rel_table must have shape (num_buckets{' + 1' if untie_cls else ''}, {heads}), "
                f"not {table.shape}"
            )
        nb = table.shape[0] - extra
        if nb % 2:
            raise ValueError(f"rel_table must have an even number of buckets, not {nb}")
        nb, max_distance = _t5_bias.checked_options(True, nb, max_distance)
    dtypes = [pq.dtype, pk.dtype] + ([] if table is None else [table.dtype])
    target, size, work = destination(scores, (), (heads, n, n), dtypes)
    if not size:
        return (
            rounded(np.zeros((heads, n, n), work), promoted_dtype(*dtypes))
            if target is None
            else target
        )
    # an empty head dim: sums of no products, 0 whatever the scale
    qs = to_dtype(pq, work) * work.type(1.0 / math.sqrt(2 * d) if d else 1.0)
    bias = dot_products(qs, to_dtype(pk, work))
    if untie_cls:
        cls_to_others, others_to_cls = bias[:, 0, 0].copy(), bias[:, 1, 1].copy()
        bias = bias[:, 1:, 1:]
        bias[:, :, 0] = others_to_cls[:, None]
        bias[:, 0, :] = cls_to_others[:, None]
    if table is not None:
        t = to_dtype(table, work, copy=True)
        _t5_bias.bias(t[:nb], n, n, True, max_distance, 0, bias, None, single=True)  # in place
        if untie_cls:
            bias[:, 1:, 0] = others_to_cls[:, None] + t[nb][:, None]
            bias[:, 0, :] = cls_to_others[:, None] + t[nb // 2][:, None]
    if target is None:
        return rounded(np.ascontiguousarray(bias), promoted_dtype(*dtypes))
    add_dense(target, bias)
    return target
