"""Types of posenc.rope (the functions and their docs: rope.py)."""

from typing import Any, Literal, Optional, Sequence, Tuple, Union, overload

import numpy as np

from ._typing import Array, ArrayLike, ArrayT, DTypeLike, NDArray, RopeScaling, ScalarT

ApplyLayout = Literal["half", "interleaved", "interleaved_to_half"]
XposRole = Literal["query", "key"]

def rope_frequencies(
    dim: int,
    *,
    base: float = 10000.0,
    scaling: Optional[RopeScaling] = None,
    seq_len: Optional[int] = None,
    layer_type: Optional[str] = None,
    device: Any = None,
) -> Tuple[NDArray[np.float64], float]: ...
@overload
def rope_cos_sin(
    positions: np.ndarray,
    dim: int,
    *,
    base: float = 10000.0,
    scaling: Optional[RopeScaling] = None,
    layout: Literal["half", "interleaved"] = "half",
    dtype: DTypeLike = "float32",
    layer_type: Optional[str] = None,
    seq_len: Optional[int] = None,
    mrope_section: Optional[Sequence[int]] = None,
    mrope_interleaved: Optional[bool] = None,
    axial: Union[int, Sequence[int], None] = None,
    full: bool = True,
    xpos: Optional[XposRole] = None,
    xpos_scale_base: float = 512.0,
    xpos_centre: float = 0.0,
    device: Any = None,
) -> Tuple[NDArray[Any], NDArray[Any]]: ...
@overload
def rope_cos_sin(
    positions: ArrayT,
    dim: int,
    *,
    base: float = 10000.0,
    scaling: Optional[RopeScaling] = None,
    layout: Literal["half", "interleaved"] = "half",
    dtype: DTypeLike = "float32",
    layer_type: Optional[str] = None,
    seq_len: Optional[int] = None,
    mrope_section: Optional[Sequence[int]] = None,
    mrope_interleaved: Optional[bool] = None,
    axial: Union[int, Sequence[int], None] = None,
    full: bool = True,
    xpos: Optional[XposRole] = None,
    xpos_scale_base: float = 512.0,
    xpos_centre: float = 0.0,
    device: Any = None,
) -> Tuple[ArrayT, ArrayT]: ...
@overload
def rope_cos_sin(
    positions: ArrayLike,
    dim: int,
    *,
    base: float = 10000.0,
    scaling: Optional[RopeScaling] = None,
    layout: Literal["half", "interleaved"] = "half",
    dtype: DTypeLike = "float32",
    layer_type: Optional[str] = None,
    seq_len: Optional[int] = None,
    mrope_section: Optional[Sequence[int]] = None,
    mrope_interleaved: Optional[bool] = None,
    axial: Union[int, Sequence[int], None] = None,
    full: bool = True,
    xpos: Optional[XposRole] = None,
    xpos_scale_base: float = 512.0,
    xpos_centre: float = 0.0,
    device: Any = None,
) -> Tuple[NDArray[Any], NDArray[Any]]: ...
@overload
def apply_rope(
    x: NDArray[ScalarT],
    positions: Optional[ArrayLike] = None,
    *,
    base: float = 10000.0,
    scaling: Optional[RopeScaling] = None,
    layout: ApplyLayout = "half",
    rotary_dim: Optional[int] = None,
    offset: float = 0,
    seq_axis: Optional[int] = None,
    axes: Optional[str] = None,
    inverse: bool = False,
    out: Optional[Array] = None,
    layer_type: Optional[str] = None,
    mrope_section: Optional[Sequence[int]] = None,
    mrope_interleaved: Optional[bool] = None,
    axial: Union[int, Sequence[int], None] = None,
    xpos: Optional[XposRole] = None,
    xpos_scale_base: float = 512.0,
    xpos_centre: float = 0.0,
    device: Any = None,
) -> NDArray[ScalarT]: ...
@overload
def apply_rope(
    x: ArrayT,
    positions: Optional[ArrayLike] = None,
    *,
    base: float = 10000.0,
    scaling: Optional[RopeScaling] = None,
    layout: ApplyLayout = "half",
    rotary_dim: Optional[int] = None,
    offset: float = 0,
    seq_axis: Optional[int] = None,
    axes: Optional[str] = None,
    inverse: bool = False,
    out: Optional[ArrayT] = None,
    layer_type: Optional[str] = None,
    mrope_section: Optional[Sequence[int]] = None,
    mrope_interleaved: Optional[bool] = None,
    axial: Union[int, Sequence[int], None] = None,
    xpos: Optional[XposRole] = None,
    xpos_scale_base: float = 512.0,
    xpos_centre: float = 0.0,
    device: Any = None,
) -> ArrayT: ...
@overload
def apply_rope(
    x: ArrayLike,
    positions: Optional[ArrayLike] = None,
    *,
    base: float = 10000.0,
    scaling: Optional[RopeScaling] = None,
    layout: ApplyLayout = "half",
    rotary_dim: Optional[int] = None,
    offset: float = 0,
    seq_axis: Optional[int] = None,
    axes: Optional[str] = None,
    inverse: bool = False,
    out: Optional[Array] = None,
    layer_type: Optional[str] = None,
    mrope_section: Optional[Sequence[int]] = None,
    mrope_interleaved: Optional[bool] = None,
    axial: Union[int, Sequence[int], None] = None,
    xpos: Optional[XposRole] = None,
    xpos_scale_base: float = 512.0,
    xpos_centre: float = 0.0,
    device: Any = None,
) -> NDArray[Any]: ...
def _channel_plan(
    rotary: Any, base: Any, rope: Any, mrope_section: Any, mrope_interleaved: Any, axial: Any
) -> Any: ...
def _rotary_dim(dim: Any, rotary_dim: Any, base: Any, scaling: Any, layer_type: Any) -> Any: ...
def named_seq_axis(axes: Optional[str], seq_axis: Optional[int], ndim: int) -> int: ...
