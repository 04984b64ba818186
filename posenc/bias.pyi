"""Types of posenc.bias (the functions and their docs: bias.py)."""

from typing import Any, Optional, overload

import numpy as np

from ._typing import Array, ArrayLike, ArrayT, DTypeLike, NDArray, ScalarT

def _check_t5(bidirectional: Any, num_buckets: Any, max_distance: Any) -> Any: ...
def alibi_slopes(
    n_heads: int, *, max_bias: float = 8.0, device: Any = None
) -> NDArray[np.float64]: ...
@overload
def alibi_bias(
    n_heads: int,
    q_len: int,
    k_len: Optional[int] = None,
    *,
    slopes: Optional[ArrayLike] = None,
    max_bias: float = 8.0,
    causal: bool = True,
    q_offset: Optional[int] = None,
    dtype: Optional[DTypeLike] = None,
    scores: ArrayT,
    out: None = None,
    device: Any = None,
) -> ArrayT: ...
@overload
def alibi_bias(
    n_heads: int,
    q_len: int,
    k_len: Optional[int] = None,
    *,
    slopes: Optional[ArrayLike] = None,
    max_bias: float = 8.0,
    causal: bool = True,
    q_offset: Optional[int] = None,
    dtype: Optional[DTypeLike] = None,
    scores: None = None,
    out: ArrayT,
    device: Any = None,
) -> ArrayT: ...
@overload
def alibi_bias(
    n_heads: int,
    q_len: int,
    k_len: Optional[int] = None,
    *,
    slopes: Optional[ArrayLike] = None,
    max_bias: float = 8.0,
    causal: bool = True,
    q_offset: Optional[int] = None,
    dtype: Optional[DTypeLike] = None,
    scores: None = None,
    out: None = None,
    device: Any = None,
) -> NDArray[Any]: ...
def alibi_key_bias(
    attention_mask: ArrayLike,
    n_heads: int,
    *,
    slopes: Optional[ArrayLike] = None,
    max_bias: float = 8.0,
    dtype: Optional[DTypeLike] = None,
    device: Any = None,
) -> NDArray[Any]: ...
@overload
def relative_position_bucket(
    relative_position: np.ndarray,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
    device: Any = None,
) -> NDArray[np.int64]: ...
@overload
def relative_position_bucket(
    relative_position: ArrayT,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
    device: Any = None,
) -> ArrayT: ...
@overload
def relative_position_bucket(
    relative_position: ArrayLike,
    *,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
    device: Any = None,
) -> NDArray[np.int64]: ...
@overload
def t5_bias(
    table: NDArray[ScalarT],
    q_len: int,
    k_len: Optional[int] = None,
    *,
    bidirectional: bool = True,
    max_distance: int = 128,
    q_offset: int = 0,
    scores: Optional[Array] = None,
    out: Optional[Array] = None,
    device: Any = None,
) -> NDArray[ScalarT]: ...
@overload
def t5_bias(
    table: ArrayT,
    q_len: int,
    k_len: Optional[int] = None,
    *,
    bidirectional: bool = True,
    max_distance: int = 128,
    q_offset: int = 0,
    scores: Optional[Array] = None,
    out: Optional[ArrayT] = None,
    device: Any = None,
) -> ArrayT: ...
@overload
def t5_bias(
    table: ArrayLike,
    q_len: int,
    k_len: Optional[int] = None,
    *,
    bidirectional: bool = True,
    max_distance: int = 128,
    q_offset: int = 0,
    scores: Optional[Array] = None,
    out: Optional[Array] = None,
    device: Any = None,
) -> NDArray[Any]: ...
def _t5_bias(
    table: Any,
    q_len: Any,
    k_len: Any,
    bidirectional: Any,
    max_distance: Any,
    q_offset: Any,
    scores: Any,
    out: Any,
    single: Any = False,
) -> Any: ...
def t5_bias_table_grad(
    grad: ArrayLike,
    num_buckets: int,
    *,
    bidirectional: bool = True,
    max_distance: int = 128,
    q_offset: int = 0,
) -> NDArray[Any]: ...
def relative_positions(
    q_len: int,
    k_len: Optional[int] = None,
    *,
    max_distance: Optional[int] = None,
    q_offset: int = 0,
    device: Any = None,
) -> NDArray[np.int64]: ...
