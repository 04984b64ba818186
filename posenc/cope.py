"""Contextual position encoding (CoPE), Golovneva et al. 2024.

"Contextual Position Encoding: Learning to Count What's Important"
(arXiv:2405.18719; the authors' code is facebookresearch/RAM,
``projects/cope``).  A position is not the number of tokens between a query
and a key but a count the model chooses: every key ``t`` the query ``i``
sees opens a gate ``g_it = sigmoid(a_it)`` (``a`` the attention logits), and
the position of key ``j`` is the sum of the gates from ``j`` to the query,

    p_ij = min(sum_{t=j}^{i} g_it, npos_max - 1).

Positions are fractional, so the logits of the integer positions,
``z_i[p] = q_i . e[p]``, are interpolated between ``floor(p_ij)`` and
``ceil(p_ij)``, and ``z_i(p_ij)`` is added to the attention scores.

The argument names are those of the authors' module, ``CoPE.forward(query,
attn_logits)`` with its parameter ``pos_emb``: a user of that module passes
the same three things.  The gradient follows the authors' formula as torch
autograd differentiates it: ``floor`` and ``ceil`` are indices without a
gradient, the interpolation weight ``w = p - floor(p)`` carries the gradient
of ``p``, and ``clamp`` passes it only where ``p <= npos_max - 1``.

Everything is computed in float64 and rounded once to the result dtype.  The
forward runs in C (``posenc._core.cope``, :func:`_bias_kernel`) with the bits
of its NumPy formula (:func:`_bias_numpy`); the backward is NumPy.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from . import _validate
from ._interop import foreign
from ._typing import Array, ArrayLike, NDArray

__all__ = ["cope_bias", "cope_bias_grad"]


def _float_array(value, name):
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if arr.dtype.kind != "f" or arr.dtype.itemsize > 8:
        raise TypeError(
            f"{name} must be an array of float16, float32 or float64, not dtype {arr.dtype}"
        )
    return arr


def _finite(arr, name):
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite (found nan or inf)")


class _Args:
    """The checked arguments of a CoPE call."""

    def __init__(self, query, attn_logits, pos_emb, causal, q_offset, check_logits=True):
        query = _float_array(query, "query")
        logits = _float_array(attn_logits, "attn_logits")
        emb = _float_array(pos_emb, "pos_emb")
        if query.ndim < 2:
            raise ValueError(f"query must have shape (..., q_len, head_dim), got {query.shape}")
        if logits.ndim != query.ndim:
            raise ValueError(
                "attn_logits must have shape (..., q_len, k_len) with query's leading axes "
                f"{query.shape[:-1]}, "
                f"got {logits.shape}"
            )
        if logits.shape[:-1] != query.shape[:-1]:
            raise ValueError(
                f"attn_logits must have shape {query.shape[:-1]} + (k_len,), got {logits.shape}"
            )
        d = query.shape[-1]
        if emb.ndim == 2:
            if emb.shape[1] != d:
                raise ValueError(f"pos_emb must have shape (npos_max, {d}), got {emb.shape}")
            self.authors_layout = False
            npos = emb.shape[0]
        elif emb.ndim == 3:
            if emb.shape[0] != 1 or emb.shape[1] != d:
                raise ValueError(
                    f"pos_emb must have shape (npos_max, {d}) or the authors' (1, {d}, npos_max), "
                    f"got {emb.shape}"
                )
            self.authors_layout = True
            npos = emb.shape[2]
        else:
            raise ValueError(
                f"pos_emb must have shape (npos_max, {d}) or (1, {d}, npos_max), got {emb.shape}"
            )
        if npos < 1:
            raise ValueError("pos_emb must hold at least one position (npos_max >= 1)")
        if d < 1 or logits.shape[-1] < 1:
            raise ValueError(
                f"query and attn_logits must not be empty, got {query.shape} and {logits.shape}"
            )
        self.causal = _validate.flag(causal, "causal")
        q_len, k_len = logits.shape[-2:]
        if q_offset is None:
            q_offset = k_len - q_len
        else:
            q_offset = _validate.integer(q_offset, "q_offset")
        _finite(query, "query")
        _finite(emb, "pos_emb")
        self.query, self.logits, self.emb = query, logits, emb
        if check_logits:
            self.check_logits()
        self.npos, self.q_offset = npos, q_offset
        self.dtype = np.result_type(query.dtype, logits.dtype, emb.dtype)

    def check_logits(self):
        """attn_logits refused if it holds nan or +inf (the kernel looks itself)."""
        if np.isnan(self.logits).any() or np.isposinf(self.logits).any():
            raise ValueError("attn_logits must be finite or -inf (masked), found nan or +inf")

    def products(self):
        """z_i[p] = q_i . e[p], float64 (..., q_len, npos_max), by the C core
        (``_core.cope_products``: each sum in the order of the head dim, the
        same bits on every path; BLAS's threads, which wait a while after a
        call, would take the cores from the kernel that follows)."""
        from . import _core

        q = self.query
        rows = np.ascontiguousarray(self.query_rows(), dtype=np.float64)
        z = np.empty((rows.shape[0], self.npos))
        _core.cope_products(rows, self.table_t(), z)
        return z.reshape(q.shape[:-1] + z.shape[-1:])

    def query_rows(self):
        """The queries as rows (rows, head_dim), a view where it can be."""
        q = self.query
        return q.reshape(math.prod(q.shape[:-1]), q.shape[-1])  # (-1 is ambiguous at size 0)

    def table_t(self):
        """pos_emb as float64 (head_dim, npos_max), C-contiguous."""
        return np.ascontiguousarray(self.table().T)

    def table(self):
        """pos_emb as float64 (npos_max, head_dim)."""
        e = self.emb[0].T if self.authors_layout else self.emb
        return e.astype(np.float64)

    def visible(self):
        """(q_len, k_len) True where the query sees the key (all with causal=False)."""
        q_len, k_len = self.logits.shape[-2:]
        q_offset = min(max(self.q_offset, -q_len), k_len)  # the same keys seen, within int64
        i = q_offset + np.arange(q_len)[:, None]
        return np.arange(k_len)[None, :] <= i


def _sigmoid_of(x):
    """1 / (1 + e^-x) of a float64 array, from one exponential that cannot
    overflow: ``(1 or e) / (1 + e)`` with ``e = exp(-|x|)``, 1 where
    ``x >= 0``; 0 at -inf, 1 at +inf.  Made by the C core
    (``_core.cope_gates``, cope.h's pe_cope_gate) with posenc's own exp,
    within 1 ulp of e^-|x|, which the kernel's vector path computes with
    the same bits (NumPy's exp is the C library's or NumPy's own, by CPU)."""
    from . import _core

    flat = np.ascontiguousarray(x, dtype=np.float64).reshape(-1)
    gates = np.empty_like(flat)
    _core.cope_gates(flat, gates)
    return gates.reshape(np.shape(x))


def _sigmoid(a):
    """The gates of attn_logits, float64."""
    return _sigmoid_of(a.logits.astype(np.float64))


def _forward(a):
    """Gates, positions and the interpolation of one checked call, in float64."""
    sig = _sigmoid(a)
    gates = np.where(a.visible(), sig, 0.0) if a.causal else sig
    pos = np.flip(np.cumsum(np.flip(gates, -1), -1), -1)
    clipped = np.minimum(pos, a.npos - 1)
    lo = np.floor(clipped).astype(np.int64)
    hi = np.ceil(clipped).astype(np.int64)
    w = clipped - lo
    e = a.table()
    z = a.products()  # (..., q_len, npos_max)
    z_hi = np.take_along_axis(z, hi, -1)
    z_lo = np.take_along_axis(z, lo, -1)
    return sig, pos, lo, hi, w, e, z_hi, z_lo


def _rows4(x):
    """x of shape (..., q_len, k_len) as a 4-D view (batch, heads, q_len,
    k_len), or None where that would take a copy."""
    if x.ndim <= 4:
        return x.reshape((1,) * (4 - x.ndim) + x.shape)
    try:
        return np.reshape(x, (-1,) + x.shape[-3:], copy=False)
    except (ValueError, TypeError):
        return None


def _kernel_ready(x):
    """A view of x the kernel reads or writes as it is: aligned, native,
    a contiguous last axis."""
    return (
        x is not None
        and x.flags.aligned
        and x.dtype.isnative
        and x.dtype in _KERNEL_DTYPES
        and (x.strides[-1] == x.itemsize or x.shape[-1] == 1)
    )


_KERNEL_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _bias_kernel(a, scores, gates_in_c=True):
    """cope_bias of a checked call by ``_core.cope``, with the bits of
    :func:`_bias_numpy`: the products z made a few rows at a time by the
    function that makes :func:`_forward`'s (``_core.cope_products``' rows,
    the same bits), the gates by the kernel (``gates_in_c``) or given
    (:func:`_sigmoid`), the rest in C.
    None where the arrays are not the kernel's (an empty call, scores it
    cannot write in place, a dtype it lacks): the NumPy path then."""
    from . import _core

    if a.logits.size == 0 or (scores is not None and scores.dtype not in _KERNEL_DTYPES):
        return None
    dst = _rows4(scores) if scores is not None else np.empty(a.logits.shape, a.dtype)
    if scores is not None and not _kernel_ready(dst):
        return None
    if gates_in_c:
        src = _rows4(a.logits)
        if not _kernel_ready(src):
            src = np.ascontiguousarray(a.logits, a.logits.dtype.newbyteorder("="))
            src = _rows4(src)
        elif np.may_share_memory(src, dst) and not _same_view(src, dst):
            src = src.copy()
    else:
        a.check_logits()
        src = _rows4(_sigmoid(a))
    rows = a.query_rows()
    if not _kernel_ready(rows):
        rows = np.ascontiguousarray(rows, rows.dtype.newbyteorder("="))
    q_len, k_len = a.logits.shape[-2:]
    q_offset = min(max(a.q_offset, -q_len), k_len)  # the same keys seen, within int64
    kind = scores is not None, not gates_in_c
    _core.cope(src, rows, a.table_t(), _rows4(dst), a.causal, q_offset, *kind)
    return dst if scores is None else scores


def _same_view(x, y):
    """x and y are the same elements (the kernel's scores may be its logits)."""
    return (
        x.__array_interface__["data"][0] == y.__array_interface__["data"][0]
        and x.strides == y.strides
        and x.dtype == y.dtype
    )


def _bias_numpy(a, scores):
    """cope_bias of a checked call in NumPy float64 (the kernel's twin)."""
    a.check_logits()
    _, _, _, _, w, _, z_hi, z_lo = _forward(a)
    bias = z_hi * w + z_lo * (1.0 - w)
    if scores is None:
        return bias.astype(a.dtype)
    scores[...] = (scores.astype(np.float64) + bias).astype(scores.dtype)
    return scores


@foreign
def cope_bias(
    query: ArrayLike,
    attn_logits: ArrayLike,
    pos_emb: ArrayLike,
    *,
    causal: bool = True,
    q_offset: Optional[int] = None,
    scores: Optional[Array] = None,
) -> NDArray[Any]:
    """CoPE's position logits, ``z_i(p_ij)``, or their add into `scores`.

    Parameters
    ----------
    query : array_like of float, shape ``(..., q_len, head_dim)``
        The queries, e.g. ``(batch, heads, q_len, head_dim)``.
    attn_logits : array_like of float, shape ``(..., q_len, k_len)``
        The attention logits the gates come from (the authors pass
        ``q k^T / sqrt(head_dim)`` with the causal mask's ``-inf`` already
        added); the leading axes are query's.  ``-inf`` (a masked key) gives
        a gate of 0; nan and ``+inf`` are refused.
    pos_emb : array_like of float, shape ``(npos_max, head_dim)``
        The embeddings of the integer positions ``0 .. npos_max - 1``
        (x-transformers' ``CoPE.pos_emb``).  The authors' parameter, of
        shape ``(1, head_dim, npos_max)``, is taken as it is.
    causal : bool
        True (the default): the gates of the keys after the query (key
        ``j > q_offset + i``) are 0, as the authors' causal mask makes them,
        whatever `attn_logits` holds there.  False: every key counts (an
        encoder, or a mask already in `attn_logits` as ``-inf``).
    q_offset : int, optional
        Position of the first query among the keys; defaults to
        ``k_len - q_len`` (the last queries of the sequence, as when
        decoding with a cache).
    scores : ndarray of shape ``(..., q_len, k_len)``, optional
        Attention scores to add the position logits into, in place; returned.
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    numpy.ndarray of shape ``(..., q_len, k_len)``
        In the result dtype of the three inputs (`scores`' own with
        `scores`).  A key after the query gets ``z_i(0)`` (its gates sum
        to 0), as in the authors' module; the causal mask removes it.

    Examples
    --------
    >>> import numpy as np, posenc
    >>> q = np.ones((1, 1, 3, 2))  # (batch, heads, q_len, head_dim)
    >>> logits = np.zeros((1, 1, 3, 3))  # every gate sigmoid(0) = 1/2
    >>> pos_emb = np.zeros((4, 2))
    >>> pos_emb[:, 0] = [0, 1, 2, 3]  # q . e[p] = p
    >>> posenc.cope_bias(q, logits, pos_emb)[0, 0]  # p_ij = (i - j + 1) / 2
    array([[0.5, 0. , 0. ],
           [1. , 0.5, 0. ],
           [1.5, 1. , 0.5]])
    """
    a = _Args(query, attn_logits, pos_emb, causal, q_offset, check_logits=False)
    if scores is not None:
        if not isinstance(scores, np.ndarray):
            raise TypeError(f"scores must be a numpy.ndarray, not {type(scores).__name__}")
        if scores.shape != a.logits.shape:
            raise ValueError(f"scores must have shape {a.logits.shape}, got {scores.shape}")
        if scores.dtype.kind != "f":
            raise TypeError(f"scores must be a float array, not dtype {scores.dtype}")
        _validate.writeable(scores, "scores")
    out = _bias_kernel(a, scores)
    return _bias_numpy(a, scores) if out is None else out


def cope_bias_grad(query, attn_logits, pos_emb, grad, *, causal=True, q_offset=None):
    """The backward of :func:`cope_bias`.

    Parameters
    ----------
    query, attn_logits, pos_emb, causal, q_offset
        As :func:`cope_bias` took them.
    grad : array_like of float, shape ``(..., q_len, k_len)``
        The gradient of the loss with respect to the position logits.

    Returns
    -------
    (d_query, d_attn_logits, d_pos_emb) : tuple of numpy.ndarray
        Shaped as the inputs (``d_pos_emb`` in the layout `pos_emb` came
        in), each in its input's dtype.  As torch autograd of the authors'
        formula: the gradient of ``p`` flows through the interpolation
        weight only, is 0 where ``p`` was clipped (``p > npos_max - 1``) and
        at the keys after the query, and reaches ``attn_logits`` through
        ``sigmoid'``.
    """
    a = _Args(query, attn_logits, pos_emb, causal, q_offset)
    g = _float_array(grad, "grad")
    if g.shape != a.logits.shape:
        raise ValueError(f"grad must have shape {a.logits.shape}, got {g.shape}")
    _finite(g, "grad")
    sig, pos, lo, hi, w, e, z_hi, z_lo = _forward(a)
    g = g.astype(np.float64)
    rows = int(np.prod(a.logits.shape[:-1], dtype=np.int64))
    npos = a.npos
    # d z: each (row, key) scatters into its row's floor and ceil positions.
    base = (np.arange(rows, dtype=np.int64) * npos).reshape(a.logits.shape[:-1] + (1,))
    dz = np.bincount((base + hi).ravel(), weights=(g * w).ravel(), minlength=rows * npos)
    dz += np.bincount((base + lo).ravel(), weights=(g * (1.0 - w)).ravel(), minlength=rows * npos)
    dz = dz.reshape(a.logits.shape[:-1] + (npos,))
    d_query = dz @ e
    d_table = dz.reshape(-1, npos).T @ a.query.astype(np.float64).reshape(-1, e.shape[1])
    # d p: through w only, stopped where clamp cut p.
    dp = np.where(pos <= npos - 1, g * (z_hi - z_lo), 0.0)
    # p_j = sum_{t >= j} g_t, so d g_t = sum_{j <= t} d p_j.
    dgate = np.cumsum(dp, -1)
    if a.causal:
        dgate = np.where(a.visible(), dgate, 0.0)
    # sigmoid'(a) = sigmoid(a) * sigmoid(-a): no cancellation in 1 - sigmoid(a) at large a
    d_logits = dgate * sig * _sigmoid_of(-a.logits.astype(np.float64))
    d_emb = d_table.T[None] if a.authors_layout else d_table
    return (
        d_query.astype(a.query.dtype),
        d_logits.astype(a.logits.dtype),
        d_emb.astype(a.emb.dtype),
    )
