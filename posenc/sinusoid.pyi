"""Types of posenc.sinusoid (the function and its documentation: sinusoid.py)."""

from typing import Any, Literal, Optional, TypedDict, overload

from typing_extensions import Unpack

from ._options_types import Out, OutInto
from ._typing import ArrayLike, DTypeLike, NDArray, TensorT

class _Options(TypedDict, total=False):
    base: float
    layout: Literal["interleaved", "concat"]
    dtype: Optional[DTypeLike]
    device: Any

class _Table(_Options, Out, total=False): ...
class _Into(_Options, OutInto[TensorT], total=False): ...

@overload
def sinusoid(positions: TensorT, dim: int, **options: Unpack[_Into[TensorT]]) -> TensorT: ...
@overload
def sinusoid(positions: ArrayLike, dim: int, **options: Unpack[_Table]) -> NDArray[Any]: ...
