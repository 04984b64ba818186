"""Types of posenc.sinusoid (the function and its documentation: sinusoid.py)."""

from typing import Any, Generic, Literal, Optional, TypedDict, overload

import numpy as np
from typing_extensions import Unpack

from ._typing import Array, ArrayLike, ArrayT, DTypeLike, NDArray

class _Options(TypedDict, total=False):
    base: float
    layout: Literal["interleaved", "concat"]
    dtype: Optional[DTypeLike]
    device: Any

class _Table(_Options, total=False):
    out: Optional[Array]

class _Into(_Options, Generic[ArrayT], total=False):
    out: Optional[ArrayT]

@overload
def sinusoid(positions: np.ndarray, dim: int, **options: Unpack[_Table]) -> NDArray[Any]: ...
@overload
def sinusoid(positions: ArrayT, dim: int, **options: Unpack[_Into[ArrayT]]) -> ArrayT: ...
@overload
def sinusoid(positions: ArrayLike, dim: int, **options: Unpack[_Table]) -> NDArray[Any]: ...
