"""Complex-order word embeddings, Wang et al. 2020.

"Encoding word order in complex embeddings" (ICLR 2020): a word is not a
vector but a function of its position.  Word ``t`` at position ``pos`` is,
feature by feature,

    f(t, pos) = r[t] * exp(i * (w[t] * pos + theta[t]))

with three learned tables of shape ``(vocab, dim)``: the amplitude ``r``
(what the word means), the frequency ``w`` (how fast its phase turns with
the position) and the initial phase ``theta``.  The phase is linear in the
position, so a shift of every position by ``k`` turns each feature by
``w[t] * k`` whatever the position: relative order comes with the absolute
one.  The authors' code splits the result into its real and imaginary parts
(``amp * cos(phase)``, ``amp * sin(phase)``) and counts positions from 1; it
reduces ``theta`` modulo ``2 pi``, which changes no value.

The phase is formed in float64 (``pos * w``, then ``+ theta``) and each
part rounded once to the result dtype, so long positions keep their
accuracy.  The sine and cosine are posenc's own (the C core's, the same bits
on every SIMD path and thread count), not NumPy's: within ~1.5 ulp of the
sine and cosine of the float64 phase, so float32 and float16 parts are
within 1 ulp of the exact value of that phase's ``r cos`` and ``r sin``,
float64 parts within a few ulp.  One pass of C goes from the tables' rows
to the parts; tables of another dtype than the parts' have only the rows
the tokens use converted first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core, _validate
from ._interop import foreign
from ._typing import ArrayLike

__all__ = ["complex_order_embedding", "complex_order_embedding_grad"]


def _tables(amplitude, frequency, phase):
    out = []
    for value, name in ((amplitude, "amplitude"), (frequency, "frequency"), (phase, "phase")):
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
        if arr.dtype.kind != "f" or arr.dtype.itemsize > 8:
            raise TypeError(
                f"{name} must be an array of float16, float32 or float64, not dtype {arr.dtype}"
            )
        if arr.ndim != 2:
            raise ValueError(f"{name} must have shape (vocab, dim), got {arr.shape}")
        out.append(arr)
    if not (out[0].shape == out[1].shape == out[2].shape):
        raise ValueError(
            "amplitude, frequency and phase must have the same shape (vocab, dim), got "
            f"{out[0].shape}, {out[1].shape} and {out[2].shape}"
        )
    return out


def _ids(token_ids, vocab):
    ids = token_ids if isinstance(token_ids, np.ndarray) else np.asarray(token_ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"token_ids must be an array of integers, not dtype {ids.dtype}")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        raise ValueError(
            f"token_ids must be in [0, {vocab}) (the tables' rows), got {ids.min()}..{ids.max()}"
        )
    return ids


def _positions(positions, shape):
    pos = _validate.real_array(positions, "positions")
    try:
        if np.broadcast_shapes(pos.shape, shape) != shape:
            raise ValueError
    except ValueError:
        raise ValueError(
            f"positions must broadcast to token_ids' shape {shape}, got {pos.shape}"
        ) from None
    return np.broadcast_to(pos.astype(np.float64), shape)


def _check(token_ids, positions, amplitude, frequency, phase):
    r, w, theta = _tables(amplitude, frequency, phase)
    ids = _ids(token_ids, r.shape[0])
    pos = _positions(positions, ids.shape)
    _validate.shape_size(ids.shape + (r.shape[1],), "token_ids", 8, count=2)
    return ids, pos, r, w, theta


def _used_rows(used, r, w, theta):
    """The rows `used` (unique ids) of the three tables, in float64 (only
    those rows are converted and checked: a table may be a whole
    vocabulary)."""
    rows = []
    for table, name in ((r, "amplitude"), (w, "frequency"), (theta, "phase")):
        got = table[used].astype(np.float64, copy=False)
        if not np.isfinite(got).all():
            raise ValueError(f"{name} must be finite in the rows token_ids use (found nan or inf)")
        rows.append(got)
    return rows


@foreign
def complex_order_embedding(
    token_ids: ArrayLike,
    positions: ArrayLike,
    amplitude: ArrayLike,
    frequency: ArrayLike,
    phase: ArrayLike,
    *,
    as_complex: bool = False,
) -> Any:
    """The complex-order embeddings ``r[t] exp(i (w[t] pos + theta[t]))``.

    Parameters
    ----------
    token_ids : array_like of int, any shape
        Rows of the tables, ``0 <= id < vocab``.
    positions : array_like of real, broadcastable to ``token_ids.shape``
        The position of each token (e.g. ``np.arange(1, n + 1)`` as the
        authors count, or ids from a sampler); ints or floats, finite.
    amplitude, frequency, phase : array_like of float, shape ``(vocab, dim)``
        The tables ``r``, ``w`` and ``theta``.
    as_complex : bool
        False (the default): the pair ``(real, imag)``.  True: one complex
        array (complex128 for float64 tables, complex64 otherwise).
    device : None, "cpu", torch.device or jax.Device, optional
        The kind of array returned: see :ref:`device-argument`.

    Returns
    -------
    (real, imag) : tuple of numpy.ndarray of shape ``token_ids.shape + (dim,)``
        ``r cos(phi)`` and ``r sin(phi)`` with ``phi = w pos + theta``, in
        the tables' result dtype; or the complex array with `as_complex`.

    Examples
    --------
    >>> import numpy as np, posenc
    >>> r, w, theta = np.ones((2, 3)), np.full((2, 3), np.pi / 2), np.zeros((2, 3))
    >>> real, imag = posenc.complex_order_embedding([0, 1], [1, 2], r, w, theta)
    >>> np.allclose(real, [[0, 0, 0], [-1, -1, -1]]), np.allclose(imag, [[1, 1, 1], [0, 0, 0]])
    (True, True)
    """
    as_complex = _validate.flag(as_complex, "as_complex")
    ids, pos, r, w, theta = _check(token_ids, positions, amplitude, frequency, phase)
    dtype = np.result_type(r.dtype, w.dtype, theta.dtype)
    part = np.dtype(np.float64 if dtype == np.float64 else np.float32) if as_complex else dtype
    return _parts(ids, pos, r, w, theta, part, as_complex)


def _parts(ids, pos, r, w, theta, part, as_complex):
    """The embedding of checked arguments by _core.complex_order: the two
    parts of dtype `part`, or the complex array of them."""
    shape = ids.shape + (r.shape[1],)
    flat = ids.reshape(-1).astype(np.int64)
    tables = [_native(t, part) for t in (r, w, theta)]
    if any(t is None for t in tables):
        # tables of another dtype: only the rows the tokens use, converted
        # (exactly: part is at least as wide as each table)
        used, flat = np.unique(flat, return_inverse=True)
        tables = [t[used].astype(part) for t in (r, w, theta)]
    pos = np.ascontiguousarray(pos).reshape(-1)
    n, dim = flat.size, r.shape[1]
    if as_complex:
        out = np.empty(shape, np.complex128 if part == np.float64 else np.complex64)
        _core.complex_order(flat, pos, *tables, out.view(part).reshape(n, 2 * dim), None)
        return out
    real, imag = np.empty(shape, part), np.empty(shape, part)
    _core.complex_order(flat, pos, *tables, real.reshape(n, dim), imag.reshape(n, dim))
    return real, imag


def _native(table, dtype):
    """table as the kernel reads it (of dtype, aligned, native byte order,
    its rows contiguous), without a copy; None if it is not."""
    ok = (
        table.dtype == dtype
        and table.dtype.isnative
        and table.flags.aligned
        and (table.shape[1] <= 1 or table.strides[1] == table.itemsize)
    )
    return table if ok else None


def complex_order_embedding_grad(
    token_ids, positions, amplitude, frequency, phase, grad_real, grad_imag
):
    """The backward of :func:`complex_order_embedding` into its three tables.

    Parameters
    ----------
    token_ids, positions, amplitude, frequency, phase
        As :func:`complex_order_embedding` took them.
    grad_real, grad_imag : array_like of float, shape ``token_ids.shape + (dim,)``, or None
        The gradients of the loss with respect to the real and imaginary
        parts (None for zero).

    Returns
    -------
    (d_amplitude, d_frequency, d_phase) : tuple of numpy.ndarray of shape ``(vocab, dim)``
        In each table's dtype; a row no token uses is 0, a row used several
        times sums its uses:
        ``d r = gR cos(phi) + gI sin(phi)``,
        ``d theta = r (gI cos(phi) - gR sin(phi))``, ``d w = pos * d theta``.
    """
    return _backward(token_ids, positions, amplitude, frequency, phase, grad_real, grad_imag)


def _backward(
    token_ids, positions, amplitude, frequency, phase, grad_real, grad_imag, of_positions=False
):
    """complex_order_embedding_grad's three tables; with `of_positions`
    also the gradient of each token's position, ``sum over the features of
    w d theta``, in float64 of token_ids' shape (the adapters' backward
    sums it to the positions' own shape)."""
    ids, pos, r, w, theta = _check(token_ids, positions, amplitude, frequency, phase)
    # the rows the tokens use, each once (`inverse`: a token's row among them)
    used, inverse = np.unique(ids.reshape(-1), return_inverse=True)
    r_used, w_used, theta_used = _used_rows(used, r, w, theta)
    shape = ids.shape + (r.shape[1],)
    grads = []
    for value, name in ((grad_real, "grad_real"), (grad_imag, "grad_imag")):
        if value is None:
            grads.append(None)
            continue
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
        if arr.dtype.kind != "f":
            raise TypeError(f"{name} must be a float array, not dtype {arr.dtype}")
        if arr.shape != shape:
            raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
        if not np.isfinite(arr).all():
            raise ValueError(f"{name} must be finite (found nan or inf)")
        grads.append(arr.astype(np.float64))
    g_re, g_im = grads
    # cos and sin of the phase as the forward has them (the kernel's, from
    # the same float64 values): its parts at r = 1, from the used rows
    n, dim = inverse.size, r.shape[1]
    cos, sin = np.empty(shape), np.empty(shape)
    ones = np.broadcast_to(np.ones((1, dim)), w_used.shape)
    flat_pos = np.ascontiguousarray(pos, dtype=np.float64).reshape(-1)
    rows = inverse.astype(np.int64)
    _core.complex_order(
        rows, flat_pos, ones, w_used, theta_used, cos.reshape(n, dim), sin.reshape(n, dim)
    )
    amp = r_used[inverse].reshape(shape)
    zero = np.zeros(shape)
    g_re = zero if g_re is None else g_re
    g_im = zero if g_im is None else g_im
    d_r = g_re * cos + g_im * sin
    d_theta = amp * (g_im * cos - g_re * sin)
    d_w = d_theta * pos[..., None]
    vocab = r.shape[0]
    # summed in float64 over the rows the tokens use only (in the tokens'
    # order, each rounded once into its table's dtype); the others are 0
    out = []
    for d, table in ((d_r, r), (d_w, w), (d_theta, theta)):
        acc = np.zeros((used.size, dim))
        np.add.at(acc, inverse, d.reshape(-1, dim))
        full = np.zeros((vocab, dim), table.dtype)
        full[used] = acc
        out.append(full)
    if of_positions:
        out.append((d_theta * w_used[inverse].reshape(shape)).sum(axis=-1))
    return tuple(out)
