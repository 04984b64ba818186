"""Types of posenc.positions (the functions and their docs: positions.py)."""

from typing import Any, Literal, Optional, Tuple, overload

import numpy as np

from ._typing import ArrayLike, ArrayT, NDArray

__all__ = ["mrope_position_ids", "positions_from_cu_seqlens", "vision_position_ids"]

@overload
def positions_from_cu_seqlens(
    cu_seqlens: np.ndarray, *, start: int = 0, device: Any = None
) -> NDArray[np.int64]: ...
@overload
def positions_from_cu_seqlens(
    cu_seqlens: ArrayT, *, start: int = 0, device: Any = None
) -> ArrayT: ...
@overload
def positions_from_cu_seqlens(
    cu_seqlens: ArrayLike, *, start: int = 0, device: Any = None
) -> NDArray[np.int64]: ...
@overload
def mrope_position_ids(
    token_types: np.ndarray,
    *,
    image_grids: Optional[ArrayLike] = None,
    video_grids: Optional[ArrayLike] = None,
    spatial_merge_size: int = 2,
    video_time_intervals: Optional[ArrayLike] = None,
    video_frames_apart: bool = False,
    attention_mask: Optional[ArrayLike] = None,
    device: Any = None,
) -> Tuple[NDArray[np.int64], NDArray[np.int64]]: ...
@overload
def mrope_position_ids(
    token_types: ArrayT,
    *,
    image_grids: Optional[ArrayLike] = None,
    video_grids: Optional[ArrayLike] = None,
    spatial_merge_size: int = 2,
    video_time_intervals: Optional[ArrayLike] = None,
    video_frames_apart: bool = False,
    attention_mask: Optional[ArrayLike] = None,
    device: Any = None,
) -> Tuple[ArrayT, ArrayT]: ...
@overload
def mrope_position_ids(
    token_types: ArrayLike,
    *,
    image_grids: Optional[ArrayLike] = None,
    video_grids: Optional[ArrayLike] = None,
    spatial_merge_size: int = 2,
    video_time_intervals: Optional[ArrayLike] = None,
    video_frames_apart: bool = False,
    attention_mask: Optional[ArrayLike] = None,
    device: Any = None,
) -> Tuple[NDArray[np.int64], NDArray[np.int64]]: ...
@overload
def vision_position_ids(
    grids: np.ndarray,
    *,
    spatial_merge_size: int = 1,
    convention: Literal["qwen2_vl", "llama4"] = "qwen2_vl",
    device: Any = None,
) -> NDArray[np.int64]: ...
@overload
def vision_position_ids(
    grids: ArrayT,
    *,
    spatial_merge_size: int = 1,
    convention: Literal["qwen2_vl", "llama4"] = "qwen2_vl",
    device: Any = None,
) -> ArrayT: ...
@overload
def vision_position_ids(
    grids: ArrayLike,
    *,
    spatial_merge_size: int = 1,
    convention: Literal["qwen2_vl", "llama4"] = "qwen2_vl",
    device: Any = None,
) -> NDArray[np.int64]: ...
