"""Complex-order embeddings' kernel's caller: what the embedding and its
backward share.

posenc.complex_order's functions call these: :func:`checked`, the
arguments checked (token ids within the tables, positions broadcast to
them, the three tables); :func:`parts`, the embedding by the C core
(``_core.complex_order``); :func:`backward`, the tables' gradients (and
the positions', for the backward rules of posenc._grad), with the cosine
and sine of each phase as the forward's kernel makes them.
"""

from __future__ import annotations

import numpy as np

from . import _core, _validate


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


def checked(token_ids, positions, amplitude, frequency, phase):
    """(ids, positions as float64 of ids' shape, r, w, theta) checked."""
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


def parts(ids, pos, r, w, theta, part, as_complex):
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


def backward(
    token_ids, positions, amplitude, frequency, phase, grad_real, grad_imag, of_positions=False
):
    """complex_order_embedding_grad's three tables; with `of_positions`
    also the gradient of each token's position, ``sum over the features of
    w d theta``, in float64 of token_ids' shape (the adapters' backward
    sums it to the positions' own shape)."""
    ids, pos, r, w, theta = checked(token_ids, positions, amplitude, frequency, phase)
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
