"""The engine of posenc.relative: products made by BLAS a block at a time
and gathered into the scores (or scattered by distance) by the C kernels.

A relative term is a list of `Part`s: score ``(i, j)`` += ``(left @
right^T)[row, columns[q_len - 1 - i + j]] / divisor``, the row i (by query)
or j (by key).  `sum_parts` adds the parts into the scores or a new result:
`_gather_into` makes each part's products a block of rows at a time
(`Blocks`, `_gather_part`) and hands them to ``_core.rel_gather_add``
while in cache; `add_dense` adds a dense term by ``_core.rel_dense_add``;
`sum_by_distance` sums weights by distance (``_core.rel_scatter_add``), for
Shaw's value term and the backward (posenc._grad).

The precision rules live here too: products formed in float32, or float64
when an input or the scores are float64 (`working_dtype`); those of two
bfloat16 operands as the BF16 dot-product instruction forms them, on every
path (`bf16_kept`, `bf16_products`: _core.bf16_products, src/dot.h); a new
result of the inputs' promoted dtype (`promoted_dtype`), rounded once
(`rounded`).
posenc._relative_terms reads and checks a term's arguments, then builds its
parts; here the arrays are the checked ones (only a result's size is
checked against what can be allocated, before it is made).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional, Tuple

import numpy as np

from . import _core
from . import _validate as v
from ._dtypes import bits, is_bfloat16, widen

# ---------------------------------------------------------------- precision


# the element types the gather kernel adds into
_KERNEL_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def working_dtype(*dtypes):
    """The dtype products are formed in: float64 if any input is, else float32."""
    wide = any(v.native_dtype(d) == np.float64 for d in dtypes)  # '>f8' too
    return np.dtype(np.float64) if wide else np.dtype(np.float32)


def quiet_ieee():
    """Products of data holding an infinity or NaN (or overflowing) made
    as IEEE arithmetic makes them, without NumPy's RuntimeWarning: the C
    kernels give the same NaN and inf silently."""
    return np.errstate(invalid="ignore", over="ignore")


def dot_products(left, right):
    """``left @ right^T`` over the last two axes, each operand first laid
    out in C order, so that BLAS sums in one order whatever the caller's
    layout (a Fortran-ordered or strided input gives the bits of the
    contiguous one); see quiet_ieee.  Two bfloat16 operands: bf16_products."""
    if is_bfloat16(left.dtype) and is_bfloat16(right.dtype):
        return bf16_products(left, right)
    left, right = np.ascontiguousarray(left), np.ascontiguousarray(right)
    with quiet_ieee():
        return left @ np.swapaxes(right, -1, -2)


def bf16_kept(work, *dtypes):
    """Whether the products of operands of `dtypes` (None: an operand not
    given) are formed by bf16_products: every one bfloat16 and the products
    float32 (`work`).  Else they are widened to `work` and go to BLAS."""
    return work == np.float32 and all(is_bfloat16(d) for d in dtypes if d is not None)


def operand(x, work, keep, copy=False):
    """`x` as an operand of products: itself, C-contiguous (a copy if
    `copy`), when they are formed by bf16_products (`keep`), else in `work`."""
    if keep:
        return np.array(x, order="C", copy=True) if copy else np.ascontiguousarray(x)
    return to_dtype(x, work, copy=copy)


def left_operand(x, bias, work, keep, names):
    """A part's left operand ``x + bias`` (bias (heads, 1, d) or None) and
    what it sums (the (name, shape) of each, `names` x's and bias'): in
    `work`, a new array; or, where the products are bfloat16's (`keep`),
    `x` itself and the bias apart, for bf16_products to start the sums at
    its products.  Returns (left, bias, sources)."""
    sources = ((names[0], x.shape),) + (() if bias is None else ((names[1], bias.shape),))
    if keep:
        kept = None if bias is None else operand(bias, work, True)
        return operand(x, work, True, copy=True), kept, sources
    if bias is None:
        return to_dtype(x, work, copy=True), None, sources
    return to_dtype(x, work) + to_dtype(bias, work), None, sources


def widened(part):
    """`part` with float32 operands, `left` the sum of its arguments: the
    part as the gradients (posenc._grad) take it."""
    if not is_bfloat16(part.left.dtype):
        return part
    work = np.dtype(np.float32)
    left = to_dtype(part.left, work)
    if part.bias is not None:
        left = left + to_dtype(part.bias, work)
    return part._replace(left=left, right=to_dtype(part.right, work), bias=None)


def _even(x):
    """`x` with a zero column appended where its last axis is odd: the
    kernel takes elements in pairs, a lone last one paired with zero."""
    if x.shape[-1] % 2 == 0:
        return x
    return np.concatenate([x, np.zeros(x.shape[:-1] + (1,), x.dtype)], axis=-1)


def _as_3d(x, lead):
    """`x` (..., rows, d) broadcast to the leading axes `lead` and laid out
    as (n, rows, d): itself where it already is, else a view or a copy."""
    if x.shape[:-2] == lead and len(lead) == 1:
        return x
    x = np.broadcast_to(x, lead + x.shape[-2:])
    return x.reshape((-1,) + x.shape[-2:])


def bf16_products(left, right, out=None, start=None, gather=None):
    """``left @ right^T`` over the last two axes, both bfloat16, (...,
    m, d) and (..., n, d) with broadcasting leading axes, in float32 (into
    `out` if given: (..., m, n), rows apart allowed), each product formed
    as the BF16 dot-product instruction forms it (src/dot.h): pairs of
    elements in order, the second of a pair's products added first, each
    addition rounded once, subnormals flushed to zero, a NaN the quiet NaN
    0x7FC00000, identical on every path.  `start` (..., 1, n) float32:
    the sums start there (a bias's products) rather than at +0.
    `gather` (map, by_key): only the products a gather through `map` reads
    (rel_gather_add's, by key or by query) are made, the others are 0."""
    lead = np.broadcast_shapes(left.shape[:-2], right.shape[:-2])
    m, n = left.shape[-2], right.shape[-2]
    if out is None:
        out = np.empty(lead + (m, n), np.float32)
    if out.size == 0:
        return out
    if left.shape[-1] == 0:  # sums of no products
        out[...] = 0 if start is None else start
        return out
    a, b = _as_3d(bits(_even(left)), lead), _as_3d(bits(_even(right)), lead)
    init = None if start is None else _as_3d(start, lead)[:, 0, :]
    # a new `out` is C-contiguous, a given one 3-D: a view either way
    o = out if out.ndim == 3 else out.reshape((-1, m, n))
    _core.bf16_products(a, b, o, init, *(() if gather is None else gather))
    return out


def to_dtype(x, work, copy=False):
    """`x` in the working dtype `work`, a bfloat16 array widened exactly."""
    if is_bfloat16(x.dtype):
        return widen(x).astype(work, copy=False)
    return x.astype(work, copy=copy)


def promoted_dtype(*dtypes):
    """The dtype of a new result: NumPy's promotion of the inputs' (native);
    bfloat16 alone stays bfloat16 (the first input's kind of it), and with
    float16 or float32 gives float32, as torch promotes (and ml_dtypes adds)."""
    bf16 = [d for d in dtypes if is_bfloat16(d)]
    others = [v.native_dtype(d) for d in dtypes if not is_bfloat16(d)]
    if not bf16:
        return np.result_type(*others)
    return np.result_type(np.float32, *others) if others else bf16[0]


def promoted_dtype_of(*arrays):
    """promoted_dtype of the arrays' dtypes."""
    return promoted_dtype(*[a.dtype for a in arrays])


def rounded(x, dtype):
    """The float32 or float64 array `x` rounded once to `dtype` (a float32
    `x` for bfloat16, rounded to nearest even by the C cast kernel, as
    narrow rounds it)."""
    if not is_bfloat16(dtype):
        return x.astype(dtype, copy=False)
    x = np.ascontiguousarray(x, np.float32).reshape(np.shape(x))  # 0-d stays 0-d
    out = np.empty(x.shape, np.uint16)
    if x.size:
        _core.cast(x.reshape(-1), out.reshape(-1))
    return out.view(dtype)


# ---------------------------------------------------------------- gather


# Bytes of products a gather reads per block: the products of a block are
# made (BLAS) just before the C kernel adds them, and are read from cache.
_BLOCK_BYTES = 1 << 21

# Bytes of products of a group of heads whose two parts are gathered in one
# pass (_gather_pair): both parts' products of the group, read from cache.
_PAIR_BYTES = 1 << 22


def _kernel_dtype(work):
    """The dtype of the products the C kernels add into `work`: float64 for
    float64 scores, else float32."""
    wide = v.native_dtype(work.dtype) == np.float64
    return np.dtype(np.float64) if wide else np.dtype(np.float32)


def _span(x):
    """The contiguous run of `x`'s base (an owning C-contiguous array) from
    `x`'s first element to its last, padding between its rows included; `x`
    itself when it owns its data (or its base is another dtype or not
    contiguous)."""
    base = x.base
    if base is None or x.size == 0 or base.dtype != x.dtype or not base.flags.c_contiguous:
        return x
    first = (x.ctypes.data - base.ctypes.data) // x.itemsize
    last = first + sum((n - 1) * (s // x.itemsize) for n, s in zip(x.shape, x.strides))
    return base.reshape(-1)[first : last + 1]


def biased_products(left, right, bias, out=None, gather=None, start=None):
    """``(left + bias) @ right^T``, all bfloat16 (bias (..., 1, d) or None),
    by bf16_products (into `out` if given): each sum starts at the bias's
    products, then left's pairs are added (no rounding of ``left + bias``
    to bfloat16).  A column whose bias product is not finite (an infinite
    or NaN row of `right` or bias, or an overflow) is made as the sum is
    written instead, ``left + bias`` in float32 times the row (BLAS): the
    infinities and NaNs of the sum, not those of its two halves.
    `gather`: see bf16_products; `start`: the bias's products, where the
    caller has them (bf16_products(bias, right))."""
    if bias is None:
        return bf16_products(left, right, out, gather=gather)
    if start is None:
        start = bf16_products(bias, right)
    p = bf16_products(left, right, out, start, gather)
    bad = ~np.isfinite(start[..., 0, :])  # (..., n)
    if bad.any():
        f4 = np.dtype(np.float32)
        lw = to_dtype(left, f4) + to_dtype(bias, f4)
        lw = np.broadcast_to(lw, p.shape[:-1] + lw.shape[-1:])
        rw = np.broadcast_to(to_dtype(right, f4), p.shape[:-2] + right.shape[-2:])
        for lead in np.ndindex(*bad.shape[:-1]):
            cols = np.flatnonzero(bad[lead])
            if cols.size:
                with quiet_ieee():
                    p[lead][:, cols] = lw[lead] @ rw[lead][cols].T
    return p


# Rows of a block whose products BLAS makes apart, each chunk only for the
# columns its rows read (_chunks)
_CHUNK_ROWS = 128


def _chunks(rows, width, gather):
    """(r0, r1, c0, c1) for each chunk of _CHUNK_ROWS of a block's `rows`
    that reads a column through the gather (map, by_key): the columns c0:c1
    it reads (rel_gather_add's rows r0:r1 read map[s : s + other] with s =
    rows - 1 - r by query, r by key).  None where the chunks would make
    more than 85% of the block's rows x `width` products: then one product
    makes them all.  A run of slope 1 or -1 (Transformer-XL's shift, TENER)
    reads other + rows - 1 columns over a block, other + 127 over a chunk."""
    index, by_key = gather
    other = len(index) - rows + 1
    chunks, total = [], 0
    for r0 in range(0, rows, _CHUNK_ROWS):
        r1 = min(rows, r0 + _CHUNK_ROWS)
        s0 = r0 if by_key else rows - r1
        window = index[s0 : s0 + r1 - r0 - 1 + other]
        read = window[window >= 0]
        if read.size:
            c0, c1 = int(read.min()), int(read.max()) + 1
            chunks.append((r0, r1, c0, c1))
            total += (r1 - r0) * (c1 - c0)
    return chunks if total < 0.85 * rows * width else None


def _block_products(left, right, divisor, kind, out=None, bias=None, gather=None, chunks=None):
    """``left @ right^T / divisor`` (divisor None: undivided), made in the
    inputs' dtype (into `out` if given: rows apart in a contiguous array,
    _padded_rows or _walked_products, divided with the padding between
    them (_span), in one pass rather than NumPy's slower strided one) and
    rounded to `kind`, the dtype the kernel reads.  bfloat16 operands go
    to bf16_products, the sums starting at the products of a bias (a row
    (heads, 1, d) added to every row of `left`) if `bias` (the row, its
    products with `right`) is given, only the products the gather (map,
    by_key) reads if given; by BLAS in `chunks` of rows into `out` where
    given (_chunks, of the same gather), the products no chunk reads left
    as they were."""
    if is_bfloat16(left.dtype):
        row, start = (None, None) if bias is None else bias
        p = biased_products(left, right, row, out, gather, start)
    elif chunks is not None and out is not None:
        for r0, r1, c0, c1 in chunks:
            rt = np.swapaxes(right[..., c0:c1, :], -1, -2)
            np.matmul(left[..., r0:r1, :], rt, out=out[..., r0:r1, c0:c1])
        p = out
    else:
        p = np.matmul(left, np.swapaxes(right, -1, -2), out=out)
    if divisor is not None:
        whole = p if out is None else _span(out)
        np.divide(whole, divisor, out=whole)
    return p.astype(kind, copy=False)


def _made_in(left):
    """The dtype a part's products are made in: its operands', float32 for
    bfloat16 ones (bf16_products)."""
    return np.dtype(np.float32) if is_bfloat16(left.dtype) else left.dtype


def _gather_part(work, lead, left, right, index, by_key, divisor, bias=None):
    """work (batch, heads, q, k) += the gather of ``left @ right^T`` at `index`.

    left (..., heads, rows of the map's side, d), right (..., heads or 1,
    columns, d), both of the dtype the products are made in, leading
    axes broadcasting to `lead` (the target's); the products are rounded to
    the kernel's float32 or float64 after `divisor` divides them.  `bias`
    (heads, 1, d), bfloat16 operands only: the sums start at its products
    (made once for every block).
    The products are made a block of rows at a time (Blocks), each block
    only for the columns its part of the map reaches, and gathered while in
    cache: no products of the whole term exist at once.  Between BLAS's
    threads, the kernel runs on one: alternating two teams of threads on
    the same cores costs more than the second thread gains."""
    batch, heads, q_len, k_len = work.shape
    wdt = _kernel_dtype(work)
    n = k_len if by_key else q_len
    d, cols = left.shape[-1], right.shape[-2]
    blocks = Blocks(heads, q_len, k_len, cols, max(wdt.itemsize, left.dtype.itemsize), by_key)
    lefts = np.broadcast_to(left, lead + (heads, n, d))
    rights = np.broadcast_to(right, lead + (heads, cols, d))
    single = batch * blocks.count > 1
    spans = blocks.spans(index)
    walked = by_key and _made_in(left) == wdt  # a row per step: rows apart, aligned to the loads
    runs = {span[0]: _main_run(span[4]) for span in spans} if walked else {}
    # each span's chunks of rows for BLAS, the same for every head and batch
    cuts = (
        {}
        if is_bfloat16(left.dtype)
        else {a0: _chunks(a1 - a0, c1 - c0, (m, by_key)) for a0, a1, c0, c1, m in spans}
    )
    # by query, one buffer for every block's products (a fresh one per block
    # costs the system's pages each time: their faults took as long as the
    # products themselves)
    widest = max((c1 - c0 for _, _, c0, c1, _ in spans), default=0)
    shared = None if walked else np.empty((blocks.group, blocks.step, widest), wdt)
    if bias is not None:
        starts = np.broadcast_to(bf16_products(bias, right), lead + (heads, 1, cols))
    # bfloat16 operands of an even depth whose bias products are finite (as
    # good as always): their bits straight to the kernel, block by block
    direct = is_bfloat16(left.dtype) and d % 2 == 0 and d > 0
    direct = direct and (bias is None or bool(np.isfinite(starts).all()))
    if direct:
        lefts, rights = bits(lefts), bits(rights)
    for b, at in enumerate(np.ndindex(*lead)):
        lb, rb, wb = lefts[at], rights[at], work[b : b + 1]
        for h0, h1, a0, a1, c0, c1, local in blocks.of(spans):
            view = wb[:, h0:h1, :, a0:a1] if by_key else wb[:, h0:h1, a0:a1, :]
            if walked:
                p = _walked_products((h1 - h0, a1 - a0, c1 - c0), wdt, runs[a0], q_len)
            else:
                p = shared[: h1 - h0, : a1 - a0, : c1 - c0]
            lr = lb[h0:h1, a0:a1], rb[h0:h1, c0:c1]
            if direct:
                start = None if bias is None else starts[at][h0:h1, 0, c0:c1]
                _core.bf16_products(*lr, p, start, local, by_key)
                if divisor is not None:
                    np.divide(_span(p), divisor, out=_span(p))
            else:
                hb = None if bias is None else (bias[h0:h1], starts[at][h0:h1, :, c0:c1])
                p = _block_products(*lr, divisor, wdt, p, hb, (local, by_key), cuts.get(a0))
            _core.rel_gather_add(p[None], local, v.for_kernel(view), by_key, single)


def _pairs(parts):
    """Whether `parts` are a part by query followed by a part by key through
    one map, the same array (DeBERTa's c2p and p2c, which posenc.relative
    builds on one), which _gather_pair adds in one pass."""
    if len(parts) != 2 or parts[0].by_key or not parts[1].by_key:
        return False
    return parts[0].columns is parts[1].columns and parts[0].bias is parts[1].bias is None


def _gather_pair(work, lead, first, then):
    """work (batch, heads, q, k) += the gather of `first` (a Part by
    query), then of `then` (by key, the same map), in one pass over the
    scores: each score takes first's product, rounded into the scores'
    dtype, then then's, as _gather_part applied to each in turn adds them.
    The products of both, for a group of heads at a time (_PAIR_BYTES), all
    of its rows and the columns the map reaches, are made just before the C
    kernel reads them.  False, nothing done, where one head's products
    exceed that: the parts then go one at a time, a block each."""
    batch, heads, q_len, k_len = work.shape
    wdt, index = _kernel_dtype(work), first.columns
    valid = index >= 0
    if not valid.any():
        return True
    c0, c1 = int(index[valid].min()), int(index[valid].max()) + 1
    local = index - c0 if valid.all() else np.where(valid, index - c0, -1)
    itemsize = max(wdt.itemsize, first.left.dtype.itemsize, then.left.dtype.itemsize)
    size = (q_len + k_len) * (c1 - c0) * itemsize  # one head's products
    if size > _PAIR_BYTES:
        return False
    group = max(1, min(heads, _PAIR_BYTES // size))
    d = first.left.shape[-1]
    operands = [
        (
            np.broadcast_to(p.left, lead + (heads, n, d)),
            np.broadcast_to(p.right, lead + (heads, p.right.shape[-2], d)),
        )
        for p, n in ((first, q_len), (then, k_len))
    ]
    walked, padded = _made_in(then.left) == wdt, _made_in(first.left) == wdt
    run = _main_run(local) if walked else None
    single = batch * -(-heads // group) > 1
    # one buffer each for every group: rows an odd number of cache lines
    # apart, which the pass reads eight at a time
    rows = _padded_rows((group, q_len, c1 - c0), wdt, np.empty) if padded else None
    keys = _walked_products((group, k_len, c1 - c0), wdt, run, q_len) if walked else None
    cuts = [
        None if is_bfloat16(p.left.dtype) else _chunks(n, c1 - c0, (local, by_key))
        for p, n, by_key in ((first, q_len, False), (then, k_len, True))
    ]
    for b, at in enumerate(np.ndindex(*lead)):
        (lq, rq), (lk, rk) = ((left[at], right[at]) for left, right in operands)
        for h0 in range(0, heads, group):
            h1 = min(heads, h0 + group)
            out = None if rows is None else rows[: h1 - h0]
            lr = lq[h0:h1], rq[h0:h1, c0:c1]
            pq = _block_products(*lr, first.divisor, wdt, out, None, (local, False), cuts[0])
            out = None if keys is None else keys[: h1 - h0]
            lr = lk[h0:h1], rk[h0:h1, c0:c1]
            pk = _block_products(*lr, then.divisor, wdt, out, None, (local, True), cuts[1])
            view = v.for_kernel(work[b : b + 1, h0:h1])
            _core.rel_gather_add(pq[None], local, view, False, single, pk[None])
    return True


class Blocks:
    """The blocks a gathered part is made in: a group of heads and a block
    of rows (by query) or keys (by key), each for the columns its part of
    the map reaches (a block of rows of Transformer-XL's shift reaches
    k_len + rows - 1 of its q_len + k_len columns), at most about
    _BLOCK_BYTES of products of `itemsize` bytes.  The forward gathers each
    block's products, the backward scatters each block's gradient."""

    def __init__(self, heads, q_len, k_len, cols, itemsize, by_key):
        n, other = (k_len, q_len) if by_key else (q_len, k_len)
        size = n * min(cols, n + other - 1) * itemsize  # one head's products, at most
        if size <= _BLOCK_BYTES:
            self.step, self.group = n, max(1, min(heads, _BLOCK_BYTES // max(size, 1)))
        else:
            rows = _BLOCK_BYTES // (itemsize * min(cols, other + 64))
            self.step, self.group = max(8, rows - rows % 8), 1
        self.heads, self.q_len, self.k_len, self.n, self.by_key = heads, q_len, k_len, n, by_key
        self.count = -(-heads // self.group) * -(-n // self.step)

    def spans(self, index):
        """(a0, a1, c0, c1, local) for each block of rows (or keys) a0:a1
        that reads a column: columns c0:c1 of the products, and the block's
        own map (columns from c0, -1: none) in the gather's orientation;
        the same for every group of heads and every batch."""
        q_len, k_len, spans = self.q_len, self.k_len, []
        for a0 in range(0, self.n, self.step):
            a1 = min(self.n, a0 + self.step)
            if self.by_key:
                m = index[a0 : a0 + q_len + a1 - a0 - 1]
            else:
                m = index[q_len - a1 : q_len - a1 + a1 - a0 + k_len - 1]
            valid = m >= 0
            if not valid.any():
                continue
            c0, c1 = int(m[valid].min()), int(m[valid].max()) + 1
            local = m - c0 if c0 == 0 or valid.all() else np.where(valid, m - c0, -1)
            spans.append((a0, a1, c0, c1, local))
        return spans

    def of(self, spans):
        """(h0, h1, a0, a1, c0, c1, local) for each group of heads h0:h1
        and each of the `spans`."""
        for h0 in range(0, self.heads, self.group):
            for span in spans:
                yield (h0, min(self.heads, h0 + self.group)) + span


def _work_of(target):
    """`target` (..., heads, q, k) as one (batch, heads, q, k) array the C
    kernels add into, and whether it is `target` itself (a view) rather
    than a temporary to copy back; (None, True) for an empty target.  A
    target they cannot add into where it is (byte-swapped, unaligned,
    strided last axis, leading axes that do not merge, a dtype they do not
    know) goes through a native C-contiguous temporary (float32 for an
    unknown dtype).  bfloat16 scores (ml_dtypes' or posenc's bits) are
    added into as they are."""
    bf16 = is_bfloat16(target.dtype)
    native = v.native_dtype(target.dtype)
    known = bf16 or native in _KERNEL_DTYPES
    views = v.bias_views(target) if known else None
    if views == []:
        return None, True
    if views is not None and len(views) == 1:
        return views[0], True
    kind = native if known else np.dtype(np.float32)
    return np.array(target, dtype=kind, order="C").reshape((-1,) + target.shape[-3:]), False


class Part(NamedTuple):
    """One gathered product of a term: score (i, j) += ``(left @ right^T)
    [row, columns[q_len - 1 - i + j]] / divisor``, the row i (by query) or j
    (by key); right (..., heads or 1, columns, d).  `left` is the sum of the
    arguments `left_from` names (name, shape as broadcast into it), `right`
    the argument `right_from` names: what the gradients
    (posenc._grad) flow back to.  Where the products are bfloat16's
    (bf16_kept), `left` is the first of those arguments and `bias` (heads,
    1, d) the second, whose products the sums start at (left_operand);
    `widened` gives the part in float32, `left` the sum."""

    left: np.ndarray
    right: np.ndarray
    columns: np.ndarray
    by_key: bool
    divisor: Any
    left_from: Tuple[Tuple[str, Tuple[int, ...]], ...]
    right_from: Tuple[str, Tuple[int, ...]]
    bias: Optional[np.ndarray] = None


def _gather_into(target, parts):
    """target (..., heads, q, k) += each part's gathered products, in place
    (through _work_of).

    parts: Part: the products ``left @ right^T`` (divided by `divisor` if
    not None), score (i, j) reading row i (by query) or j (by key) at column
    columns[q_len - 1 - i + j] (-1: none), see _gather_part."""
    work, direct = _work_of(target)
    if work is None:
        return
    # inputs read as they were before the call, as NumPy's ufuncs read them,
    # although the scores they share memory with are written first
    parts = [
        p._replace(
            left=v.copy_if_shared(p.left, target),
            right=v.copy_if_shared(p.right, target),
            bias=None if p.bias is None else v.copy_if_shared(p.bias, target),
        )
        for p in parts
    ]
    with quiet_ieee():
        if not (_pairs(parts) and _gather_pair(work, target.shape[:-3], *parts)):
            for p in parts:
                lead = target.shape[:-3]
                _gather_part(work, lead, p.left, p.right, p.columns, p.by_key, p.divisor, p.bias)
    if not direct:
        np.copyto(target, work.reshape(target.shape), casting="unsafe")


def add_dense(target, term):
    """target (..., heads, q, k) += term (..., heads, 1 or q, k) (float32 or
    float64, its leading axes broadcasting to the target's), the sum rounded
    once to the target's dtype, as ``np.add(target, term, casting="unsafe")``
    rounds it: by the C kernel (through _work_of; bfloat16 sums made in
    float32), or by NumPy for a float64 term into scores of less precision
    or scores of a dtype the kernel does not know."""
    bf16 = is_bfloat16(target.dtype)
    native = v.native_dtype(target.dtype)
    if bf16:
        term = term.astype(np.float32, copy=False)
    kind = np.dtype(np.float64) if native == np.float64 else np.dtype(np.float32)
    if not (bf16 or native in _KERNEL_DTYPES) or term.dtype != kind:
        np.add(target, term, out=target, casting="unsafe")
        return
    work, direct = _work_of(target)
    if work is None:
        return
    full = np.broadcast_to(term, target.shape[:-3] + term.shape[-3:])
    _core.rel_dense_add(full.reshape((-1,) + full.shape[-3:]), v.for_kernel(work))
    if not direct:
        np.copyto(target, work.reshape(target.shape), casting="unsafe")


def sum_parts(scores, lead, shape, dtype, parts):
    """The terms added into `scores` (returned; each term rounded to the
    scores' dtype, then added), or, without scores, summed in the working
    precision (float32, or float64) into a new array rounded once to `dtype`."""
    if scores is not None:
        _gather_into(scores, parts)
        return scores
    v.shape_size(lead + shape, "result")
    kind = np.dtype(np.float64) if v.native_dtype(dtype) == np.float64 else np.dtype(np.float32)
    result = np.zeros(lead + shape, kind)
    _gather_into(result, parts)
    return result if kind == dtype else rounded(result, dtype)


# ---------------------------------------------------------------- scatter by distance


def odd_lines(n, dtype):
    """Items in the fewest 64-byte cache lines, an odd number of them,
    that hold n items of `dtype`."""
    line = 64 // dtype.itemsize
    lines = -(-n // line)
    return (lines + 1 - lines % 2) * line


def _padded_rows(shape, dtype, make=np.zeros):
    """An array of `shape` (made by `make`) whose rows lie an odd number of
    64-byte cache lines apart: a kernel that reads or writes a row per step
    (the gather and the scatter by key) then spreads its rows over every
    cache set, where rows a multiple of 4 KiB apart (or of 2 KiB, ...)
    would share a few sets."""
    return make(shape[:-1] + (odd_lines(shape[-1], dtype),), dtype)[..., : shape[-1]]


def _main_run(index):
    """(slope, index[t] - slope * t) of the run of slope 1 or -1 that holds
    most of the map `index` (at least the 15 entries a block of 8 x 8 scores
    by key reads), else (0, 0)."""
    valid = (index[:-1] >= 0) & (index[1:] >= 0)
    t, step = np.arange(len(index) - 1), np.diff(index)
    best = (13, 0, 0)  # steps, slope, the run's index[t] - slope * t
    for slope in (-1, 1):
        on = valid & (step == slope)
        if on.any():
            at = index[:-1][on] - slope * t[on]
            lo = int(at.min())
            counts = np.bincount(at - lo)
            best = max(best, (int(counts.max()), slope, lo + int(counts.argmax())))
    return best[1:]


def _walked_products(shape, dtype, run, q_len):
    """An empty array of `shape` (heads, keys, columns) for the products the
    by-key gather walks through a map whose main run is `run` (slope, index[t]
    - slope * t; t = q_len - 1 - i + j, _main_run): along that run the C walk
    loads eight float32 products of a key for eight queries, the next key's a
    row and a column on.  Here rows lie an odd number of cache lines and one
    product more (slope -1) or less (1) apart, so that the eight keys' loads
    start at the same byte of their lines, and the first product lies where
    that byte is 0 or 32 in every strip of eight queries: each load reads
    half a line, whose other half the next strip reads (at another byte, a
    key's eight products straddle two lines in 7 strips out of 16).  Without
    a run, or for float64: _padded_rows."""
    slope, k = run
    if dtype != np.float32 or slope == 0:
        return _padded_rows(shape, dtype, np.empty)
    heads, keys, cols = shape
    row = odd_lines(cols + (slope > 0), dtype) - slope
    rows = -(-keys // 8) * 8  # each head's products from the same byte of a line
    flat = np.empty(heads * rows * row + 7, dtype)
    # the load of key 0 for queries [i, i + 8), i a multiple of 8, reads
    # from column k - (q_len - 1) + i (slope -1) or k + q_len - 8 - i (1)
    first = k - q_len + 1 if slope < 0 else k + q_len - 8
    skip = -(flat.ctypes.data // dtype.itemsize + first) % 8
    return flat[skip : skip + heads * rows * row].reshape(heads, rows, row)[:, :keys, :cols]


def _zeroed(shape, dtype, padded, scratch):
    """Zeros of `shape` (rows apart as _padded_rows lays them out if
    `padded`), in `scratch` (a 1-D buffer of `dtype`, reused from block to
    block, so in cache, where fresh zeros would be new pages) when it holds
    them, else new."""
    row = odd_lines(shape[-1], dtype) if padded else shape[-1]
    size = math.prod(shape[:-1]) * row
    if scratch is None or scratch.dtype != dtype or scratch.size < size:
        return _padded_rows(shape, dtype) if padded else np.zeros(shape, dtype)
    flat = scratch[:size]
    flat.fill(0)
    return flat.reshape(shape[:-1] + (row,))[..., : shape[-1]]


def sum_by_distance(w, index, width, work, by_key=False, scratch=None):
    """``out[..., i, index[q_len - 1 - i + j]] += w[..., i, j]``: w (...,
    heads, q_len, k_len) summed into (..., heads, q_len, width) of dtype
    `work` by the C scatter (-1 in `index`: left out); by key into (...,
    heads, k_len, width), at row j.  w is read where it is when its rows
    are contiguous and of the dtype summed (float16 or float32 for float32
    sums, float64 for float64), else through a copy.  The sums are made in
    `scratch` where it holds them (_zeroed): the result is then a view of
    it, valid until the next call given it."""
    native = v.native_dtype(w.dtype)
    if v.native_dtype(work) == np.float64:
        kind = np.dtype(np.float64)
    else:  # float16 or float32 weights, summed in float32; bfloat16 widened
        kind = native if native in _KERNEL_DTYPES else np.dtype(np.float32)
    rows = w.shape[-1] <= 1 or w.strides[-1] == w.itemsize
    wk = w if w.dtype == kind and w.flags.aligned and rows else v.native_copy(w, kind)
    wk = wk.reshape((math.prod(w.shape[:-3]),) + w.shape[-3:])  # -1 is ambiguous when empty
    out_rows = w.shape[-1] if by_key else w.shape[-2]
    shape = wk.shape[:-2] + (out_rows, width)
    v.shape_size(shape, "result")
    if w.size == 0:  # no weights: zero sums (none at all without rows)
        return np.zeros(w.shape[:-2] + (out_rows, width), work)
    summed = _zeroed(shape, np.dtype(work), by_key, scratch)
    # on one thread: BLAS's threads come next, on the same cores (see _gather_part)
    _core.rel_scatter_add(wk, index, summed, True, by_key)
    return summed.reshape(w.shape[:-2] + (out_rows, width))
