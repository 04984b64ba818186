"""Types of posenc.sinusoid (the function and its documentation: sinusoid.py)."""

from typing import Any, Literal, Optional, TypedDict, overload

import numpy as np
from typing_extensions import Unpack

from ._options_types import Out, OutInto
from ._typing import ArrayLike, ArrayT, DTypeLike, NDArray

class _Options(TypedDict, total=False):
    base: float
    layout: Literal["interleaved", "concat"]
    dtype: Optional[DTypeLike]
    device: Any

class _Table(_Options, Out, total=False): ...
class _Into(_Options, OutInto[ArrayT], total=False): ...

@overload
def sinusoid(positions: np.ndarray, dim: int, **options: Unpack[_Table]) -> NDArray[Any]: ...
@overload
def sinusoid(positions: ArrayT, dim: int, **options: Unpack[_Into[ArrayT]]) -> ArrayT: ...
@overload
def sinusoid(positions: ArrayLike, dim: int, **options: Unpack[_Table]) -> NDArray[Any]: ...
