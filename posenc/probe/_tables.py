"""A position table read and checked, and the reductions the probes share.

:func:`_table` reads a table as aligned, C-contiguous float64, finite, of
the rows a probe needs (a torch tensor or a bfloat16 array included, by
:func:`_to_numpy`), refusing more rows than an ``n x n`` matrix can take
(:func:`_check_rows`, :class:`_TooManyPositions`) before anything of that
size is made; :func:`_plain` gives a result's figures as plain values, and
:func:`_diagonal_means` the mean of each diagonal of a square matrix.
The names keep the underscore they had in posenc.probe.analyses and
posenc.probe.properties.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from .._dtypes import is_bfloat16, widen
from .._typing import NDArray


def _to_numpy(value: Any) -> np.ndarray:
    """`value` as a NumPy array; torch tensors (with grad) included, and
    bfloat16 (torch's, ml_dtypes' and JAX's) as float32, which holds it
    exactly."""
    if type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach"):
        tensor = value.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":
            tensor = tensor.float()  # NumPy has no bfloat16
        return tensor.numpy()
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    return widen(arr) if is_bfloat16(arr.dtype) else arr


class _TooManyPositions(ValueError):
    """A table taller than :data:`MAX_POSITIONS` where an n x n matrix is built."""


def _check_rows(n: int, name: str, max_rows: Optional[int]) -> None:
    """Refuse `n` rows above `max_rows` (None: no bound), before any n x n work."""
    if max_rows is not None and n > max_rows:
        gib = n * n * 8 / 2**30
        raise _TooManyPositions(
            f"{name} has {n} rows (positions), more than {max_rows}, the most that "
            f"cosine_similarity and report take (the {n} x {n} cosine map alone would be "
            f"{gib:.1f} GiB): probe at most {max_rows} rows, e.g. the slice E[:{max_rows}] "
            "or every k-th row E[::k]"
        )


def _table(
    E: Any, name: str = "E", *, min_rows: int = 2, max_rows: Optional[int] = None
) -> NDArray[np.float64]:
    """A finite 2-D real table as aligned, C-contiguous float64 (copied when
    it is not one already: unaligned or strided inputs are copied, not refused)."""
    try:
        arr = _to_numpy(E)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"{name} must be a 2-D array of real numbers: {exc}") from exc
    if arr.dtype.kind not in "iuf":
        hint = ""
        if arr.dtype.kind == "V" and arr.dtype.itemsize == 2 and arr.dtype.names is None:
            hint = (
                " (numpy.save writes a bfloat16 array as 2-byte voids, which say nothing of "
                "their type: save E.astype(numpy.float32), which holds it exactly)"
            )
        raise TypeError(f"{name} must hold real numbers, not dtype {arr.dtype}{hint}")
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (n_positions, dim) array, got shape {arr.shape}")
    if arr.shape[0] < min_rows:
        raise ValueError(
            f"{name} must have at least {min_rows} rows (positions), got {arr.shape[0]}"
        )
    _check_rows(arr.shape[0], name, max_rows)
    if arr.shape[1] < 1:
        raise ValueError(f"{name} must have at least one column, got shape {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    if not arr.flags.aligned:  # ascontiguousarray keeps an unaligned float64 buffer
        arr = arr.copy()
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite (found nan or inf)")
    return arr


def _plain(result: Any, names: Tuple[str, ...]) -> Dict[str, Any]:
    """The attributes `names` of `result` as plain Python values (arrays as
    lists): what the results' ``to_dict`` return."""
    values = {name: getattr(result, name) for name in names}
    return {k: x.tolist() if isinstance(x, np.ndarray) else x for k, x in values.items()}


def _diagonal_means(m: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The offsets ``j - i`` of the square `m`, ``-(n-1) .. n-1``, and the
    mean of each diagonal."""
    n = m.shape[0]
    offsets = np.arange(-(n - 1), n)
    return offsets, np.array([np.diagonal(m, k).mean() for k in offsets])
