"""T5's bias from its bucket table, and the table's gradient.

What posenc.bias's t5_bias and relative_position_bucket, posenc.relative's
tupe_bias and the backward rules (posenc._grad) share: the bucket options
checked (:func:`checked_options`), the bias written or added by the C
kernel (:func:`bias`), and :func:`t5_bias_table_grad`, the bias's backward
with respect to its table (the incoming gradient summed by bucket), whose
own backward is the bias again.  The bucket thresholds are posenc._t5's.
"""

from __future__ import annotations

import numpy as np

from . import _core, _t5
from . import _validate as v
from ._distance_bias import fill, lengths, offset, run_on_views, scores_target

MAX_BUCKETS = _core.T5_MAX_BUCKETS
MAX_DISTANCE = _core.T5_MAX_DISTANCE
# the arguments that set the size of a bias, as its size check names them
SIZES = "table's n_heads (its columns), q_len and k_len"


def checked_options(bidirectional, num_buckets, max_distance):
    """num_buckets and max_distance checked for `bidirectional`."""
    num_buckets = v.integer(num_buckets, "num_buckets", minimum=2, maximum=MAX_BUCKETS)
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    max_distance = v.integer(max_distance, "max_distance", maximum=MAX_DISTANCE)
    if max_distance < 1 or max_distance <= exact:
        raise ValueError(
            f"max_distance must be greater than the {exact} exact buckets (and >= 1) for "
            f"num_buckets={num_buckets}, bidirectional={bidirectional}; got {max_distance}"
        )
    return num_buckets, max_distance


def bias(table, q_len, k_len, bidirectional, max_distance, q_offset, scores, out, single=False):
    """posenc.t5_bias, its kernel on one thread if `single`: right after a BLAS
    product the kernel's second thread would contend with BLAS's threads,
    still spinning on the same cores, and run slower than one."""
    arr = np.asarray(table)
    v.float_array_dtype(arr, "table", bfloat16=True)
    if arr.ndim != 2:
        raise ValueError(f"table must be 2-dimensional (num_buckets, n_heads), not {arr.shape}")
    num_buckets, n_heads = arr.shape
    if num_buckets < 2 or n_heads < 1:
        raise ValueError(
            "table must have num_buckets >= 2 rows and at least one column (head), "
            f"not shape {arr.shape}"
        )
    bidirectional = v.flag(bidirectional, "bidirectional")
    num_buckets, max_distance = checked_options(bidirectional, num_buckets, max_distance)
    q_len, k_len = lengths(q_len, k_len)
    q_offset = offset(q_offset)
    shape = (n_heads, q_len, k_len)
    if scores is None and out is None:
        v.shape_size(shape, SIZES, arr.dtype.itemsize)
    tab = v.copy_if_shared(v.native_copy(arr, arr.dtype), scores if scores is not None else out)

    # the largest |distance|: the first key from the last query, or the last
    # key from the first
    largest = max(abs(q_offset + q_len - 1), abs(k_len - 1 - q_offset))
    thresholds = _t5.thresholds(bidirectional, num_buckets, max_distance, largest)

    bits = v.for_kernel(tab)

    def kernel(add):
        return lambda dst: _core.t5_bias(
            bits, v.for_kernel(dst), bidirectional, thresholds, q_offset, add, single
        )

    if scores is not None:
        if out is not None:
            raise ValueError("give scores (to add into) or out (to write), not both")
        target = scores_target(scores, shape, None)
        run_on_views(kernel(True), target, read=True, name="scores")
        return target
    return fill(kernel(False), shape, tab.dtype, out, SIZES)


def t5_bias_table_grad(grad, num_buckets, *, bidirectional=True, max_distance=128, q_offset=0):
    """The gradient of :func:`posenc.t5_bias` with respect to its table: its backward pass.

    Parameters
    ----------
    grad : array_like of shape (..., n_heads, q_len, k_len)
        The gradient of the loss with respect to t5_bias's result (or to the
        scores it was added into: leading axes are summed over); float16,
        bfloat16, float32 or float64.
    num_buckets : int
        Rows of the table (>= 2).
    bidirectional, max_distance, q_offset
        As given to :func:`posenc.t5_bias`.

    Returns
    -------
    ndarray of shape (num_buckets, n_heads)
        ``out[b, h]`` = the sum of ``grad[..., h, i, j]`` over the ``(i, j)``
        whose distance ``j - (q_offset + i)`` has bucket ``b`` (0 for a
        bucket no distance reaches).  float64 for float64 `grad`, float32
        for the others: float16 and bfloat16 too, whose own precision would
        lose the sums (cast to the table's dtype as needed).

    Raises
    ------
    TypeError, ValueError
        Naming the argument: `grad` not of shape (..., n_heads, q_len, k_len)
        or not floating, bucket options as for :func:`posenc.t5_bias`.

    Notes
    -----
    Summed in float64 for float64 `grad` and in float32 for the others:
    each head's ``q_len + k_len - 1`` diagonals (one per distance) are
    summed eight queries at a time, in the order of the leading axes and
    of the queries, and the diagonal sums into their buckets in the order
    of distance.  The order is fixed, so the result has the same bits for
    any thread count and SIMD path.  Each entry's error is at most
    ``(batch * q_len + q_len + k_len) * 2**-24`` (``2**-53`` in float64)
    times the sum of ``|grad|`` over its bucket.  One read of `grad`, no
    ``(q, k)`` index array.

    Examples
    --------
    >>> from posenc.bias import t5_bias_table_grad
    >>> grad = t5_bias_table_grad(np.ones((2, 2, 3)), 32)
    >>> grad.shape, grad.sum(axis=0).tolist()  # each head: its 2 * 3 entries
    ((32, 2), [6.0, 6.0])
    >>> grad[[0, 1, 17, 18], 0].tolist()  # the buckets of distances 0, -1, +1, +2
    [2.0, 1.0, 2.0, 1.0]
    """
    arr = grad if isinstance(grad, np.ndarray) else np.asarray(grad)
    dtype = v.float_array_dtype(arr, "grad", bfloat16=True)
    if arr.ndim < 3:
        raise ValueError(f"grad must have shape (..., n_heads, q_len, k_len), not {arr.shape}")
    n_heads, q_len, k_len = arr.shape[-3:]
    if min(n_heads, q_len, k_len) < 1:
        raise ValueError(f"grad must have at least one head, query and key, not shape {arr.shape}")
    bidirectional = v.flag(bidirectional, "bidirectional")
    num_buckets, max_distance = checked_options(bidirectional, num_buckets, max_distance)
    q_offset = offset(q_offset)
    largest = max(abs(q_offset + q_len - 1), abs(k_len - 1 - q_offset))
    thresholds = _t5.thresholds(bidirectional, num_buckets, max_distance, largest)
    out = np.empty((num_buckets, n_heads), np.float64 if dtype == np.float64 else np.float32)
    _core.t5_table_grad(
        v.for_kernel(_grad_rows(arr, dtype)), out, bidirectional, thresholds, q_offset
    )
    return out


def _grad_rows(arr, dtype):
    """`arr` (..., heads, q, k) as the 4-D (batch, heads, q, k) array the
    gradient kernel reads: a view where the leading axes merge and the
    layout suits the kernel (any outer strides, 0 included), else a copy."""
    if v.kernel_ready(arr):
        merged = v._merged_axes(arr.shape[:-3], arr.strides[:-3])
        if merged is not None:
            batch, stride = merged
            return np.lib.stride_tricks.as_strided(
                arr,
                shape=(batch,) + arr.shape[-3:],
                strides=(stride or 0,) + arr.strides[-3:],
                writeable=False,
            )
    return v.native_copy(arr, dtype).reshape((-1,) + arr.shape[-3:])
