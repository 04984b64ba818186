"""Attention biases that are functions of the distance: KERPLE, Sandwich, FIRE.

* :func:`kerple_bias`: KERPLE (Chi et al., 2022), the logarithmic
  ``-r1 * log(1 + r2 * |i - j|)`` and power ``-r1 * |i - j| ** r2`` kernels
  with learned per-head ``r1, r2 > 0``.
* :func:`sandwich_bias`: Sandwich (Chi et al., 2023), the inner product of
  two sinusoidal embeddings ``sum_k cos((i - j) w_k) - d'/2``, scaled per head.
* :func:`fire_bias`: FIRE (Li et al., 2024), a small MLP of the
  log-transformed distance normalised by the query's position.

All three follow :func:`posenc.alibi_bias`: query ``i`` sits at position
``qpos = q_offset + i`` (by default ``k_len - q_len``, the newest tokens of a
KV cache), ``causal=True`` gives ``-inf`` to the keys after the query (the
bias also masks), ``causal=False`` the formula at ``|qpos - j|`` everywhere.
Values are formed in float64 and rounded once to the dtype; with
``scores=`` the bias is added in place, exactly as ``scores +=
bias(dtype=scores.dtype)`` would (float16 and bfloat16 through float32,
which rounds the same).

KERPLE and Sandwich depend only on ``|qpos - j|``: their values per head
are made once per distance in float64 (Sandwich's cosines by the C core's
sin/cos, as :func:`posenc.sinusoid`'s float64 tables), laid out as the
``q_len + k_len - 1`` diagonals and handed to the C core
(``_core.bias_given``, the row kernels of ALiBi and T5), which rounds them
once and writes or adds every row as a slice of them, on the library's
threads (no ``(q, k)`` array per head).  FIRE depends on the query's
position through its normaliser ``max(qpos, threshold)``: the rows of the
queries at or before the threshold are made the same way, the later ones by
the C core (``_core.fire_rows``) from their normalisers and one
``psi(|qpos - j|)`` per diagonal, made here, its MLP evaluated in float64 in
the operations and order of :func:`fire_tile`.
"""

from __future__ import annotations

import numpy as np

from . import _core, _kerple_fire
from . import _validate as v
from ._distance_bias import distance_args, run_on_views, scores_target
from ._interop import accepts_tensors
from ._kerple_fire import distances, fire_inputs, fire_params, kerple_params, log1p_product, tiles

__all__ = ["fire_bias", "kerple_bias", "sandwich_bias"]

# Sandwich's largest d': each distance takes dim / 2 cosines, whatever the
# size of the result (a model's d' is its head or hidden size, < 2**16)
_MAX_SANDWICH_DIM = 1 << 16
_CONCAT = _core.SINUSOID_LAYOUTS["concat"]


# ---------------------------------------------------------------- arguments


def _target(shape, dtype, scores, out, sizes):
    """The array the bias goes into and whether it is added: `scores` or
    `out` checked, or a new array of `dtype` (float32 by default)."""
    if scores is not None:
        if out is not None:
            raise ValueError("give scores (to add into) or out (to write), not both")
        return scores_target(scores, shape, dtype), True
    dtype = v.result_dtype(dtype, out, bfloat16=True)
    if out is not None:
        return v.out_array(out, shape, dtype, "out"), False
    v.shape_size(shape, sizes, dtype.itemsize)
    return np.empty(shape, dtype), False


# ---------------------------------------------------------------- writing


def _given(target, add, make, q_offset, causal):
    """`target` (..., heads, q_len, k_len), a view of the array the bias goes
    into, given a bias that depends only on ``qpos - j``: `make(delta)` gives
    its float64 (heads, len(delta)) values at the distances `delta` (only at
    those >= 0 when causal: the others get ``-inf``), which
    ``_core.bias_given`` rounds once and writes, or adds into `target`, row
    by row."""
    q_len, k_len = target.shape[-2:]
    delta = distances(q_len, k_len, q_offset)
    # the distances are decreasing: when causal, the future is a suffix
    past = min(max(q_offset + q_len, 0), delta.size) if causal else delta.size
    values = np.full((target.shape[-3], delta.size), -np.inf)
    values[:, :past] = make(delta[:past])
    run_on_views(
        lambda dst: _core.bias_given(values, v.for_kernel(dst), add),
        target,
        read=add,
        name="scores" if add else "out",
    )


def _by_distance(n_heads, make, positions, dtype, scores, out, sizes):
    """The bias `make` (as :func:`_given`) into its target, returned:
    `positions` are :func:`distance_args`' arguments, `sizes` the (vectors,
    table) arguments a size error names."""
    q_len, k_len, q_offset, causal = distance_args(*positions)
    v.shape_size((n_heads, q_len + k_len - 1), sizes[0])
    target, add = _target((n_heads, q_len, k_len), dtype, scores, out, sizes[1])
    _given(target, add, make, q_offset, causal)
    return target


# ---------------------------------------------------------------- KERPLE


def by_magnitude(make, delta):
    """float64 (heads, len(delta)): `make(d)`, a function of the distance's
    magnitude, at the distances `delta` (whole numbers, each one less than
    the one before, as :func:`distances` makes them), evaluated once per
    magnitude ``d = |delta|`` (float64, >= 0) and gathered in `delta`'s
    order: a bias that is not causal takes each magnitude on both sides."""
    if delta.size == 0 or delta[-1] >= 0 or delta[0] <= 0:  # one side: distinct
        return make(np.abs(delta))
    top = max(delta[0], -delta[-1])
    return make(np.arange(top + 1.0))[:, np.abs(delta).astype(np.intp)]


def kerple_values(r1, r2, kind, d):
    """float64 (heads, len(d)): KERPLE at the magnitudes `d` (|qpos - j|)."""
    d = d[None, :]
    a, b = r1[:, None], r2[:, None]
    with np.errstate(over="ignore"):
        values = -a * log1p_product(b, d) if kind == "log" else -a * d**b
    return values + 0.0  # the diagonal +0.0, as alibi_bias's


@accepts_tensors
def kerple_bias(
    r1,
    r2,
    q_len,
    k_len=None,
    *,
    kind="log",
    causal=True,
    q_offset=None,
    dtype=None,
    scores=None,
    out=None,
):
    """KERPLE's attention bias (Chi et al., 2022), or its add into scores.

    Parameters
    ----------
    r1, r2 : array_like of shape (n_heads,) or (n_heads, 1, 1)
        The learned per-head parameters of the paper, all ``> 0`` (and
        ``r2 <= 2`` for the power kernel).  The authors' modules name them
        after their role in each kernel, which swaps between the two:
        ``ParallelKerpleLog`` has ``r1 = bias_p``, ``r2 = bias_a``;
        ``ParallelKerplePower`` has ``r1 = bias_a``, ``r2 = bias_p``.  Their
        ``(n_heads, 1, 1)`` parameters are taken as they are.
    q_len, k_len : int
        Number of queries and keys (``k_len`` defaults to ``q_len``), >= 1.
    kind : "log" or "power"
        ``-r1 * log(1 + r2 * |qpos - j|)`` or ``-r1 * |qpos - j| ** r2``.
    causal : bool
        True: the kernel for keys ``j <= qpos`` and ``-inf`` for future
        keys, so that the bias also masks (as :func:`posenc.alibi_bias`).
        False: the same formula at ``|qpos - j|`` on both sides.
    q_offset : int, optional
        Query ``i`` sits at position ``qpos = q_offset + i``; by default
        ``k_len - q_len`` (which needs ``q_len <= k_len``).
    dtype : float16, bfloat16, float32 or float64, optional
        Of the table: float32 when None or left out, whatever the dtype of
        `r1` and `r2` (float64 arrays, tensors or JAX arrays alike; ask for
        theirs with ``dtype=r1.dtype``); with `scores`, their dtype or None.
    scores : ndarray of shape (..., n_heads, q_len, k_len), optional
        Attention scores to add the bias into, in place (returned).
    out : ndarray of shape (n_heads, q_len, k_len), optional
        Where to write the table (not together with `scores`); its dtype is
        the table's unless `dtype` says otherwise.
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray
        The ``(n_heads, q_len, k_len)`` bias, a head for each value of `r1`, or
        `scores` with it added.

    Notes
    -----
    The authors' causal code evaluates the kernel at the distance of the
    lower triangle and zero above it, which their causal mask then hides;
    here the future gets ``-inf``, the rows of the softmax are the same.
    Each value is formed in float64 and rounded once; with `scores` the
    result is that of ``scores += kerple_bias(..., dtype=scores.dtype)``,
    made in one read and write of the scores.  The backward pass is
    ``posenc._functional_grad.kerple_bias_grad``.

    Examples
    --------
    >>> import numpy as np, posenc
    >>> bias = posenc.kerple_bias([1.0, 0.5], [1.0, 1.0], 3)  # -r1 log(1 + r2 |i - j|)
    >>> bias.shape, bias.dtype
    ((2, 3, 3), dtype('float32'))
    >>> np.allclose(bias[0, 2], [-np.log(3), -np.log(2), 0])
    True
    >>> bias[0, 0, 1]  # the future, causal
    np.float32(-inf)
    """
    a, b, kind, _, _ = kerple_params(r1, r2, kind)
    return _by_distance(
        a.shape[0],
        lambda delta: by_magnitude(lambda d: kerple_values(a, b, kind, d), delta),
        (q_len, k_len, q_offset, causal),
        dtype,
        scores,
        out,
        ("r1, q_len and k_len", "r1's n_heads, q_len and k_len"),
    )


# ---------------------------------------------------------------- Sandwich


def cosine_sums(d, inv_freq):
    """float64 ``sum_k cos(d * inv_freq[k])`` at the float64 `d` (n,): the
    cosines of the float64 angles by the C core's sin/cos (the direct
    kernels of ``_core.sinusoid``'s float64 tables, within 1 ulp), summed
    by NumPy over ``k`` in order; in tiles of rows of that table."""
    half = inv_freq.size
    sums = np.empty(d.shape, np.float64)
    step = max(1, _kerple_fire.TILE // (2 * half))
    table = np.empty((min(step, d.size), 2 * half))  # sin then cos: "concat"
    for s in range(0, d.size, step):
        rows = table[: min(step, d.size - s)]
        _core.sinusoid(np.ascontiguousarray(d[s : s + step]), inv_freq, rows, _CONCAT)
        np.sum(rows[:, half:], axis=1, out=sums[s : s + step])
    return sums


def sandwich_values(n_heads, dim, d):
    """float64 (n_heads, len(d)): Sandwich at the magnitudes `d` (|qpos - j|)."""
    half = dim // 2
    inv_freq = 10000.0 ** (-2.0 * np.arange(1, half + 1, dtype=np.float64) / dim)
    base = cosine_sums(d, inv_freq) - half
    scale = (np.arange(1, n_heads + 1, dtype=np.float64) * 8.0 / n_heads)[:, None]
    return base[None, :] / scale


@accepts_tensors
def sandwich_bias(
    n_heads,
    q_len,
    k_len=None,
    *,
    dim,
    causal=True,
    q_offset=None,
    dtype=None,
    scores=None,
    out=None,
):
    """Sandwich's attention bias (Chi et al., 2023), or its add into scores.

    ``bias[h, i, j] = (sum_{k=1}^{dim/2} cos((qpos - j) * 10000 ** (-2k / dim))
    - dim / 2) / ((h + 1) * 8 / n_heads)``: the inner product of two
    sinusoidal embeddings of size `dim` (``d'`` in the paper), less its value
    at distance 0, with ALiBi-like per-head scales, as NeMo's
    ``SandwichRelativePositionEmbedding`` (``hidden_size`` is `dim`).

    Parameters
    ----------
    n_heads : int
        Number of heads, >= 1.
    q_len, k_len : int
        Number of queries and keys (``k_len`` defaults to ``q_len``), >= 1.
    dim : int
        ``d'``, a positive even integer up to 65536 (each distance takes
        ``dim / 2`` cosines); ``k`` runs from 1 to ``dim / 2``.
    causal : bool
        True: ``-inf`` for keys after the query (as :func:`posenc.alibi_bias`;
        NeMo's non-bidirectional module gives them distance 0, bias 0, for its
        causal mask to hide).  False: the symmetric formula everywhere.
    q_offset, dtype, scores, out
        As for :func:`kerple_bias`.
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray
        The ``(n_heads, q_len, k_len)`` bias, or `scores` with it added.

    Notes
    -----
    The values are formed in float64, once per distance ``|qpos - j|``, and
    rounded once: the angles ``|qpos - j| * 10000 ** (-2k / dim)`` are
    float64 products, their cosines are made by the C core's sin/cos (those
    of :func:`posenc.sinusoid`'s float64 tables, within 1 ulp) and summed in
    float64.  The sum less ``dim / 2`` is within ``dim * 2**-52`` of its
    exact value at those angles, at any distance, before the division by
    the head's scale (rounded once).  float32, float16 and bfloat16 values
    are the float64 ones rounded once: the bits of the formula evaluated
    with NumPy's cosines, unless the exact value lies within that bound of
    a halfway point between two of their numbers.  No parameter is learned:
    there is no backward pass.

    Examples
    --------
    >>> import numpy as np, posenc
    >>> bias = posenc.sandwich_bias(2, 3, dim=4, causal=False, dtype=np.float64)
    >>> w = 10000.0 ** (-2 * np.arange(1, 3) / 4)  # the frequencies k = 1, 2
    >>> d = np.subtract.outer(np.arange(3), np.arange(3))
    >>> want = (np.cos(d[..., None] * w).sum(-1) - 2) / (1 * 8 / 2)  # head 0
    >>> np.allclose(bias[0], want)
    True
    """
    n_heads = v.integer(n_heads, "n_heads", minimum=1)
    dim = v.even_dim(dim, "dim")
    if dim > _MAX_SANDWICH_DIM:
        raise ValueError(
            f"dim must be <= {_MAX_SANDWICH_DIM} (each distance takes dim / 2 cosines), got {dim}"
        )
    return _by_distance(
        n_heads,
        lambda delta: by_magnitude(lambda d: sandwich_values(n_heads, dim, d), delta),
        (q_len, k_len, q_offset, causal),
        dtype,
        scores,
        out,
        ("n_heads, q_len and k_len",) * 2,
    )


# ---------------------------------------------------------------- FIRE


def fire_tile(x, w1, b1, w2, b2):
    """The MLP at `x` (r, s): float64 (heads, r, s).  One hidden unit at a
    time, ``relu(x * w1[w] + b1[w])``, its product with ``w2[:, w]`` added
    in order of `w` after the first (so the same bits for any tiling, and
    the C core's); ``b2`` last.  Per element of `x` it holds ``2 heads +
    1`` float64, whatever the width."""
    hidden = np.empty(x.shape, np.float64)
    out = np.empty((w2.shape[0],) + x.shape, np.float64)
    term = np.empty_like(out)
    for w in range(w2.shape[1]):
        np.multiply(x, w1[w], out=hidden)
        hidden += b1[w]
        np.maximum(hidden, 0.0, out=hidden)
        np.multiply(hidden, w2[:, w, None, None], out=out if w == 0 else term)
        if w:
            out += term
    out += b2[:, None, None]
    return out


def fire_by_distance(delta, w1, b1, w2, b2, c, threshold, eps):
    """FIRE at the distances `delta` (``qpos - j``, decreasing by one from
    `delta[0]`, the ``qpos`` of a query at or before `threshold`): float64
    (heads, len(delta)), made by :func:`fire_inputs` and :func:`fire_tile`
    in tiles, each value the bits the query's row would hold."""
    n_heads = w2.shape[0]
    values = np.empty((n_heads, delta.size))
    qpos = delta[:1]
    keys = qpos - delta  # 0, 1, 2, ...: exact
    for _, cols in tiles(1, delta.size, 2 * n_heads + 1):
        x = fire_inputs(qpos, keys[cols], c, threshold, eps)[0]
        values[:, cols] = fire_tile(x, w1, b1, w2, b2)[:, 0]
    return values


def _fire_rows(target, add, qpos, params, q_offset, causal):
    """The rows of `target` (..., heads, r, k_len), a view of the array the
    bias goes into, of the queries at `qpos` (r,), past the threshold, by
    ``_core.fire_rows``: their normalisers and the ``psi(|qpos - j|)`` of
    their r + k_len - 1 diagonals made here as :func:`fire_inputs` makes
    them, the MLP in C in :func:`fire_tile`'s operations and order (so the
    same bits), rounded once and written or added row by row."""
    w1, b1, w2, b2, c, threshold, eps = params
    norm = log1p_product(abs(c), np.maximum(qpos, threshold)) + eps
    psi = log1p_product(abs(c), np.abs(distances(qpos.size, target.shape[-1], q_offset)))
    # the kernel takes |q_offset| <= 2**53, which the rows after a threshold
    # may pass by a few: every key is at or before such a query either way
    first = min(q_offset, _core.MAX_Q_OFFSET)
    run_on_views(
        lambda dst: _core.fire_rows(
            norm, psi, w1, b1, w2, b2, v.for_kernel(dst), first, causal, add
        ),
        target,
        read=add,
        name="scores" if add else "out",
    )


@accepts_tensors
def fire_bias(
    w1,
    b1,
    w2,
    b2,
    c,
    threshold,
    q_len,
    k_len=None,
    *,
    eps=1e-6,
    causal=True,
    q_offset=None,
    dtype=None,
    scores=None,
    out=None,
):
    """FIRE's attention bias (Li et al., 2024), or its add into scores.

    ``x = log(|c| d + 1) / (log(|c| max(qpos, threshold) + 1) + eps)`` with
    ``d = |qpos - j|``, then ``bias[h, i, j] = w2[h] . relu(w1 x + b1) + b2[h]``.

    Parameters
    ----------
    w1, b1 : array_like of shapes (width, 1) and (width,)
        The first layer, ``Linear(1, width)`` (the authors' ``mlp[0].weight``
        and ``mlp[0].bias``); w1 may also be given as ``(width,)``.
    w2, b2 : array_like of shapes (n_heads, width) and (n_heads,)
        The second layer, ``Linear(width, n_heads)`` (``mlp[2].weight``,
        ``mlp[2].bias``).  These are torch's ``nn.Linear`` names and layouts,
        so a module's weights go in as they are.
    c : float
        The learned scale of the distances (the authors' ``c``), any finite
        real; only ``|c|`` matters.
    threshold : float
        ``L``, >= 0: the authors' ``threshold = |L_multiplier * init_L|``.
        Queries before it are normalised by it, later ones by their position.
    q_len, k_len : int
        Number of queries and keys (``k_len`` defaults to ``q_len``), >= 1.
    eps : float
        Added to the normaliser, > 0 (1e-6 as the authors).
    causal : bool
        True (the paper's decoders): ``-inf`` for future keys, as
        :func:`posenc.alibi_bias`.  False: the formula at ``|qpos - j|``,
        as the authors' module computes it for every pair before the mask.
    q_offset, dtype, scores, out
        As for :func:`kerple_bias` (float32 by default whatever the dtype of
        the MLP's parameters); the normaliser uses the query's position
        ``qpos = q_offset + i``.
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    ndarray
        The ``(n_heads, q_len, k_len)`` bias, or `scores` with it added; its heads
        are the rows of `w2`.

    Notes
    -----
    Evaluated in float64, each value rounded once: the rows of queries at
    or before `threshold` (one normaliser) from one value per distance, the
    later ones by the C core, row by row, on the library's threads, the
    second layer summed in the same order, so both give the same bits.
    The backward pass is ``posenc._functional_grad.fire_bias_grad``.

    Examples
    --------
    >>> import numpy as np, posenc
    >>> rng = np.random.default_rng(0)
    >>> w1, b1 = rng.normal(size=(32, 1)), rng.normal(size=32)  # Linear(1, 32)
    >>> w2, b2 = rng.normal(size=(4, 32)), rng.normal(size=4)  # Linear(32, 4 heads)
    >>> bias = posenc.fire_bias(w1, b1, w2, b2, 0.1, 512.0, 6)
    >>> bias.shape
    (4, 6, 6)
    >>> x = np.log(0.1 * 5 + 1) / (np.log(0.1 * 512 + 1) + 1e-6)  # query 5, key 0
    >>> np.allclose(bias[:, 5, 0], w2 @ np.maximum(w1[:, 0] * x + b1, 0) + b2, rtol=1e-6)
    True
    """
    p1, q1, p2, q2, scale, limit, tiny, _ = fire_params(w1, b1, w2, b2, c, threshold, eps)
    q_len, k_len, q_offset, causal = distance_args(q_len, k_len, q_offset, causal)
    shape = (p2.shape[0], q_len, k_len)
    target, add = _target(shape, dtype, scores, out, "w2's n_heads, q_len and k_len")
    qpos = float(q_offset) + np.arange(q_len, dtype=np.float64)
    # the queries at or before the threshold share its normaliser: their
    # rows depend only on qpos - j, made once per distance; the later ones
    # are made by the C core, row by row
    flat = int(np.count_nonzero(qpos <= limit))
    params = (p1, q1, p2, q2, scale, limit, tiny)
    if flat:
        _given(target[..., :flat, :], add, lambda d: fire_by_distance(d, *params), q_offset, causal)
    if flat < q_len:
        _fire_rows(target[..., flat:, :], add, qpos[flat:], params, q_offset + flat, causal)
    return target
