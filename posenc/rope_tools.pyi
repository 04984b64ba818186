"""Types of posenc.rope_tools (the functions and their documentation: rope_tools.py)."""

from typing import Any, Literal, TypedDict, overload

import numpy as np
from typing_extensions import Unpack

from ._typing import ArrayLike, ArrayT, NDArray, TensorT
from .positions import mrope_position_ids as mrope_position_ids
from .positions import positions_from_cu_seqlens as positions_from_cu_seqlens
from .positions import vision_position_ids as vision_position_ids

class _To(TypedDict, total=False):
    to: Literal["half", "interleaved"]
    device: Any

class _Temperature(TypedDict, total=False):
    floor_scale: float
    attn_scale: float
    device: Any

@overload
def permute_rope_weight(weight: ArrayT, n_heads: int, **options: Unpack[_To]) -> ArrayT: ...
@overload
def permute_rope_weight(
    weight: ArrayLike, n_heads: int, **options: Unpack[_To]
) -> NDArray[Any]: ...
@overload
def attention_temperature(positions: TensorT, **options: Unpack[_Temperature]) -> TensorT: ...
@overload
def attention_temperature(
    positions: ArrayLike, **options: Unpack[_Temperature]
) -> NDArray[np.float64]: ...
