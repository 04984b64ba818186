"""Every backward rule of posenc, written once in NumPy terms.

The torch operators (posenc._torch) and JAX's custom VJPs (posenc._jax)
adapt these rules; which function has which rule is its record's
``backward`` (posenc._records).  :func:`backward` gives, for each argument
whose gradient is wanted, one of:

- the incoming gradient itself (``scores=``, which the bias or term is
  added into, passes it through unchanged);
- a :class:`Call` of a routed function on the incoming gradient: RoPE's
  backward is the inverse rotation by the same positions and
  configuration (with xPos the inverse of the other role's transform: a
  query's transform, scaled by ``zeta ** t``, has as its transpose the
  inverse rotation scaled by the same factor, which is a key's inverse),
  T5's is ``t5_bias_table_grad`` (the incoming gradient summed by bucket),
  whose own backward is ``t5_bias`` again.  An adapter runs the call as it
  runs the function, so that it is differentiable in its turn;
- :data:`HOST`: computed by :func:`grads` on NumPy arrays, the relative
  terms' backward (one call for all the arguments wanted).

The relative terms.  Each gathered part of a term (see
``_relative_engine.Part``) is
``score[i, j] += (left @ right^T)[row, columns[q_len - 1 - i + j]] / divisor``;
its transpose sums the incoming gradient by column (the C scatter that
:func:`posenc.shaw_value_term` uses, into a row per key for a part gathered
by key) into ``G`` (..., heads, rows, columns), and then ``d left = G @
right`` and ``d right = G^T @ left`` are two BLAS products.  ``G`` is
made in the forward's blocks of rows, each for the columns it reaches, and
used while in cache: for Transformer-XL's shift about half of ``G``'s
columns, which are zero, are left out.  The gradient of `left` goes to
each argument summed into it (queries and a per-head bias), summed over
the axes it was broadcast along.  Everything is formed in the term's
working dtype (float32, or float64 when an input is) and returned so: the
caller casts it to each argument's dtype.

What a rule shares with its forward is imported from the core layer,
under the public modules: the relative terms' argument readers
(posenc._relative_terms) and engine (posenc._relative_engine), T5's
table gradient (posenc._t5_bias), the learned biases' backward
(posenc._functional_grad), CoPE's (posenc._cope) and complex order's
(posenc._complex_order).  No public module is imported.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Dict, NamedTuple

import numpy as np

from . import _complex_order, _cope, _functional_grad, _records, _t5_bias, _validate
from ._relative_engine import (
    Blocks,
    Part,
    odd_lines,
    quiet_ieee,
    sum_by_distance,
    sum_parts,
    to_dtype,
    widened,
    working_dtype,
)
from ._relative_terms import (
    bias_vector,
    broadcasts_to,
    deberta_term,
    float_array,
    qk_array,
    shaw_term,
    shaw_value_args,
    tener_term,
    xl_term,
)


class Call(NamedTuple):
    """A gradient that is a routed function's result: `name` called with
    `arguments` (the incoming gradient among them)."""

    name: str
    arguments: Dict[str, Any]


class _Host:
    def __repr__(self):
        return "HOST"


#: a gradient computed by grads() on the host
HOST: Any = _Host()


def _swapped_role(xpos):
    return {"query": "key", "key": "query"}.get(xpos, xpos)


def _rope(a, grad, wanted):
    """apply_rope's: the rotation is orthogonal, its transpose the inverse."""
    arguments = {key: value for key, value in a.items() if key != "out"}
    arguments.update(x=grad, inverse=not a.get("inverse", False))
    if a.get("xpos") is not None:
        arguments["xpos"] = _swapped_role(a["xpos"])
    return {"x": Call("apply_rope", arguments)}


_T5_OPTIONS = ("bidirectional", "max_distance", "q_offset")


def _t5_options(a):
    return {key: a[key] for key in _T5_OPTIONS if key in a}


def _t5(a, grad, wanted):
    """t5_bias's: each table entry's gradient is the sum of the incoming
    gradient over the (query, key) pairs of its bucket, per head."""
    out = _scores(a, grad, wanted)
    if "table" in wanted:
        arguments = {"grad": grad, "num_buckets": a["table"].shape[0], **_t5_options(a)}
        out["table"] = Call("t5_bias_table_grad", arguments)
    return out


def _t5_table(a, grad, wanted):
    """t5_bias_table_grad's: the scatter-add by bucket is linear in the
    incoming gradient; its transpose is the gather, t5_bias (broadcast
    over the incoming gradient's leading axes)."""
    q_len, k_len = a["grad"].shape[-2:]
    return {
        "grad": Call("t5_bias", {"table": grad, "q_len": q_len, "k_len": k_len, **_t5_options(a)})
    }


def _scores(a, grad, wanted):
    """scores= gets the incoming gradient unchanged."""
    return {"scores": grad} if "scores" in wanted else {}


def _relative(a, grad, wanted):
    out = _scores(a, grad, wanted)
    out.update((key, HOST) for key in wanted if key != "scores")
    return out


_BACKWARDS = {
    "rope": _rope,
    "t5": _t5,
    "t5_table": _t5_table,
    "scores": _scores,
    "relative": _relative,
    "host": _relative,
}


def reads_values(rule):
    """Whether the backward rule `rule` reads the values of the function's
    arrays (else only their shapes and dtypes, and the indices' values)."""
    return rule in ("relative", "host")


def outputs_grad(outputs, grads, parts):
    """The gradients `grads` of a call's results (one per array the adapter
    returned) as a backward rule takes them: for a function of one output
    its gradient, else a tuple of `outputs` (None for zero).  `parts(g)`
    gives a result's share of them: ``(g,)`` for a real array, or its real
    and imaginary parts for a complex one (that counts as two outputs), in
    the adapter's convention.  None when every gradient is None (zero)."""
    got = tuple(p for g in grads for p in parts(g))
    if all(g is None for g in got):
        return None
    return got[0] if outputs == 1 else got


def stacked(grad, zeros_like, stack):
    """The gradients of several outputs as one array (zeros for None), as
    :func:`grads` takes them; `zeros_like` and `stack` are the adapter's
    array library's."""
    if not isinstance(grad, tuple):
        return grad
    like = next(g for g in grad if g is not None)
    return stack([zeros_like(like) if g is None else g for g in grad])


def backward(name, arguments, grad, wanted):
    """The gradients of the routed function `name`, called with
    `arguments` (arrays, or an adapter's tensors and tracers), for the
    incoming gradient `grad` (for a function of several outputs a tuple,
    the gradient of each, None for zero), with respect to the arguments
    `wanted`: a dict from each to the incoming gradient, a :class:`Call` or
    :data:`HOST`."""
    wanted = frozenset(wanted)
    if not wanted:
        return {}
    return _BACKWARDS[_records.RECORDS[name].backward](arguments, grad, wanted)


def _sum_to(g, shape):
    """`g` summed over the axes along which an array of `shape` was
    broadcast to it (the leading ones it lacks, and its axes of length 1)."""
    extra = g.ndim - len(shape)
    if extra > 0:
        g = g.sum(axis=tuple(range(extra)))
    axes = tuple(a for a, n in enumerate(shape) if n == 1 and g.shape[a] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


def _incoming(grad, lead, shape, work):
    """The incoming gradient (of the term's shape, or of scores its
    leading axes broadcast to) in `work`, summed to the term's shape."""
    own = grad.shape[: -len(shape)]
    if grad.shape[-len(shape) :] != shape or not broadcasts_to(lead, own):
        raise ValueError(
            f"grad must have shape (..., {', '.join(map(str, shape))}) with leading axes that "
            f"{lead} broadcast to, not {grad.shape}"
        )
    return _sum_to(to_dtype(grad, work), lead + shape)


def _add(out, name, g):
    out[name] = g if name not in out else out[name] + g


def _part_grads(part, g, wanted, out):
    """The gradients of one gathered part (see the module's doc) for the
    incoming gradient `g` (..., heads, q_len, k_len) of the working dtype,
    a block at a time as the forward makes its products (_relative_engine.Blocks):
    each block's gradient summed by column in cache, then its two products."""
    lead, (heads, q_len, k_len) = g.shape[:-3], g.shape[-3:]
    work, d = part.left.dtype, part.left.shape[-1]
    right, cols = part.right, part.right.shape[-2]
    n = k_len if part.by_key else q_len
    lefts = np.broadcast_to(part.left, lead + (heads, n, d))
    rights = np.broadcast_to(right, lead + (heads, cols, d))
    want_left = any(name in wanted for name, _ in part.left_from)
    name, shape = part.right_from
    d_left = np.zeros(lead + (heads, n, d), work) if want_left else None
    d_right = np.zeros(lead + (heads, cols, d), work) if name in wanted else None
    if g.size == 0:  # an empty term (no queries, keys or heads): its gradients are zeros
        lead = (0,)
    else:
        blocks = Blocks(heads, q_len, k_len, cols, work.itemsize, part.by_key)
        spans = blocks.spans(part.columns)
        # one buffer for every block's sums (rows padded by key): the largest
        widest = max(
            ((a1 - a0) * odd_lines(c1 - c0, work) for a0, a1, c0, c1, _ in spans), default=0
        )
        scratch = np.empty(blocks.group * widest, work) if spans else None
    for at in np.ndindex(*lead):
        gb, lb, rb = g[at], lefts[at], rights[at]
        for h0, h1, a0, a1, c0, c1, local in blocks.of(spans):
            block = gb[h0:h1, :, a0:a1] if part.by_key else gb[h0:h1, a0:a1]
            summed = sum_by_distance(block, local, c1 - c0, work, part.by_key, scratch)
            if d_left is not None:
                np.matmul(summed, rb[h0:h1, c0:c1], out=d_left[at][h0:h1, a0:a1])
            if d_right is not None:
                d_right[at][h0:h1, c0:c1] += np.swapaxes(summed, -1, -2) @ lb[h0:h1, a0:a1]
    if part.divisor is not None:  # divided once, the gradients rather than g
        for d_factor in (d_left, d_right):
            if d_factor is not None:
                d_factor /= part.divisor
    if d_left is not None:
        for source, source_shape in part.left_from:
            if source in wanted:
                _add(out, source, _sum_to(d_left, source_shape))
    if d_right is not None:
        _add(out, name, _sum_to(d_right, shape))


def _gathered(term, grad, wanted):
    """The gradients of a term made of gathered parts only."""
    _, lead, shape, _, parts = term
    parts = [widened(p) for p in parts]
    g = _incoming(grad, lead, shape, parts[0].left.dtype)
    out = {}
    for part in parts:
        _part_grads(part, g, wanted, out)
    return out


def _keys(a):
    """k_len as the function reads it: given, else the scores' last axis."""
    if a["k_len"] is None and a["scores"] is not None:
        return np.shape(a["scores"])[-1]
    return a["k_len"]


def _xl_position_term(a, grad, wanted):
    term = xl_term(a["q"], a["r"], a["bias"], _keys(a), a["q_offset"], a["causal"], None)
    return _gathered(term, grad, wanted)


def _tener_position_term(a, grad, wanted):
    term = tener_term(a["q"], a["k"], a["table"], a["v"], a["key_term"], None)
    return _gathered(term, grad, wanted)


def _deberta_attention_bias(a, grad, wanted):
    term = deberta_term(**{**a, "scores": None})
    return _gathered(term, grad, wanted)


def _shaw_key_term(a, grad, wanted):
    k_len = _keys(a)
    term = shaw_term(a["q"], a["rel_keys"], a["max_distance"], k_len, a["q_offset"], None)
    return _gathered(term, grad, wanted)


def _content(left, right, g, sources, right_name, wanted, out):
    """The gradients of a dense product ``left @ right^T`` (`left` with one
    row: broadcast over the queries, whose gradients it sums)."""
    if left.shape[-2] == 1:
        g = g.sum(axis=-2, keepdims=True)
    if any(name in wanted for name, _ in sources):
        d_left = g @ right
        for name, shape in sources:
            if name in wanted:
                _add(out, name, _sum_to(d_left, shape))
    if right_name in wanted:
        _add(out, right_name, _sum_to(np.swapaxes(g, -1, -2) @ left, right.shape))


def _xl_content_bias(a, grad, wanted):
    k = qk_array(a["k"], "k")
    heads, _, d = k.shape[-3:]
    u = bias_vector(a["bias"], heads, d, "bias")
    work = working_dtype(k.dtype, u.dtype)
    rows = grad.shape[-2] if grad.ndim >= 3 else 1  # the scores' queries, or 1
    g = _incoming(grad, k.shape[:-3], (heads, rows, k.shape[-2]), work)
    out = {}
    _content(to_dtype(u, work), to_dtype(k, work), g, (("bias", u.shape),), "k", wanted, out)
    return out


def _tener_scores(a, grad, wanted):
    _, lead, shape, _, parts = tener_term(a["q"], a["k"], a["table"], a["v"], a["key_term"], None)
    parts = [widened(p) for p in parts]
    work, d = parts[0].left.dtype, parts[0].left.shape[-1]
    g = _incoming(grad, lead, shape, work)
    if _validate.flag(a["scale"], "scale") and d:  # no head dim: no products to scale
        g = g / np.sqrt(work.type(d))
    out = {}
    for part in parts:
        _part_grads(part, g, wanted, out)
    q = float_array(a["q"], "q")
    left, sources = to_dtype(q, work), (("q", q.shape),)
    if a["u"] is not None:
        u = bias_vector(a["u"], shape[0], d, "u")
        left, sources = left + to_dtype(u, work), sources + (("u", u.shape),)
    _content(left, to_dtype(float_array(a["k"], "k"), work), g, sources, "k", wanted, out)
    return out


def _shaw_value_term(a, grad, wanted):
    w, rv, index, work = shaw_value_args(
        a["weights"], a["rel_values"], a["max_distance"], a["q_offset"]
    )
    rvw = to_dtype(rv, work)
    g = _incoming(grad, w.shape[:-3], w.shape[-3:-1] + (rv.shape[-1],), work)
    out = {}
    if "weights" in wanted:  # the gather of g @ rel_values^T: shaw_key_term's kernel
        heads, q_len, k_len = w.shape[-3:]
        table = rvw if rvw.ndim == 3 else rvw[None]
        part = Part(g, table, index, False, None, (), ("", ()))
        out["weights"] = sum_parts(None, g.shape[:-3], (heads, q_len, k_len), work, [part])
    if "rel_values" in wanted:
        summed = sum_by_distance(w, index, rv.shape[-2], work)
        out["rel_values"] = _sum_to(np.swapaxes(summed, -1, -2) @ g, rv.shape)
    return out


def _tupe_bias(a, grad, wanted):
    pq = float_array(a["pos_q"], "pos_q", 3)
    pk = float_array(a["pos_k"], "pos_k", 3)
    untie = _validate.flag(a["untie_cls"], "untie_cls")
    table = None if a["rel_table"] is None else float_array(a["rel_table"], "rel_table", 2)
    dtypes = [pq.dtype, pk.dtype] + ([] if table is None else [table.dtype])
    work = working_dtype(*dtypes)
    heads, rows, d = pq.shape
    n = rows - 1 if untie else rows
    g = _incoming(grad, (), (heads, n, n), work)
    out = {}
    untie = untie and n > 0  # one row ([CLS] alone): an empty bias, whose gradients are zeros
    if untie:  # row 0 reads product (0, 0), column 0 below it (1, 1), the rest (i + 1, j + 1)
        products = np.zeros((heads, rows, rows), work)
        products[:, 0, 0] = g[:, 0, :].sum(axis=-1)
        products[:, 1, 1] = g[:, 1:, 0].sum(axis=-1)
        products[:, 2:, 2:] = g[:, 1:, 1:]
    elif n == rows:
        products = g
    else:
        products = np.zeros((heads, rows, rows), work)
    c = work.type(1.0 / math.sqrt(2 * d) if d else 1.0)  # no head dim: no products
    if "pos_q" in wanted:
        out["pos_q"] = (products @ to_dtype(pk, work)) * c
    if "pos_k" in wanted:
        out["pos_k"] = (np.swapaxes(products, -1, -2) @ to_dtype(pq, work)) * c
    if table is not None and "rel_table" in wanted:
        nb = table.shape[0] - (1 if a["untie_cls"] else 0)
        buckets = g
        if untie:
            buckets = g.copy()
            buckets[:, 0, :] = 0
            buckets[:, :, 0] = 0
        d_table = np.zeros(table.shape, work)
        if g.size:  # no scores (no heads or tokens): nothing read from the table
            d_table[:nb] = _t5_bias.t5_bias_table_grad(buckets, nb, max_distance=a["max_distance"])
        if untie:
            d_table[nb] += g[:, 1:, 0].sum(axis=-1)
            d_table[nb // 2] += g[:, 0, :].sum(axis=-1)
        out["rel_table"] = d_table
    return out


def _kerple_bias(a, grad, wanted):
    options = {key: a[key] for key in ("kind", "causal", "q_offset")}
    g_r1, g_r2 = _functional_grad.kerple_bias_grad(grad, a["r1"], a["r2"], **options)
    return {"r1": g_r1, "r2": g_r2}


_FIRE = ("w1", "b1", "w2", "b2", "c", "threshold")


def _fire_bias(a, grad, wanted):
    options = {key: a[key] for key in ("eps", "causal", "q_offset")}
    got = _functional_grad.fire_bias_grad(grad, *(a[key] for key in _FIRE), **options)
    return {key: np.asarray(g) for key, g in zip(_FIRE, got)}


def _cope_bias(a, grad, wanted):
    arrays = (a["query"], a["attn_logits"], a["pos_emb"])
    got = _cope.bias_grad(*arrays, grad, causal=a["causal"], q_offset=a["q_offset"])
    return dict(zip(("query", "attn_logits", "pos_emb"), got))


def _complex_order_embedding(a, grad, wanted):
    """Of the pair (real, imag): complex_order_embedding's backward; a
    float position's gradient summed to the positions' shape."""
    arrays = [a[key] for key in ("token_ids", "positions", "amplitude", "frequency", "phase")]
    got = _complex_order.backward(*arrays, *grad, of_positions="positions" in wanted)
    out = dict(zip(("amplitude", "frequency", "phase"), got))
    if "positions" in wanted:
        out["positions"] = np.asarray(_sum_to(got[3], np.shape(a["positions"])))
    return out


_RULES = {
    "complex_order_embedding": _complex_order_embedding,
    "cope_bias": _cope_bias,
    "kerple_bias": _kerple_bias,
    "fire_bias": _fire_bias,
    "xl_position_term": _xl_position_term,
    "xl_content_bias": _xl_content_bias,
    "tener_position_term": _tener_position_term,
    "tener_scores": _tener_scores,
    "deberta_attention_bias": _deberta_attention_bias,
    "shaw_key_term": _shaw_key_term,
    "shaw_value_term": _shaw_value_term,
    "tupe_bias": _tupe_bias,
}


def grads(name, grad, wanted, args, kwargs):
    """The gradients of posenc.relative's function `name`, called with the
    NumPy arguments `args` and `kwargs`, for the incoming gradient `grad`
    (the shape of its result, or of `scores=`; for a function of several
    outputs theirs stacked on a leading axis, zeros for None): a dict from
    each argument named in `wanted` (but scores) to its gradient, of the
    argument's shape and the term's working dtype (float32 or float64)."""
    fn = _records.function(name)
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    wanted = frozenset(wanted) - {"scores"}
    grad = np.asarray(grad)
    if _records.RECORDS[name].outputs > 1:  # the rule takes a tuple
        grad = tuple(grad)
    with quiet_ieee():  # an inf or NaN in the data: IEEE's results, no RuntimeWarning
        out = _RULES[name](a, grad, wanted) if wanted else {}
    # an argument the term does not read (k in DeBERTa's c2p alone) gets zeros
    work = working_dtype(*[np.asarray(a[key]).dtype for key in wanted])
    return {
        key: out[key].reshape(np.shape(a[key])) if key in out else np.zeros(np.shape(a[key]), work)
        for key in wanted
    }


def grads_of(name, keys, grad, **arguments):
    """The gradients with respect to the arguments `keys`, a tuple in their
    order (see grads)."""
    got = grads(name, grad, keys, (), arguments)
    return tuple(got[key] for key in keys)
