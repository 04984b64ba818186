"""What every bias by distance shares: its arguments and where it is written.

A bias that depends on the distance ``j - (q_offset + i)`` (ALiBi, T5,
KERPLE, Sandwich, FIRE) takes the lengths, ``q_offset`` and ``causal``
(:func:`distance_args`) and is written into a new array or ``out=``
(:func:`fill`), or added into ``scores=`` (:func:`scores_target`), by a C
kernel run on every 4-D view of the target the kernel takes
(:func:`run_on_views`).  The public functions (posenc.bias,
posenc.functional_bias) and the backward of the learned ones
(posenc._functional_grad) read them here.
"""

from __future__ import annotations

import numpy as np

from . import _core
from . import _validate as v

MAX_OFFSET = _core.MAX_Q_OFFSET


def lengths(q_len, k_len):
    """q_len and k_len (q_len's by default), each checked >= 1."""
    q_len = v.integer(q_len, "q_len", minimum=1)
    k_len = q_len if k_len is None else v.integer(k_len, "k_len", minimum=1)
    return q_len, k_len


def offset(q_offset, default=0):
    """q_offset checked (`default` for None)."""
    if q_offset is None:
        return default
    return v.integer(q_offset, "q_offset", minimum=-MAX_OFFSET, maximum=MAX_OFFSET)


def distance_args(q_len, k_len, q_offset, causal):
    """The lengths, the first query's position (``k_len - q_len`` by
    default, which needs ``q_len <= k_len``) and `causal`, checked: the
    arguments every bias by distance takes."""
    q_len, k_len = lengths(q_len, k_len)
    if q_offset is None and q_len > k_len:
        raise ValueError(
            f"q_len ({q_len}) > k_len ({k_len}): the default q_offset = k_len - q_len would put "
            "queries before the first key; pass q_offset"
        )
    q_offset = offset(q_offset, k_len - q_len)
    causal = v.flag(causal, "causal")
    return q_len, k_len, q_offset, causal


def scores_target(scores, shape, dtype):
    """`scores` as an ndarray that can be added into in place, checked
    against the trailing `shape` (and `dtype`, when one was asked for)."""
    arr = scores if isinstance(scores, np.ndarray) else np.asarray(scores)
    if arr is not scores and arr.base is None:
        raise TypeError(
            "scores must be an array that can be written in place (an ndarray or a CPU tensor), "
            f"not {type(scores).__name__}"
        )
    own = v.float_array_dtype(arr, "scores", bfloat16=True)
    if arr.ndim < 3 or arr.shape[-3:] != shape:
        raise ValueError(
            f"scores must have shape (..., {', '.join(map(str, shape))}), not {arr.shape}"
        )
    v.writeable(arr, "scores")
    if dtype is not None and not (own.kind == "V" and v.names_bfloat16(dtype)):
        if v.float_dtype(dtype, "dtype", bfloat16=True) != own:
            raise TypeError(f"dtype must be scores' dtype ({arr.dtype}) or None, not {dtype!r}")
    return arr


def run_on_views(kernel, arr, *, read, name):
    """kernel(view) on every 4-D view of `arr` (the argument `name`) the C
    code can write directly; arrays it cannot (byte-swapped, unaligned, a
    strided last axis) go through a native C-contiguous temporary, read from
    `arr` first when the kernel adds into it."""
    views = v.bias_views(arr)
    if views is not None:
        for view in views:
            kernel(view)
        return
    native = arr.dtype.newbyteorder("=")
    v.shape_size(arr.shape, f"{name} (a copy of it)", native.itemsize)
    tmp = np.array(arr, dtype=native, order="C") if read else np.empty(arr.shape, native)
    for view in v.bias_views(tmp):
        kernel(view)
    np.copyto(arr, tmp, casting="unsafe")


def fill(kernel, shape, dtype, out, sizes):
    """A new array of `shape` and `dtype` (its size checked, naming
    `sizes`), or `out` checked, written by `kernel`."""
    if out is None:
        v.shape_size(shape, sizes, dtype.itemsize)
        result = np.empty(shape, dtype)
        kernel(result[None])
        return result
    v.out_array(out, shape, dtype, "out")  # an array of that size exists (a memmap, maybe)
    run_on_views(kernel, out, read=False, name="out")
    return out
