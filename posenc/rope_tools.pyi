"""Types of posenc.rope_tools (the functions and their docs: rope_tools.py)."""

from typing import Any, Literal, overload

import numpy as np

from ._typing import ArrayLike, ArrayT, NDArray, ScalarT
from .positions import mrope_position_ids as mrope_position_ids
from .positions import positions_from_cu_seqlens as positions_from_cu_seqlens
from .positions import vision_position_ids as vision_position_ids

__all__ = [
    "attention_temperature",
    "mrope_position_ids",
    "permute_rope_weight",
    "positions_from_cu_seqlens",
    "vision_position_ids",
]

@overload
def permute_rope_weight(
    weight: NDArray[ScalarT],
    n_heads: int,
    *,
    to: Literal["half", "interleaved"] = "half",
    device: Any = None,
) -> NDArray[ScalarT]: ...
@overload
def permute_rope_weight(
    weight: ArrayT, n_heads: int, *, to: Literal["half", "interleaved"] = "half", device: Any = None
) -> ArrayT: ...
@overload
def permute_rope_weight(
    weight: ArrayLike,
    n_heads: int,
    *,
    to: Literal["half", "interleaved"] = "half",
    device: Any = None,
) -> NDArray[Any]: ...
@overload
def attention_temperature(
    positions: np.ndarray, *, floor_scale: float = 8192, attn_scale: float = 0.1, device: Any = None
) -> NDArray[np.float64]: ...
@overload
def attention_temperature(
    positions: ArrayT, *, floor_scale: float = 8192, attn_scale: float = 0.1, device: Any = None
) -> ArrayT: ...
@overload
def attention_temperature(
    positions: ArrayLike, *, floor_scale: float = 8192, attn_scale: float = 0.1, device: Any = None
) -> NDArray[np.float64]: ...
