"""bfloat16 in NumPy, with or without ml_dtypes.

NumPy has no bfloat16.  The arrays of one that users hold are of
``ml_dtypes.bfloat16`` (JAX's type; ``pip install posenc[bfloat16]``).  A
torch bfloat16 tensor reaches the NumPy functions as an array of
:data:`BFLOAT16_BITS` instead, a private two-byte dtype that views the same
bits, so torch users need no ml_dtypes; such arrays never leave posenc.
Either way the C kernels see the bits as ``uint16``.
"""

from __future__ import annotations

import sys

import numpy as np

# posenc's own name for bfloat16 bits, used only between posenc._torch and
# the NumPy functions
BFLOAT16_BITS = np.dtype([("bfloat16", "<u2")])

_NAMES = ("bfloat16", "bf16")


def is_bfloat16(dtype):
    """Whether `dtype` (a NumPy dtype) is bfloat16: ml_dtypes' or posenc's."""
    return dtype.itemsize == 2 and (dtype == BFLOAT16_BITS or dtype.name == "bfloat16")


def is_bfloat16_name(value):
    return isinstance(value, str) and value in _NAMES


def ml_bfloat16(name="dtype"):
    """ml_dtypes' bfloat16 dtype, the one NumPy arrays of bfloat16 have."""
    module = sys.modules.get("ml_dtypes")
    if module is None:
        try:
            import ml_dtypes as module
        except ImportError as exc:
            raise TypeError(
                f"{name}: bfloat16 NumPy arrays need ml_dtypes (pip install 'posenc[bfloat16]'); "
                "torch tensors of bfloat16 need nothing more"
            ) from exc
    return np.dtype(module.bfloat16)


def bits(arr):
    """A bfloat16 array's bits as uint16, for the C kernels (no copy)."""
    return arr.view(np.uint16)


def widen(arr):
    """A bfloat16 array's values as a new float32 array, exactly: a bfloat16
    is the top half of the float32 of the same value (one pass: the shift
    casts its uint16 input to uint32 as it goes)."""
    return np.left_shift(bits(arr), 16, dtype=np.uint32).view(np.float32)


def narrow(x):
    """The bits (uint16) of the bfloat16 nearest each value of the float32
    array `x`, ties to even; a NaN stays a NaN (made quiet), its sign and
    top payload bits kept.  A chunk at a time, so that the temporaries
    stay in cache.  The NumPy twin of the dense kernel's store
    (relative._cast), which the tests hold it to."""
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.shape, np.uint16)
    step = 1 << 16
    r = np.empty(min(step, flat.size), np.uint32)
    for a in range(0, flat.size, step):
        u = flat[a : a + step].view(np.uint32)
        t = r[: u.size]
        np.right_shift(u, 16, out=t)
        np.bitwise_and(t, 1, out=t)
        t += 0x7FFF
        t += u
        t >>= 16
        out[a : a + step] = t
        nan = np.isnan(flat[a : a + step])
        if nan.any():
            out[a : a + step][nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return out.reshape(np.shape(x))


def float_name(value, name="dtype"):
    """A float dtype given as NumPy takes one or by name, bfloat16 too
    (without ml_dtypes), as its name: "float16", "bfloat16", "float32" or
    "float64"."""
    if isinstance(value, str) and value in ("float16", "float32", "float64"):
        return value
    if is_bfloat16_name(value):
        return "bfloat16"
    try:
        dt = np.dtype(value)
    except TypeError as exc:
        raise TypeError(
            f"{name} must be float16, bfloat16, float32 or float64, not {value!r}"
        ) from exc
    if is_bfloat16(dt):
        return "bfloat16"
    dt = dt.newbyteorder("=")
    if dt.name not in ("float16", "float32", "float64"):
        raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, not {dt}")
    return dt.name
