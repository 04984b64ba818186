"""Types of posenc.positions (the functions and their documentation: positions.py)."""

from typing import Any, Literal, Optional, Tuple, TypedDict, overload

import numpy as np
from typing_extensions import Unpack

from ._typing import ArrayLike, NDArray, TensorT

__all__ = ["mrope_position_ids", "positions_from_cu_seqlens", "vision_position_ids"]

class _Start(TypedDict, total=False):
    start: int
    device: Any

class _Prompt(TypedDict, total=False):
    image_grids: Optional[ArrayLike]
    video_grids: Optional[ArrayLike]
    spatial_merge_size: int
    video_time_intervals: Optional[ArrayLike]
    video_frames_apart: bool
    attention_mask: Optional[ArrayLike]
    device: Any

class _Vision(TypedDict, total=False):
    spatial_merge_size: int
    convention: Literal["qwen2_vl", "llama4"]
    device: Any

_Ids = NDArray[np.int64]

@overload
def positions_from_cu_seqlens(cu_seqlens: TensorT, **options: Unpack[_Start]) -> TensorT: ...
@overload
def positions_from_cu_seqlens(cu_seqlens: ArrayLike, **options: Unpack[_Start]) -> _Ids: ...
@overload
def mrope_position_ids(
    token_types: TensorT, **options: Unpack[_Prompt]
) -> Tuple[TensorT, TensorT]: ...
@overload
def mrope_position_ids(token_types: ArrayLike, **options: Unpack[_Prompt]) -> Tuple[_Ids, _Ids]: ...
@overload
def vision_position_ids(grids: TensorT, **options: Unpack[_Vision]) -> TensorT: ...
@overload
def vision_position_ids(grids: ArrayLike, **options: Unpack[_Vision]) -> _Ids: ...

# sampled for length generalisation (posenc._samplers)
__all__ += ["pose_position_ids", "randomized_position_ids"]

_Seed = Optional[int | np.random.SeedSequence | np.random.Generator]

def randomized_position_ids(
    n: int, max_len: int, *, batch: Optional[int] = None, seed: _Seed = None
) -> _Ids: ...
def pose_position_ids(
    n: int, target_len: int, *, batch: Optional[int] = None, seed: _Seed = None
) -> _Ids: ...
