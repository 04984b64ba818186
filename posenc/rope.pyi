"""Types of posenc.rope (the functions and their documentation: rope.py).

The keyword options several signatures share are declared once, as the
TypedDicts below (``**options: Unpack[...]`` reads as those keywords).
"""

from typing import Any, Literal, Optional, Sequence, Tuple, TypedDict, Union, overload

import numpy as np
from typing_extensions import Unpack

from ._options_types import Out, OutInto
from ._typing import ArrayLike, ArrayT, DTypeLike, NDArray, RopeScaling, ScalarT, TensorT

ApplyLayout = Literal["half", "interleaved", "interleaved_to_half"]
XposRole = Literal["query", "key"]

class _Config(TypedDict, total=False):
    base: float
    scaling: Optional[RopeScaling]
    layer_type: Optional[str]
    device: Any

class _Rows(_Config, total=False):
    mrope_section: Optional[Sequence[int]]
    mrope_interleaved: Optional[bool]
    axial: Union[int, Sequence[int], None]
    xpos: Optional[XposRole]
    xpos_scale_base: float
    xpos_centre: float

class _TableOptions(_Rows, total=False):
    seq_len: Optional[int]
    layout: Literal["half", "interleaved"]
    dtype: DTypeLike
    full: bool

class _ApplyOptions(_Rows, total=False):
    layout: ApplyLayout
    rotary_dim: Optional[int]
    offset: float
    seq_axis: Optional[int]
    axes: Optional[str]
    inverse: bool

class _Apply(_ApplyOptions, Out, total=False): ...
class _ApplyInto(_ApplyOptions, OutInto[ArrayT], total=False): ...

_Tables = Tuple[NDArray[Any], NDArray[Any]]

def rope_frequencies(
    dim: int, *, seq_len: Optional[int] = None, **options: Unpack[_Config]
) -> Tuple[NDArray[np.float64], float]: ...
@overload
def rope_cos_sin(
    positions: TensorT, dim: int, **options: Unpack[_TableOptions]
) -> Tuple[TensorT, TensorT]: ...
@overload
def rope_cos_sin(positions: ArrayLike, dim: int, **options: Unpack[_TableOptions]) -> _Tables: ...
@overload
def apply_rope(
    x: NDArray[ScalarT], positions: Optional[ArrayLike] = None, **options: Unpack[_Apply]
) -> NDArray[ScalarT]: ...
@overload
def apply_rope(
    x: ArrayT, positions: Optional[ArrayLike] = None, **options: Unpack[_ApplyInto[ArrayT]]
) -> ArrayT: ...
@overload
def apply_rope(
    x: ArrayLike, positions: Optional[ArrayLike] = None, **options: Unpack[_Apply]
) -> NDArray[Any]: ...
