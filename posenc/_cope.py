"""CoPE's kernels' callers: what cope_bias and its backward share.

posenc.cope's functions check `scores` and call these: :class:`Args`, the
checked arguments of a call; :func:`bias_kernel`, the forward by the C core
(``_core.cope``), with the bits of :func:`bias_numpy`, its NumPy formula
in float64; :func:`bias_grad`, the backward (as torch autograd
differentiates the authors' formula), which the backward rules
(posenc._grad) call too: the gradients of the logits, of the queries
and of the table by the C core (:func:`grad_kernel`,
``_core.cope_grad``: no BLAS, whose threads, waiting after a call, would
take the cores from the work that follows) with the bits of
:func:`grad_numpy`, their NumPy formula in float64.
"""

from __future__ import annotations

import math

import numpy as np

from . import _core, _validate


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


class Args:
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


def sigmoid_of(x):
    """1 / (1 + e^-x) of a float64 array, from one exponential that cannot
    overflow: ``(1 or e) / (1 + e)`` with ``e = exp(-|x|)``, 1 where
    ``x >= 0``; 0 at -inf, 1 at +inf.  Made by the C core
    (``_core.cope_gates``, cope.h's pe_cope_gate) with posenc's own exp,
    within 1 ulp of e^-|x|, which the kernel's vector path computes with
    the same bits (NumPy's exp is the C library's or NumPy's own, by CPU)."""
    flat = np.ascontiguousarray(x, dtype=np.float64).reshape(-1)
    gates = np.empty_like(flat)
    _core.cope_gates(flat, gates)
    return gates.reshape(np.shape(x))


def _sigmoid(a):
    """The gates of attn_logits, float64."""
    return sigmoid_of(a.logits.astype(np.float64))


def forward(a):
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


def bias_kernel(a, scores, gates_in_c=True):
    """cope_bias of a checked call by ``_core.cope``, with the bits of
    :func:`bias_numpy`: the products z made a few rows at a time by the
    function that makes :func:`forward`'s (``_core.cope_products``' rows,
    the same bits), the gates by the kernel (``gates_in_c``) or given
    (:func:`_sigmoid`), the rest in C.
    None where the arrays are not the kernel's (an empty call, scores it
    cannot write in place, a dtype it lacks): the NumPy path then."""
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


def bias_numpy(a, scores):
    """cope_bias of a checked call in NumPy float64 (the kernel's twin)."""
    a.check_logits()
    _, _, _, _, w, _, z_hi, z_lo = forward(a)
    bias = z_hi * w + z_lo * (1.0 - w)
    if scores is None:
        return bias.astype(a.dtype)
    scores[...] = (scores.astype(np.float64) + bias).astype(scores.dtype)
    return scores


def grad_numpy(a, g):
    """The backward of a checked call in NumPy float64 (:func:`grad_kernel`'s
    twin): ``(d_logits, d_query, d_table)``, the gradients of the logits and
    the queries in their dtypes and of the table ``(npos_max, head_dim)`` in
    float64.  The gradient of ``z = q . e`` is 0 past each row's largest
    position index (its first key's ceil): the gradients of the queries and
    the table sum its products up to there, each from 0 in the order of the
    positions (the queries') or of the rows (the table's)."""
    sig, pos, lo, hi, w, e, z_hi, z_lo = forward(a)
    g = g.astype(np.float64)
    rows = int(np.prod(a.logits.shape[:-1], dtype=np.int64))
    npos, d = a.npos, e.shape[1]
    # d z: each (row, key) scatters into its row's floor and ceil positions.
    base = (np.arange(rows, dtype=np.int64) * npos).reshape(a.logits.shape[:-1] + (1,))
    dz = np.bincount((base + hi).ravel(), weights=(g * w).ravel(), minlength=rows * npos)
    dz += np.bincount((base + lo).ravel(), weights=(g * (1.0 - w)).ravel(), minlength=rows * npos)
    dz = dz.reshape(rows, npos)
    # d p: through w only, stopped where clamp cut p.
    dp = np.where(pos <= npos - 1, g * (z_hi - z_lo), 0.0)
    # p_j = sum_{t >= j} g_t, so d g_t = sum_{j <= t} d p_j.
    dgate = np.cumsum(dp, -1)
    if a.causal:
        dgate = np.where(a.visible(), dgate, 0.0)
    # sigmoid'(a) = sigmoid(a) * sigmoid(-a): no cancellation in 1 - sigmoid(a) at large a
    d_logits = dgate * sig * sigmoid_of(-a.logits.astype(np.float64))
    # the positions up to each row's largest: its first key's ceil (positions
    # never grow along a row; every key of an empty row has position 0)
    pmax = hi.reshape(rows, -1)[:, 0] if a.logits.shape[-1] else np.zeros(rows, np.int64)
    d_query = np.zeros((rows, d))
    for p in range(npos):
        live = pmax >= p
        d_query[live] = d_query[live] + dz[live, p, None] * e[p]
    q = a.query_rows().astype(np.float64)
    d_table = np.zeros((npos, d))
    for r in range(rows):
        top = pmax[r] + 1
        d_table[:top] = d_table[:top] + dz[r, :top, None] * q[r]
    return (
        d_logits.astype(a.logits.dtype),
        d_query.reshape(a.query.shape).astype(a.query.dtype),
        d_table,
    )


def grad_kernel(a, g):
    """:func:`grad_numpy` by the C core (``_core.cope_grad``), with its bits:
    the products made as :func:`forward` makes them, the rest a row at a
    time, then the table's gradient a few positions at a time.  None for an
    empty call (the NumPy path then)."""
    if a.logits.size == 0 or a.query.shape[-1] == 0:
        return None
    q_len, k_len = a.logits.shape[-2:]
    rows = a.logits.size // k_len

    def as_rows(x, cols):
        x = x.reshape(rows, cols)  # a copy only where no view has this shape
        return x if _kernel_ready(x) else np.ascontiguousarray(x, x.dtype.newbyteorder("="))

    logits, grad = as_rows(a.logits, k_len), as_rows(g, k_len)
    query = a.query_rows()
    if not _kernel_ready(query):
        query = np.ascontiguousarray(query, query.dtype.newbyteorder("="))
    d_logits = np.empty(a.logits.shape, a.logits.dtype)
    d_query = np.empty(a.query.shape, a.query.dtype)
    d_table = np.empty((a.npos, a.query.shape[-1]))
    q_offset = min(max(a.q_offset, -q_len), k_len)  # the same keys seen, within int64
    table = np.ascontiguousarray(a.table())
    _core.cope_grad(logits, grad, query, a.table_t(), table, d_logits.reshape(rows, k_len),
                    d_query.reshape(rows, -1), d_table, q_len, a.causal, q_offset)  # fmt: skip
    return d_logits, d_query, d_table


def bias_grad(query, attn_logits, pos_emb, grad, *, causal=True, q_offset=None):
    """posenc.cope_bias_grad: (d_query, d_attn_logits, d_pos_emb).  The
    kernel refuses logits with nan or +inf and a gradient that is not
    finite itself (before it writes anything); the NumPy path, here."""
    a = Args(query, attn_logits, pos_emb, causal, q_offset, check_logits=False)
    g = _float_array(grad, "grad")
    if g.shape != a.logits.shape:
        raise ValueError(f"grad must have shape {a.logits.shape}, got {g.shape}")
    parts = grad_kernel(a, g)
    if parts is None:
        a.check_logits()
        _finite(g, "grad")
        parts = grad_numpy(a, g)
    d_logits, d_query, d_table = parts
    d_emb = d_table.T[None] if a.authors_layout else d_table
    return d_query, d_logits, d_emb.astype(a.emb.dtype)
