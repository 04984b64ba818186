"""Where apply_rope's positions go on the axes of ``x``.

posenc.rope's functions and the JAX adapter (posenc._jax, which batches
apply_rope under vmap by the same rule) read them here: the sequence axis
from ``axes=`` and ``seq_axis=`` (:func:`named_seq_axis`), positions
placed to broadcast against ``x.shape[:-1]`` with the offset added
(:func:`placed_positions`; in rows for M-RoPE and axial RoPE,
:func:`channel_positions`), and seen with x's shape without a copy
(:func:`broadcast_positions`).  The rule is written out in the RoPE guide
("Where the positions go").
"""

from __future__ import annotations

import threading
from numbers import Integral

import numpy as np

from . import _validate as v


def named_seq_axis(axes, seq_axis, ndim):
    """The sequence axis of an `ndim`-dimensional x from ``axes=`` (a layout
    by name such as ``"bshd"``) and ``seq_axis=`` (None: not given): -2 when
    neither is given, a ValueError naming them when they disagree."""
    if axes is None:
        return -2 if seq_axis is None else seq_axis
    if not isinstance(axes, str):
        raise TypeError(
            f"axes must be a string such as 'bhsd' or 'bshd', not {type(axes).__name__}"
        )
    if (
        set(axes) - set("bhsd")
        or len(set(axes)) != len(axes)
        or "s" not in axes
        or not axes.endswith("d")
    ):
        raise ValueError(
            "axes must name x's axes with the letters b (batch), h (heads), s (sequence) and "
            f"d (features, last), each at most once, s and d required: e.g. 'bhsd', 'bshd', "
            f"'bsd', 'sd'; got {axes!r}"
        )
    if len(axes) != ndim:
        raise ValueError(f"axes {axes!r} names {len(axes)} axes, x has {ndim}")
    axis = axes.index("s")
    if seq_axis is not None:
        given = v.integer(seq_axis, "seq_axis")
        if not -ndim <= given < ndim or given % ndim != axis:
            raise ValueError(
                f"seq_axis={given} disagrees with axes={axes!r} (sequence on axis {axis}); "
                "give one of them"
            )
    return axis


def _seq_axis(seq_axis, ndim):
    """`seq_axis` as a non-negative axis of x other than the last."""
    seq_axis = v.integer(seq_axis, "seq_axis")
    if not -ndim <= seq_axis < ndim or seq_axis % ndim == ndim - 1:
        raise ValueError(
            f"seq_axis must be an axis of x other than the last (x has {ndim} dimensions), "
            f"got {seq_axis}"
        )
    return seq_axis % ndim


def _place_positions(shape, lead, axis):
    """The shape positions of `shape` take to broadcast against `lead`
    (``x.shape[:-1]``) with the sequence on `axis`, or a ValueError.

    As many dimensions as `lead`: as they are.  Fewer: the last on `axis`,
    the leading ones on the leading axes of `lead`, 1 (broadcast) between.
    """
    if axis is None:  # x is one vector
        expected = "a scalar"
    else:
        expected = f"(seq,) = ({lead[axis]},)"
        if axis > 0:
            expected += f" or (batch, seq) = ({lead[0]}, {lead[axis]})"
    k = len(shape)
    if k == 0 or k == len(lead):
        placed = shape
    elif k > len(lead) or k - 1 > axis:
        placed = None
    else:
        placed = shape[:-1] + (1,) * (axis - (k - 1)) + shape[-1:] + (1,) * (len(lead) - 1 - axis)
    try:
        if placed is None or np.broadcast_shapes(placed, lead) != lead:
            raise ValueError
    except ValueError:
        raise ValueError(
            f"positions of shape {shape} cannot be placed on x.shape[:-1] = {lead} with the "
            f"sequence on axis {axis}: expected {expected} (the last axis on seq_axis, "
            f"leading axes on x's leading axes), or a shape that broadcasts to {lead}"
        ) from None
    return placed


def channel_positions(positions, chan):
    """Positions of M-RoPE or axial RoPE: an array whose first axis holds one
    row per channel, or a ValueError saying so."""
    if positions is None or isinstance(positions, (Integral, np.integer)):
        raise ValueError(
            f"{chan.what} needs positions with a leading axis of {chan.n} rows (e.g. "
            f"{chan.example}), not {'None' if positions is None else 'a length'}"
        )
    if isinstance(positions, (bool, np.bool_)):
        raise TypeError("positions must be numbers, not bool")
    arr = v.real_array(positions, "positions")
    if arr.ndim == 0 or arr.shape[0] != chan.n:
        raise ValueError(
            f"{chan.what} needs positions with a leading axis of {chan.n} rows (e.g. "
            f"{chan.example}), got shape {arr.shape}"
        )
    return arr


def placed_positions(positions, lead, offset, seq_axis, chan=None):
    """Positions as float64 with offset added, shaped to broadcast against
    `lead` (after a leading axis of channels with `chan`)."""
    if not lead and positions is not None:  # one vector: seq_axis does not apply
        axis = None
    else:
        axis = _seq_axis(seq_axis, len(lead) + 1)
    if chan is not None:
        arr = channel_positions(positions, chan)
        placed = _place_positions(arr.shape[1:], lead, axis)
        placed = (chan.n,) + (1,) * (len(lead) - len(placed)) + placed
    elif positions is None:
        n = lead[axis]
        pos = offset + np.arange(n, dtype=np.float64)
        return pos.reshape((n,) + (1,) * (len(lead) - 1 - axis))
    else:
        if isinstance(positions, (bool, np.bool_)):
            raise TypeError("positions must be numbers, not bool")
        arr = v.real_array(positions, "positions")
        try:
            placed = _place_positions(arr.shape, lead, axis)
        except ValueError as exc:
            if arr.ndim >= 2 and arr.shape[0] in (2, 3):
                raise ValueError(
                    f"{exc}; if the first axis of positions holds M-RoPE's (temporal, height, "
                    "width) rows or the (row, column) coordinates of patches, pass "
                    "mrope_section= (or a config that has it) or axial="
                ) from None
            raise
    # a native copy: the kernel reads it from threads
    v.shape_size(arr.shape, "positions")
    pos = np.array(arr, dtype=np.float64, order="C").reshape(placed)
    if offset:
        with np.errstate(over="ignore"):  # an overflow is reported just below
            pos += offset
        if not np.isfinite(pos).all():
            raise ValueError("positions + offset must be finite")
    return pos


def offset_positions(lead, offset, seq_axis):
    """``offset + arange(seq)`` on the sequence axis of an x whose leading
    axes are `lead` (not empty), and those positions seen with `lead`'s
    shape: what :func:`placed_positions` and :func:`broadcast_positions`
    give for no positions, at a decoding step's cost.  For a short sequence
    the arrays are the calling thread's own, kept for `lead`'s shape and
    written again by its next call: they are read within the call only."""
    if type(seq_axis) is int and seq_axis == -2 and len(lead) >= 1:
        axis = len(lead) - 1
    else:
        axis = _seq_axis(seq_axis, len(lead) + 1)
    n = lead[axis]
    if not -_FAR < offset < _FAR:
        pos = np.arange(n, dtype=np.float64)
        with np.errstate(over="ignore"):  # an overflow is reported just below
            pos += offset
        if not np.isfinite(pos).all():
            raise ValueError("positions + offset must be finite")
    elif n <= _KEPT_LENGTH:
        kept = getattr(_KEPT, "views", None)
        if kept is None:
            kept = _KEPT.views = {}
        entry = kept.get((lead, axis))
        if entry is None:
            if len(kept) >= _KEPT_SHAPES:
                kept.clear()
            pos = np.empty(n, np.float64)
            entry = kept[(lead, axis)] = (pos, _seen_as(pos, lead, axis))
        np.add(_ARANGE[:n], offset, out=entry[0])
        return entry
    else:
        pos = np.arange(n, dtype=np.float64)
        if offset:
            pos += offset
    return pos, _seen_as(pos, lead, axis)


def _seen_as(pos, lead, axis):
    strides = [0] * len(lead)
    strides[axis] = 8
    return np.ndarray(lead, np.float64, pos, 0, tuple(strides))


# offset_positions' arrays per thread, for sequences of at most _KEPT_LENGTH
# positions (a decoding step's, a chunk's) and at most _KEPT_SHAPES shapes
_KEPT = threading.local()
_KEPT_LENGTH = 64
_KEPT_SHAPES = 16
_ARANGE = np.arange(_KEPT_LENGTH, dtype=np.float64)
_ARANGE.flags.writeable = False
# past this offset, offset + position may overflow float64: checked
_FAR = 2.0**1000


def broadcast_positions(pos, lead, channels=False):
    """`pos` (C-contiguous float64, each dimension 1 or lead's, aligned to
    the right) seen with `lead`'s shape: what np.broadcast_to makes, a few
    times faster.  With `channels`, its first axis (the channels) is kept
    before `lead`."""
    if channels:
        strides = (pos.strides[0],) + tuple(
            0 if n == 1 else s for n, s in zip(pos.shape[1:], pos.strides[1:])
        )
        return np.ndarray((pos.shape[0],) + lead, np.float64, pos, 0, strides)
    pad = len(lead) - pos.ndim
    strides = (0,) * pad + tuple(0 if n == 1 else s for n, s in zip(pos.shape, pos.strides))
    return np.ndarray(lead, np.float64, pos, 0, strides)
