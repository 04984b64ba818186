"""Argument checking shared by every public function.

Each helper takes the value and the name of the argument it came from, and
returns the value in the form the kernels want, or raises ``TypeError`` (the
wrong kind of thing) or ``ValueError`` (the wrong value or shape) with a
message that names the argument and what was expected.  All checks run
before anything is written, so a failed call leaves ``out=`` untouched.
"""

from __future__ import annotations

import math
import operator
import os
from functools import cache
from numbers import Integral, Real

import numpy as np

from ._dtypes import is_bfloat16, is_bfloat16_name, ml_bfloat16, widen

FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def integer(value, name, *, minimum=None, maximum=None):
    """An exact integer (Python or NumPy, not bool) within bounds."""
    if type(value) is not int:  # the common case skips the abstract-class checks
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (Integral, np.integer)):
            raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
        value = operator.index(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def even_dim(value, name):
    """A positive even integer, such as a model dimension split into pairs."""
    value = integer(value, name)
    if value <= 0 or value % 2:
        raise ValueError(f"{name} must be a positive even integer, got {value}")
    return value


def real(value, name, *, positive=False):
    """A finite real number (not bool) as a Python float; a ValueError
    naming it for an integer (or fraction) past float64's range."""
    if type(value) is not float and type(value) is not int:  # the common cases skip these
        real_types = (Real, np.integer, np.floating)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, real_types):
            raise TypeError(f"{name} must be a real number, not {type(value).__name__}")
    try:
        value = float(value)
    except OverflowError:
        kind = "an integer" if isinstance(value, Integral) else f"a {type(value).__name__}"
        raise ValueError(
            f"{name} must be finite, got {kind} past float64's range (about 1.8e308)"
        ) from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def choice(value, name, options):
    """One of a few strings."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, one of {options}, not {type(value).__name__}")
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def _floats(bfloat16):
    return "float16, bfloat16, float32 or float64" if bfloat16 else "float16, float32 or float64"


def names_bfloat16(value):
    """Whether the dtype-like `value` is bfloat16: the names "bfloat16" and
    "bf16", ml_dtypes' type or dtype, or posenc's BFLOAT16_BITS."""
    if isinstance(value, str):
        return is_bfloat16_name(value)
    if isinstance(value, type) and issubclass(value, np.generic):
        value = np.dtype(value)
    return isinstance(value, np.dtype) and is_bfloat16(value)


def float_dtype(value, name="dtype", *, bfloat16=False):
    """float16, float32 or float64, given any way NumPy accepts a dtype; and
    with `bfloat16`, bfloat16 too: a name ("bfloat16", "bf16") gives
    ml_dtypes' dtype (a TypeError saying how to install it when it is
    missing), a bfloat16 dtype itself.  None is float32, the default of
    every ``dtype=`` (NumPy's own ``np.dtype(None)`` is float64)."""
    if value is None:
        return np.dtype(np.float32)
    if bfloat16 and names_bfloat16(value):
        return ml_bfloat16(name) if isinstance(value, str) else np.dtype(value)
    try:
        dt = np.dtype(value)
    except TypeError as exc:
        raise TypeError(f"{name} must be {_floats(bfloat16)}, not {value!r}") from exc
    if dt.newbyteorder("=") not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be {_floats(bfloat16)}, not {dt}")
    return dt.newbyteorder("=")


def float_array_dtype(arr, name, *, bfloat16=False):
    """The native float16/32/64 dtype of the array `arr` (or with
    `bfloat16`, its bfloat16 dtype), else TypeError."""
    if arr.dtype.kind == "f":
        native = arr.dtype.newbyteorder("=")
        if native in FLOAT_DTYPES:
            return native
    elif bfloat16 and is_bfloat16(arr.dtype):
        return arr.dtype
    raise TypeError(f"{name} must have dtype {_floats(bfloat16)}, not {arr.dtype}")


def native_dtype(dtype):
    """`dtype` in native byte order (bfloat16, which has none, as it is):
    the form to compare with a NumPy type, since ``np.dtype(">f8") ==
    np.float64`` is False on a little-endian machine."""
    dtype = np.dtype(dtype)
    return dtype if is_bfloat16(dtype) else dtype.newbyteorder("=")


def result_dtype(dtype, out, *, bfloat16=False):
    """The dtype of a generated table: `dtype` if given, else `out`'s, else
    float32 (as NumPy's functions take theirs from ``out=``).  With
    `bfloat16`, bfloat16 is one; a bfloat16 `out` keeps its own kind of
    bfloat16 (ml_dtypes' or posenc's bits) whichever way `dtype` names it."""
    out_bf16 = bfloat16 and isinstance(out, np.ndarray) and is_bfloat16(out.dtype)
    if dtype is None:
        if isinstance(out, np.ndarray) and out.dtype.kind == "f":
            return float_dtype(out.dtype, "out")
        return out.dtype if out_bf16 else np.dtype(np.float32)
    if out_bf16 and names_bfloat16(dtype):
        return out.dtype
    return float_dtype(dtype, "dtype", bfloat16=bfloat16)


def for_kernel(arr):
    """`arr` as the C kernels take it: a bfloat16 array as a uint16 view of
    its bits (NumPy has no bfloat16 type of its own), others as they are."""
    if arr.dtype.kind == "V" and is_bfloat16(arr.dtype):
        return arr.view(np.uint16)
    return arr


def _physical_memory():
    """The machine's physical memory in bytes, or None where the platform
    does not say (os.sysconf: Linux, macOS and the other Unixes)."""
    try:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages * page if pages > 0 and page > 0 else None


@cache
def memory_limit():
    """``(bytes, what)``: the most bytes a call's result may take, and what
    bounds it: the machine's physical memory (a larger result could not be
    filled without swapping, if the system lets it be allocated at all),
    and in any case the largest array NumPy can index (``intp`` max
    bytes)."""
    numpy_max = int(np.iinfo(np.intp).max)
    memory = _physical_memory()
    if memory is not None and memory < numpy_max:
        return memory, "this machine's memory"
    return numpy_max, "the largest array NumPy can make"


def _bytes(n):
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024:
            return f"{n:.3g} {unit}" if unit != "bytes" else f"{n} bytes"
        n /= 1024
    return f"{n:.3g} EiB"


def shape_size(shape, name, itemsize=8, *, count=1):
    """Number of elements of `shape`, in Python ints (no wrap-around).

    A ValueError naming `name` (the arguments that set the size) and the
    shape when `count` arrays of that shape, `itemsize` bytes an element,
    take more bytes than :func:`memory_limit` allows.  Every function
    calls it with the sizes it was given, before it allocates anything,
    so a result too large to make fails at once with the arguments named,
    not with a MemoryError (or NumPy's "array is too big") after work.
    """
    size = 1
    for n in shape:
        size *= operator.index(n)
    nbytes = size * itemsize * count
    limit, what = memory_limit()
    if nbytes > limit:
        arrays = "an array" if count == 1 else f"{count} arrays"
        raise ValueError(
            f"{name}: {arrays} of shape {tuple(operator.index(n) for n in shape)} "
            f"({itemsize} bytes an element: {_bytes(nbytes)}) would not fit in {what} "
            f"({_bytes(limit)})"
        )
    return size


def real_array(value, name):
    """Any array-like of finite real numbers (ints or floats, not bool or
    complex); bfloat16 (ml_dtypes' or posenc's bits) as its exact float32
    values, as float16 is read."""
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if is_bfloat16(arr.dtype):
        arr = widen(arr)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold integers or real floats, not dtype {arr.dtype}")
    if arr.dtype.kind == "f" and arr.size and not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite (found nan or inf)")
    return arr


def positions(value, name="positions", *, result=None):
    """An int n (positions 0..n-1) or an array of positions.

    A 0-d integer array or tensor (``np.array(8)``, ``torch.tensor(8)``) is a
    length like a Python int; a float scalar is one position.  Returns the
    positions as a C-contiguous float64 vector and the shape they came in
    (``(n,)`` for a length).  Integer positions are exact up to 2**53.
    `result`, if given, is called with that shape before the positions are
    made or read, to check the size of what the caller makes from them
    (with :func:`shape_size`); the float64 positions are checked too.
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int or an array of positions, not bool")
    if not isinstance(value, (Integral, np.integer)):
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
        if arr.ndim == 0 and arr.dtype.kind == "b":
            raise TypeError(f"{name} must be an int or an array of positions, not bool")
        if arr.ndim == 0 and arr.dtype.kind in "iu":
            value = arr[()]
    if isinstance(value, (Integral, np.integer)):
        n = integer(value, name, minimum=0)
        if result is not None:
            result((n,))
        shape_size((n,), name)
        return np.arange(n, dtype=np.float64), (n,)
    if result is not None:
        result(arr.shape)
    shape_size(arr.shape, name)
    arr = real_array(arr, name)
    return native_copy(arr, np.float64).reshape(-1), arr.shape


def native_copy(arr, dtype):
    """`arr` as a C-contiguous, aligned, native-order array of `dtype`:
    `arr` itself when it is one, else a copy (an unaligned buffer, such as
    ``np.frombuffer(buf, offset=1)``, is copied, not refused); a bfloat16
    `arr` through its exact float32 values."""
    dtype = np.dtype(dtype).newbyteorder("=")
    if is_bfloat16(arr.dtype) and not is_bfloat16(dtype):
        arr = widen(arr)
    if arr.dtype == dtype and arr.flags.c_contiguous and arr.flags.aligned:
        return arr  # the common case, without np.require's cost
    return np.require(arr, dtype=dtype, requirements=("C", "A"))


def out_array(out, shape, dtype, name="out"):
    """Check a user's ``out=``: an ndarray of exactly `shape`, of `dtype` (any
    byte order), writeable, its elements apart (see `writeable`)."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, not {type(out).__name__}")
    if (
        out.dtype.kind != dtype.kind
        or out.dtype.itemsize != dtype.itemsize
        or (dtype.kind == "V" and out.dtype != dtype)  # bfloat16: the same kind of it
    ):
        raise TypeError(f"{name} must have dtype {dtype}, not {out.dtype}")
    if out.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, not {out.shape}")
    return writeable(out, name)


def writeable(arr, name):
    """`arr`, an array a call writes into (``out=``, ``scores=``), checked:
    writeable, and no two of its elements sharing memory (zero or
    interleaved strides), whose result would depend on the order of the
    writes; refused as torch's in-place ops refuse such a tensor."""
    flags = arr.flags
    if not flags.writeable:
        raise ValueError(f"{name} is read-only")
    if not (flags.c_contiguous or flags.f_contiguous):  # contiguous: apart
        elements_apart(arr.shape, arr.strides, arr.itemsize, name)
    return arr


def elements_apart(shape, strides, itemsize, name):
    """A ValueError naming `name` when elements of the array (`shape`,
    `strides` and `itemsize` in the same unit: bytes for NumPy, elements
    with itemsize 1 for torch) may share memory; an empty array has none."""
    if 0 in shape or not _overlaps(shape, strides, itemsize):
        return
    raise ValueError(
        f"{name} has elements that share memory (zero or overlapping strides), such as an "
        "expanded or broadcast view: several results would land in one place; pass an array "
        "whose elements are apart (a copy)"
    )


def kernel_ready(arr):
    """Whether a kernel can read or write `arr` where it is: native byte
    order, aligned, contiguous along the last axis."""
    return (
        arr.dtype.isnative
        and arr.flags.aligned
        and (arr.ndim == 0 or arr.shape[-1] <= 1 or arr.strides[-1] == arr.itemsize)
    )


def _merged_axes(shape, strides):
    """Axes (`shape`, `strides`) as one: ``(length, stride)``, the stride
    None when every length is 1; None when the strides do not allow it."""
    lead = [(n, s) for n, s in zip(shape, strides) if n != 1]
    if any(so != si * ni for (_, so), (ni, si) in zip(lead[:-1], lead[1:])):
        return None
    length = 1
    for n, _ in lead:
        length *= n
    return length, (lead[-1][1] if lead else None)


def rows_view(arr):
    """`arr` (..., d) seen as a 2-D (rows, d) array without a copy, or None.

    The kernels walk rows with one row stride and a contiguous last axis, in
    native byte order; anything else (None returned) goes through a
    temporary.
    """
    if arr.ndim == 0 or not kernel_ready(arr):
        return None
    merged = _merged_axes(arr.shape[:-1], arr.strides[:-1])
    if merged is None:
        return None
    rows, row_stride = merged
    d = arr.shape[-1]
    if row_stride is None:
        row_stride = d * arr.itemsize
    return np.lib.stride_tricks.as_strided(
        arr, shape=(rows, d), strides=(row_stride, arr.itemsize), writeable=True
    )


def output(out, shape, dtype, name="out"):
    """Where a kernel should write a result of `shape` and `dtype`.

    Returns ``(result, rows, finish)``: `result` is what the function returns
    (the user's `out`, or a new array), `rows` the 2-D view the kernel fills,
    and `finish()` copies a temporary into `out` when `out` could not be
    written directly (non-native byte order, non-collapsible strides); an
    `out` whose elements share bytes is refused (see `writeable`).
    """
    if out is None:
        shape_size(shape, name, dtype.itemsize)
        result = np.empty(shape, dtype)
        return result, result.reshape(-1, shape[-1]), lambda: None
    out_array(out, shape, dtype, name)  # an array of that size exists (a memmap, maybe)
    rows = rows_view(out)
    if rows is not None:
        return out, rows, lambda: None
    shape_size(shape, f"{name} (a copy of it)", dtype.itemsize)
    tmp = np.empty(shape, dtype)

    def finish():
        np.copyto(out, tmp, casting="unsafe")

    return out, tmp.reshape(-1, shape[-1]), finish


def flag(value, name):
    """A bool (Python or NumPy), as a Python bool."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, not {type(value).__name__}")
    return bool(value)


def copy_if_shared(values, target):
    """`values`, or a copy of them when they share memory with `target` (the
    array written), so that they are read as they were before the call (as
    NumPy's ufuncs read overlapping inputs)."""
    if isinstance(target, np.ndarray) and np.may_share_memory(values, target):
        return values.copy()
    return values


def self_overlaps(arr):
    """Whether two elements of `arr` may share bytes (zero or interleaved
    strides)."""
    return _overlaps(arr.shape, arr.strides, arr.itemsize)


def _overlaps(shape, strides, itemsize):
    """Whether two elements may share memory: axes sorted by |stride| must
    each step past the extent of the ones inside them (a sufficient test:
    a layout that passes has its elements apart).  The sort is written out
    (a few axes) so that torch.compile traces it on symbolic sizes too."""
    axes: list = []
    for n, s in zip(shape, strides):
        if n > 1:
            s = abs(s)
            i = len(axes)
            while i and axes[i - 1][0] > s:
                i -= 1
            axes.insert(i, (s, n))
    extent = itemsize
    for stride, n in axes:
        if stride < extent:
            return True
        extent = stride * n
    return False


def bias_views(arr):
    """`arr` (..., heads, q, k) as 4-D ``(batch, heads, q, k)`` views that the
    bias kernels write directly, without a copy, or None when they cannot.

    The kernels take any strides on the outer axes but want the last axis
    contiguous, native byte order, alignment and elements that do not
    overlap; leading axes are merged into one batch axis where their strides
    allow, else the array is split along the outer leading axes.
    """
    if arr.size == 0:
        return []
    if arr.flags.c_contiguous and arr.flags.writeable and kernel_ready(arr):
        return [arr.reshape((-1,) + arr.shape[-3:])]  # the common case, quickly
    if not kernel_ready(arr) or not arr.flags.writeable or self_overlaps(arr):
        return None
    merged = _merged_axes(arr.shape[:-3], arr.strides[:-3])
    if merged is not None:
        batch, stride = merged
        view = np.lib.stride_tricks.as_strided(
            arr,
            shape=(batch,) + arr.shape[-3:],
            strides=(stride or 0,) + arr.strides[-3:],
            writeable=True,
        )
        return [view]
    return [arr[idx] for idx in np.ndindex(arr.shape[:-4])]
