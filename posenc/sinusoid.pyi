"""Types of posenc.sinusoid (the function and its docs: sinusoid.py)."""

from typing import Any, Literal, Optional, overload

import numpy as np

from ._typing import Array, ArrayLike, ArrayT, DTypeLike, NDArray

@overload
def sinusoid(
    positions: np.ndarray,
    dim: int,
    *,
    base: float = 10000.0,
    layout: Literal["interleaved", "concat"] = "interleaved",
    dtype: Optional[DTypeLike] = None,
    out: Optional[Array] = None,
    device: Any = None,
) -> NDArray[Any]: ...
@overload
def sinusoid(
    positions: ArrayT,
    dim: int,
    *,
    base: float = 10000.0,
    layout: Literal["interleaved", "concat"] = "interleaved",
    dtype: Optional[DTypeLike] = None,
    out: Optional[ArrayT] = None,
    device: Any = None,
) -> ArrayT: ...
@overload
def sinusoid(
    positions: ArrayLike,
    dim: int,
    *,
    base: float = 10000.0,
    layout: Literal["interleaved", "concat"] = "interleaved",
    dtype: Optional[DTypeLike] = None,
    out: Optional[Array] = None,
    device: Any = None,
) -> NDArray[Any]: ...
