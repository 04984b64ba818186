"""How the reference twins round: to a dtype once, or into scores.

NumPy has no bfloat16: arrays of one are ml_dtypes' (or posenc's bits).  The
twins (posenc.reference and its companions, posenc._reference_functional)
widen them exactly and round results to them themselves, in float64,
because NumPy's and ml_dtypes' casts from float64 round twice (through
float32), which misses the nearest bfloat16 now and then.  Nothing here is
shared with the fast path.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
from numpy.typing import DTypeLike, NDArray

from ._dtypes import is_bfloat16, is_bfloat16_name, ml_bfloat16, widen


def dtype_of(dtype: Any) -> np.dtype:
    """`dtype` as NumPy's dtype, a bfloat16 name as ml_dtypes' type."""
    return ml_bfloat16() if is_bfloat16_name(dtype) else np.dtype(dtype)


def widened(arr: Any) -> NDArray[Any]:
    """`arr`, a bfloat16 array as float32 (exact), others as they are."""
    arr = np.asarray(arr)
    return widen(arr) if is_bfloat16(arr.dtype) else arr


def bfloat16_bits(x: Any) -> NDArray[np.uint16]:
    """The bits of the bfloat16 nearest each value (ties to even): x = m 2**e
    with m in [0.5, 1) has the spacing 2**(e - 8) (8 significant bits), or
    2**-133 below the normal range; rint rounds to a multiple of it.  Past
    the largest finite bfloat16 (after rounding): infinity; NaN: a quiet NaN
    with its sign and top payload bits."""
    x = np.asarray(x, dtype=np.float64)
    _, e = np.frexp(x)
    q = np.maximum(e, -125) - 8
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.ldexp(np.rint(np.ldexp(x, -q)), q)
        r = np.where(np.abs(r) > (2.0 - 2.0**-7) * 2.0**127, np.copysign(np.inf, x), r)
        bits = (r.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        nan = np.isnan(x)
        if nan.any():
            top = x[nan].astype(np.float32).view(np.uint32) >> 16
            bits[nan] = (top | 0x40).astype(np.uint16)
    return bits


def cast(values: Any, dtype: Any) -> NDArray[Any]:
    """`values` rounded once to `dtype` (bfloat16 by bfloat16_bits)."""
    dtype = dtype_of(dtype)
    values = widened(values)
    if is_bfloat16(dtype):
        return bfloat16_bits(values).view(dtype)
    return values.astype(dtype)


def add_or_return(
    bias: NDArray[Any],
    dtype: Optional[DTypeLike],
    scores: Optional[NDArray[Any]],
    out: Optional[NDArray[Any]],
) -> NDArray[Any]:
    """The bias as a new array of `dtype`, written into `out`, or added into
    `scores` (rounded to their dtype, then added with one rounding)."""
    if scores is not None:
        if is_bfloat16(scores.dtype):
            total = widened(scores).astype(np.float64) + widened(cast(bias, scores.dtype))
            scores[...] = cast(total, scores.dtype)
        else:
            scores += bias.astype(scores.dtype)
        return scores
    if out is not None:
        out[...] = cast(bias, out.dtype)
        return out
    return cast(bias, dtype)
