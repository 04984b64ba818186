"""The relative terms' arguments read and turned into parts.

What a relative term's forward (posenc.relative) and its backward
(posenc._grad) share: the arguments read and checked (queries and keys,
tables, per-head biases, lengths and offsets, the scores added into) and
each gathered term made into the parts of the engine (posenc._relative_engine):
:func:`xl_term`, :func:`tener_term`, :func:`deberta_term`,
:func:`shaw_term` give ``(target, lead, shape, dtype, parts)``, which
``sum_parts`` adds up and the backward differentiates part by part;
:func:`shaw_value_args` the value term's arrays and distance index.  Also
DeBERTa's log buckets (:func:`log_bucket`, :func:`checked_buckets`), which
its public functions share with its term.
"""

from __future__ import annotations

import numpy as np

from . import _core
from . import _validate as v
from ._relative_engine import (
    Part,
    bf16_kept,
    left_operand,
    operand,
    promoted_dtype,
    promoted_dtype_of,
    working_dtype,
)

MAX_OFFSET = _core.MAX_Q_OFFSET


# ---------------------------------------------------------------- arguments


def float_array(x, name, ndim=None):
    """`x` as a float ndarray (float16, bfloat16, float32 or float64), with
    at least `ndim` axes."""
    arr = x if isinstance(x, np.ndarray) else np.asarray(x)
    v.float_array_dtype(arr, name, bfloat16=True)
    if ndim is not None and arr.ndim < ndim:
        raise ValueError(f"{name} must have at least {ndim} dimensions, not shape {arr.shape}")
    return arr


def bias_vector(bias, heads, d, name):
    """A per-head vector (heads, d) (or None), broadcast as (heads, 1, d)."""
    if bias is None:
        return None
    arr = float_array(bias, name)
    if arr.shape != (heads, d):
        raise ValueError(
            f"{name} must have shape ({heads}, {d}) (heads, head_dim), not {arr.shape}"
        )
    return arr[:, None, :]


def heads_table(table, heads, d, name, rows=None):
    """A relative table shared by the heads (rows, d) or one per head
    (..., heads, rows, d); returned with a heads axis."""
    arr = float_array(table, name, 2)
    if arr.shape[-1] != d:
        raise ValueError(
            f"{name} must have {d} columns (the head_dim of the queries), not {arr.shape[-1]}"
        )
    if arr.ndim >= 3 and arr.shape[-3] != heads:
        raise ValueError(f"{name} must have {heads} heads on axis -3, not shape {arr.shape}")
    if rows is not None and arr.shape[-2] != rows:
        raise ValueError(f"{name} must have {rows} rows, not {arr.shape[-2]}")
    return arr if arr.ndim >= 3 else arr[None]


def qk_array(x, name, heads=None, d=None):
    arr = float_array(x, name, 3)
    if heads is not None and arr.shape[-3] != heads:
        raise ValueError(f"{name} must have {heads} heads on axis -3, not shape {arr.shape}")
    if d is not None and arr.shape[-1] != d:
        raise ValueError(f"{name} must have head_dim {d} on its last axis, not {arr.shape[-1]}")
    return arr


def lead_shape(*shapes, names):
    """The broadcast of the leading (batch) shapes, or a ValueError."""
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(
            f"the leading (batch) axes of {', '.join(names)} do not broadcast: {shapes}"
        ) from None


def offset(q_offset, q_len, k_len, default):
    if q_offset is None:
        if default < 0 and k_len:  # without keys, no score depends on the offset
            raise ValueError(
                f"q_len ({q_len}) > k_len ({k_len}): the default q_offset = k_len - q_len would "
                "put queries before the first key; pass q_offset"
            )
        return default
    return v.integer(q_offset, "q_offset", minimum=-MAX_OFFSET, maximum=MAX_OFFSET)


def distances(q_len, k_len, q_offset):
    """key - query at t = q_len - 1 - i + j, the index the kernel's map takes."""
    return np.arange(q_len + k_len - 1, dtype=np.int64) - (q_len - 1) - q_offset


def scores_array(scores, name="scores"):
    """`scores` as a float ndarray that can be written in place, else TypeError."""
    arr = scores if isinstance(scores, np.ndarray) else np.asarray(scores)
    if arr is not scores and arr.base is None:
        raise TypeError(
            f"{name} must be an array that can be written in place (an ndarray or a CPU tensor), "
            f"not {type(scores).__name__}"
        )
    v.float_array_dtype(arr, name, bfloat16=True)
    return arr


def broadcasts_to(lead, own):
    """Whether leading axes `lead` broadcast to `own` (those of scores, or
    of an incoming gradient)."""
    try:
        return np.broadcast_shapes(own, lead) == tuple(own)
    except ValueError:
        return False


def scores_target(scores, lead, shape, name="scores"):
    """`scores` checked: a writeable float ndarray of shape (..., *shape)
    whose leading axes the inputs' (`lead`) broadcast to, its elements
    apart."""
    arr = scores_array(scores, name)
    n = len(shape)
    if arr.ndim < n or arr.shape[arr.ndim - n :] != tuple(shape):
        raise ValueError(
            f"{name} must have shape (..., {', '.join(map(str, shape))}), not {arr.shape}"
        )
    own = arr.shape[: arr.ndim - n]
    if not broadcasts_to(lead, own):
        raise ValueError(
            f"{name} has leading (batch) axes {own}, which the inputs' {lead} must broadcast to"
        )
    return v.writeable(arr, name)


def checked_size(target, lead, shape):
    """The number of scores a term adds into: `target`'s, or, without one,
    that of the new result ``lead + shape``, checked against what can be
    allocated (a ValueError naming the result) before anything is made."""
    if target is not None:
        return target.size
    return v.shape_size(lead + shape, "result")


def destination(scores, lead, shape, dtypes):
    """Where a term goes: `scores` checked (scores_target; None without), the
    number of scores the term makes (checked_size) and the dtype its
    products are made in (working_dtype of the inputs' `dtypes` and the scores')."""
    target = None if scores is None else scores_target(scores, lead, shape)
    size = checked_size(target, lead, shape)
    work = working_dtype(*dtypes, *(() if target is None else (target.dtype,)))
    return target, size, work


# ---------------------------------------------------------------- Transformer-XL / XLNet


def xl_term(q, r, bias, k_len, q_offset, causal, scores):
    """xl_position_term's checked arguments: (target, lead, shape, dtype, parts)."""
    q = qk_array(q, "q")
    heads, q_len, d = q.shape[-3:]
    r = heads_table(r, heads, d, "r")
    rows = r.shape[-2]
    lead = lead_shape(q.shape[:-3], r.shape[:-3], names=("q", "r"))
    b = bias_vector(bias, heads, d, "bias")
    causal = v.flag(causal, "causal")
    if scores is not None:
        sc = scores_array(scores)
        if sc.ndim < 3:
            raise ValueError(
                f"scores must have shape (..., {heads}, {q_len}, k_len), not {sc.shape}"
            )
        k_len = sc.shape[-1] if k_len is None else v.integer(k_len, "k_len", minimum=0)
    elif k_len is None:
        k_len = rows - q_len
        if k_len < 1:
            raise ValueError(f"r has {rows} rows: pass k_len (the bi table has k_len + q_len rows)")
    else:
        k_len = v.integer(k_len, "k_len", minimum=0)
    q_offset = offset(q_offset, q_len, k_len, k_len - q_len)
    target, size, work = destination(scores, lead, (heads, q_len, k_len), (q.dtype, r.dtype))
    # the distances query - key the scores read, q_offset + i - j (those >= 0
    # if causal), must be rows of r: k_len - d in [0, rows); worked out from
    # the sizes, before anything of their size is made
    lo, hi = q_offset - (k_len - 1), q_offset + q_len - 1
    if causal:
        lo = max(lo, 0)
    if q_len and k_len and lo <= hi and (lo < k_len - rows + 1 or hi > k_len):
        hint = "" if causal else " (causal=True skips future keys)"
        has = f"{rows} rows (distances {k_len} down to {k_len - rows + 1})" if rows else "no rows"
        raise ValueError(f"r has {has}, but the scores need distances {hi} down to {lo}{hint}")
    if size:
        dist = q_offset + (q_len - 1) - np.arange(q_len + k_len - 1, dtype=np.int64)  # query - key
        index = k_len - dist
        if causal:
            index = np.where(dist >= 0, index, -1)
    else:  # no scores: no distances
        index = np.empty(0, np.int64)
    keep = bf16_kept(work, q.dtype, r.dtype, None if b is None else b.dtype)
    qb, kb, sources = left_operand(q, b, work, keep, ("q", "bias"))
    rw = operand(r, work, keep)
    parts = [Part(qb, rw, index, False, None, sources, ("r", r.shape), kb)]
    return target, lead, (heads, q_len, k_len), promoted_dtype_of(q, r), parts


# ---------------------------------------------------------------- TENER


def tener_table(table, d, length):
    arr = float_array(table, "table", 2)
    if arr.ndim != 2 or arr.shape[1] != d or arr.shape[0] % 2:
        raise ValueError(
            f"table must have shape (2 * M, {d}) (tener_relative_table(M, {d})), not {arr.shape}"
        )
    if arr.shape[0] // 2 < length:
        raise ValueError(
            f"table covers positions -{arr.shape[0] // 2} .. {arr.shape[0] // 2 - 1}, too few "
            f"for a length of {length} (needs 2 * {length} rows or more)"
        )
    return arr


def tener_term(q, k, table, position_bias, key_term, scores):
    """tener_position_term's checked arguments, as xl_term's."""
    q = qk_array(q, "q")
    heads, length, d = q.shape[-3:]
    k = qk_array(k, "k", heads, d)
    if k.shape[-2] != length:
        raise ValueError(
            f"k must have the {length} positions of q (self-attention), not {k.shape[-2]}"
        )
    key_term = v.flag(key_term, "key_term")
    R = tener_table(table, d, length)
    m = R.shape[0] // 2
    lead = lead_shape(q.shape[:-3], k.shape[:-3], names=("q", "k"))
    bias = bias_vector(position_bias, heads, d, "v")
    target, _, work = destination(
        scores, lead, (heads, length, length), (q.dtype, k.dtype, R.dtype)
    )
    rel = distances(length, length, 0)  # j - i
    dtypes = (q.dtype, k.dtype if key_term else None, R.dtype)
    keep = bf16_kept(work, *dtypes, None if bias is None else bias.dtype)
    qb, kb, sources = left_operand(q, bias, work, keep, ("q", "v"))
    Rw = operand(R, work, keep)[None]  # shared by the heads
    parts = [Part(qb, Rw, m + rel, False, None, sources, ("table", R.shape), kb)]
    if key_term:
        kw = operand(k, work, keep)
        parts.append(Part(kw, Rw, m - rel, True, None, (("k", k.shape),), ("table", R.shape)))
    return target, lead, (heads, length, length), promoted_dtype_of(q, k, R), parts


# ---------------------------------------------------------------- DeBERTa


PRECISIONS = ("float32", "float64")


def log_bucket(rel, bucket_size, max_position, precision, names=("bucket_size", "max_position")):
    """make_log_bucket_position on int64 distances (within +-2**62), after
    _check_log_bucket: a ValueError naming the sizes where the formula has
    no finite int64 bucket for a distance of `rel`."""
    mid = bucket_size // 2
    a = np.abs(rel)
    top = int(a.max()) if a.size else 0
    near = rel
    if precision == "float32" and mid > 2**24:
        # transformers returns a distance within mid as a float32 value, so
        # past 2**24 rounded to float32's nearest (2**24 + 1 gives 2**24)
        near = rel.astype(np.float32).astype(np.int64)
    if top <= mid:  # every distance its own bucket: the logarithm is not read
        return near.astype(np.int64)
    _check_log_bucket(top, bucket_size, max_position, precision, names)
    logs = (_log_value(a, mid, max_position, precision) * np.sign(rel)).astype(np.int64)
    return np.where(a <= mid, near, logs).astype(np.int64)


def _log_value(a, mid, max_position, precision):
    """``ceil(ln(a / mid) / ln((max_position - 1) / mid) * (mid - 1)) + mid``
    for the int64 magnitudes `a` (those < mid as mid - 1), as
    transformers' make_log_bucket_position forms it in float32 (the
    logarithms correctly rounded), or as the authors' code in float64."""
    a = np.maximum(a, mid - 1)
    if precision == "float32":
        f = np.float32
        x = a.astype(f) / f(mid)
        lx = np.log(x.astype(np.float64)).astype(f)
        den = f(np.log(np.float64(f((max_position - 1) / mid))))
        return np.ceil(lx / den * f(mid - 1)) + f(mid)
    return np.ceil(np.log(a / mid) / np.log((max_position - 1) / mid) * (mid - 1)) + mid


def _check_log_bucket(top, bucket_size, max_position, precision, names):
    """The log buckets of distances up to `top` (> bucket_size // 2) are
    finite and within int64, else a ValueError naming the sizes.

    The formula grows with the distance, so the largest one decides.  In
    float32, ``ln((max_position - 1) / mid)`` is 0 where the ratio rounds
    to 1 (``max_position - 1 - mid <= mid * 2**-24``): every distance past
    mid divides by 0 (transformers' buckets are then inf or nan, int64's
    least value once cast); elsewhere the float32 buckets stay below
    2**59.  In float64 the ratio never rounds to 1, but the bucket, about
    ``ln(d / mid) * mid**2``, passes 2**63 at large distances when
    max_position - 1 is near mid and mid is large."""
    bname, mname = names
    mid = bucket_size // 2
    if precision == "float32":
        ratio = np.float32((max_position - 1) / mid)
        if ratio == 1:
            raise ValueError(
                f"{bname} {bucket_size} and {mname} {max_position} have no float32 log buckets: "
                f"({mname} - 1) / ({bname} // 2) = {max_position - 1} / {mid} rounds to 1 in "
                f"float32, whose logarithm 0 divides the buckets of distances past {mid} (here up "
                f"to {top}), which would be inf or nan; use precision='float64', or {mname} - 1 "
                f"further from {bname} // 2"
            )
    value = float(_log_value(np.array([top], np.int64), mid, max_position, precision)[0])
    if not value < 2.0**63:
        raise ValueError(
            f"{bname} {bucket_size} and {mname} {max_position}: the {precision} log bucket of "
            f"distance {top} is {value:.6g}, past int64 (ln(|d| / mid) / ln(({mname} - 1) / mid) "
            f"* (mid - 1) with mid = {bname} // 2 = {mid}); use {mname} - 1 further from mid, or "
            f"smaller distances"
        )


UNRESOLVED = (
    "; a DeBERTa config's max_relative_positions < 1 (-1 by default, as in DeBERTa-v3's) "
    "stands for its max_position_embeddings, which transformers puts in its place: pass "
    "that (512 for DeBERTa-v3)"
)


def checked_buckets(bucket_size, max_position, names=("bucket_size", "max_position")):
    """The log buckets' (size, maximum), checked; a maximum < 1 with buckets
    is refused: no model has it, and a config's -1 means another number."""
    bname, mname = names
    bucket_size = v.integer(bucket_size, bname, minimum=-(2**62), maximum=2**31)
    max_position = v.integer(max_position, mname, minimum=-(2**62), maximum=2**62)
    if bucket_size > 0 and max_position < 1:
        raise ValueError(f"{mname} must be >= 1 with {bname} > 0, got {max_position}" + UNRESOLVED)
    if bucket_size > 0:
        if bucket_size < 4:
            raise ValueError(f"{bname} must be >= 4 (or <= 0: no buckets), got {bucket_size}")
        if max_position - 1 <= bucket_size // 2:
            raise ValueError(
                f"{mname} must exceed {bname} // 2 + 1 = {bucket_size // 2 + 1}, got {max_position}"
            )
    return bucket_size, max_position


def deberta_term(
    q,
    k,
    pos_key,
    pos_query,
    position_buckets,
    max_relative_positions,
    q_offset,
    scale_factor,
    precision,
    scores,
):
    """deberta_attention_bias's checked arguments, as xl_term's."""
    q = qk_array(q, "q")
    heads, q_len, d = q.shape[-3:]
    k = qk_array(k, "k", heads, d)
    k_len = k.shape[-2]
    position_buckets, max_relative_positions = checked_buckets(
        position_buckets,
        max_relative_positions,
        ("position_buckets", "max_relative_positions"),
    )
    span = position_buckets if position_buckets > 0 else max_relative_positions
    if span < 1:
        raise ValueError(
            f"max_relative_positions must be >= 1, got {max_relative_positions}" + UNRESOLVED
        )
    terms = [t for t in (pos_key, pos_query) if t is not None]
    if not terms:
        raise ValueError("give pos_key (c2p), pos_query (p2c) or both")
    pk, pq = (
        None if t is None else heads_table(t, heads, d, name, 2 * span)
        for t, name in ((pos_key, "pos_key"), (pos_query, "pos_query"))
    )
    q_offset = offset(q_offset, q_len, k_len, 0)
    precision = v.choice(precision, "precision", PRECISIONS)
    scale_factor = 1 + len(terms) if scale_factor is None else scale_factor
    scale_factor = v.real(scale_factor, "scale_factor", positive=True)
    shapes = [q.shape[:-3], k.shape[:-3]] + [t.shape[:-3] for t in (pk, pq) if t is not None]
    lead = lead_shape(*shapes, names=("q", "k", "pos_key/pos_query"))
    dtypes = [x.dtype for x in (q, k, pk, pq) if x is not None]
    target, _, work = destination(scores, lead, (heads, q_len, k_len), dtypes)
    dist = -distances(q_len, k_len, q_offset)  # query - key
    if position_buckets > 0 and max_relative_positions > 0:
        dist = log_bucket(
            dist,
            position_buckets,
            max_relative_positions,
            precision,
            ("position_buckets", "max_relative_positions"),
        )
    index = np.clip(dist + span, 0, 2 * span - 1)
    with np.errstate(over="ignore", under="ignore"):  # refused just below
        # an empty head dim: sums of no products, 0 whatever the scale
        scale = np.sqrt(work.type(d) * work.type(scale_factor)) if d else work.type(1)
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(
            f"scale_factor {scale_factor!r} gives a scale sqrt(head_dim * scale_factor) that is "
            f"{scale} in {work.name}: the terms would be {'0' if scale else 'inf or nan'}"
        )
    keep = bf16_kept(work, *dtypes)
    parts = [  # c2p by query, p2c by key
        Part(
            operand(x, work, keep),
            operand(t, work, keep),
            index,
            by_key,
            scale,
            ((x_name, x.shape),),
            (name, t.shape),
        )
        for x, x_name, t, name, by_key in (
            (q, "q", pk, "pos_key", False),
            (k, "k", pq, "pos_query", True),
        )
        if t is not None
    ]
    return target, lead, (heads, q_len, k_len), promoted_dtype(*dtypes), parts


# ---------------------------------------------------------------- Shaw et al.


def shaw_index(q_len, k_len, q_offset, max_distance):
    rel = np.clip(distances(q_len, k_len, q_offset), -max_distance, max_distance)
    return rel + max_distance


def shaw_term(q, rel_keys, max_distance, k_len, q_offset, scores):
    """shaw_key_term's checked arguments, as xl_term's."""
    q = qk_array(q, "q")
    heads, q_len, d = q.shape[-3:]
    max_distance = v.integer(max_distance, "max_distance", minimum=0, maximum=2**40)
    table = heads_table(rel_keys, heads, d, "rel_keys", 2 * max_distance + 1)
    if scores is not None and k_len is None:
        sc = scores_array(scores)
        k_len = sc.shape[-1] if sc.ndim >= 3 else q_len
    k_len = q_len if k_len is None else v.integer(k_len, "k_len", minimum=0)
    q_offset = offset(q_offset, q_len, k_len, k_len - q_len)
    lead = lead_shape(q.shape[:-3], table.shape[:-3], names=("q", "rel_keys"))
    target, size, work = destination(scores, lead, (heads, q_len, k_len), (q.dtype, table.dtype))
    if size:
        index = shaw_index(q_len, k_len, q_offset, max_distance)
    else:  # no scores: no distances
        index = np.empty(0, np.int64)
    keep = bf16_kept(work, q.dtype, table.dtype)
    parts = [
        Part(
            operand(q, work, keep),
            operand(table, work, keep),
            index,
            False,
            None,
            (("q", q.shape),),
            ("rel_keys", table.shape),
        )
    ]
    return target, lead, (heads, q_len, k_len), promoted_dtype_of(q, table), parts


def shaw_value_args(weights, rel_values, max_distance, q_offset):
    """shaw_value_term's arguments checked: weights, rel_values, the
    distance index and the working dtype."""
    w = float_array(weights, "weights", 3)
    heads, q_len, k_len = w.shape[-3:]
    max_distance = v.integer(max_distance, "max_distance", minimum=0, maximum=2**40)
    width = 2 * max_distance + 1
    rv = float_array(rel_values, "rel_values", 2)
    if rv.ndim > 3 or rv.shape[-2] != width or (rv.ndim == 3 and rv.shape[0] != heads):
        raise ValueError(
            f"rel_values must have shape ({width}, head_dim) or ({heads}, {width}, head_dim), "
            f"not {rv.shape}"
        )
    q_offset = offset(q_offset, q_len, k_len, k_len - q_len)
    return w, rv, shaw_index(q_len, k_len, q_offset, max_distance), working_dtype(w.dtype, rv.dtype)
