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

class _Step(TypedDict, total=False):
    offset: float
    seq_axis: Optional[int]
    axes: Optional[str]
    inverse: bool
    device: Any

class _StepOut(_Step, Out, total=False): ...
class _StepInto(_Step, OutInto[ArrayT], total=False): ...

class _TableStep(TypedDict, total=False):
    dtype: DTypeLike
    full: bool
    seq_len: Optional[int]
    device: Any

class Rope:
    head_dim: int
    rotary_dim: int
    base: float
    layout: str
    def __init__(
        self,
        head_dim: int,
        *,
        base: float = 10000.0,
        scaling: Optional[RopeScaling] = None,
        layout: ApplyLayout = "half",
        rotary_dim: Optional[int] = None,
        layer_type: Optional[str] = None,
        mrope_section: Optional[Sequence[int]] = None,
        mrope_interleaved: Optional[bool] = None,
        axial: Union[int, Sequence[int], None] = None,
        xpos: Optional[XposRole] = None,
        xpos_scale_base: float = 512.0,
        xpos_centre: float = 0.0,
    ) -> None: ...
    @property
    def family(self) -> str: ...
    def frequencies(self, seq_len: Optional[int] = None) -> Tuple[NDArray[np.float64], float]: ...
    @overload
    def apply(
        self, x: NDArray[ScalarT], positions: Optional[ArrayLike] = None, **step: Unpack[_StepOut]
    ) -> NDArray[ScalarT]: ...
    @overload
    def apply(
        self, x: ArrayT, positions: Optional[ArrayLike] = None, **step: Unpack[_StepInto[ArrayT]]
    ) -> ArrayT: ...
    @overload
    def apply(
        self, x: ArrayLike, positions: Optional[ArrayLike] = None, **step: Unpack[_StepOut]
    ) -> NDArray[Any]: ...
    @overload
    def cos_sin(
        self, positions: TensorT, **step: Unpack[_TableStep]
    ) -> Tuple[TensorT, TensorT]: ...
    @overload
    def cos_sin(self, positions: ArrayLike, **step: Unpack[_TableStep]) -> _Tables: ...
