"""Types of posenc.sinusoid (the function and its documentation: sinusoid.py)."""

from typing import Any, Literal, Optional, TypedDict, overload

import numpy as np
from typing_extensions import Unpack

from ._typing import Array, ArrayLike, ArrayT, DTypeLike, NDArray

class _Options(TypedDict, total=False):
    base: float
    layout: Literal["interleaved", "concat"]
    dtype: Optional[DTypeLike]
    device: Any

@overload
def sinusoid(
    positions: np.ndarray, dim: int, *, out: Optional[Array] = None, **options: Unpack[_Options]
) -> NDArray[Any]: ...
@overload
def sinusoid(
    positions: ArrayT, dim: int, *, out: Optional[ArrayT] = None, **options: Unpack[_Options]
) -> ArrayT: ...
@overload
def sinusoid(
    positions: ArrayLike, dim: int, *, out: Optional[Array] = None, **options: Unpack[_Options]
) -> NDArray[Any]: ...
