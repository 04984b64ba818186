# Types of posenc.relative for type checkers (mypy reads this stub instead of
# relative.py): the public functions with their overloads (a NumPy array, a
# list or a scalar in gives an NDArray; a torch tensor or a JAX array in gives
# its own type).

from typing import Any, overload

import numpy as np

from ._typing import Array, ArrayLike, DTypeLike, NDArray, TensorT

# The public functions, one block each, their overloads typeshed-style: the
# parameters packed on a few lines (ruff format would give each its own line).
# fmt: off
def xl_relative_table(
    q_len: int, k_len: int | None = None, dim: int | None = None, *, attn_type: str = "bi",
    bi_data: bool = False, clamp_len: int | None = None, base: float = 10000.0,
    dtype: DTypeLike | None = None,
    device: Any = None,
) -> NDArray[Any]: ...

@overload
def xl_position_term(
    q: TensorT, r: ArrayLike, *, bias: ArrayLike | None = None, k_len: int | None = None,
    q_offset: int | None = None, causal: bool = False, scores: Array | None = None,
    device: Any = None,
) -> TensorT: ...
@overload
def xl_position_term(
    q: ArrayLike, r: ArrayLike, *, bias: ArrayLike | None = None, k_len: int | None = None,
    q_offset: int | None = None, causal: bool = False, scores: Array | None = None,
    device: Any = None,
) -> NDArray[Any]: ...

@overload
def xl_content_bias(
    k: TensorT, bias: ArrayLike, *, scores: Array | None = None,
    device: Any = None,
) -> TensorT: ...
@overload
def xl_content_bias(
    k: ArrayLike, bias: ArrayLike, *, scores: Array | None = None,
    device: Any = None,
) -> NDArray[Any]: ...

def tener_relative_table(
    length: int, dim: int, *, base: float = 10000.0, dtype: DTypeLike | None = None,
    device: Any = None,
) -> NDArray[Any]: ...

@overload
def tener_position_term(
    q: TensorT, k: ArrayLike, table: ArrayLike, *, v: ArrayLike | None = None,
    key_term: bool = True, scores: Array | None = None,
    device: Any = None,
) -> TensorT: ...
@overload
def tener_position_term(
    q: ArrayLike, k: ArrayLike, table: ArrayLike, *, v: ArrayLike | None = None,
    key_term: bool = True, scores: Array | None = None,
    device: Any = None,
) -> NDArray[Any]: ...

@overload
def tener_scores(
    q: TensorT, k: ArrayLike, table: ArrayLike, *, u: ArrayLike | None = None,
    v: ArrayLike | None = None, scale: bool = False, key_term: bool = True,
    device: Any = None,
) -> TensorT: ...
@overload
def tener_scores(
    q: ArrayLike, k: ArrayLike, table: ArrayLike, *, u: ArrayLike | None = None,
    v: ArrayLike | None = None, scale: bool = False, key_term: bool = True,
    device: Any = None,
) -> NDArray[Any]: ...

@overload
def deberta_log_bucket(
    relative_pos: TensorT, bucket_size: int, max_position: int, *, precision: str = "float32",
    device: Any = None,
) -> TensorT: ...
@overload
def deberta_log_bucket(
    relative_pos: ArrayLike, bucket_size: int, max_position: int, *, precision: str = "float32",
    device: Any = None,
) -> NDArray[np.int64]: ...

def deberta_relative_positions(
    q_len: int, k_len: int | None = None, *, bucket_size: int = -1, max_position: int = -1,
    q_offset: int = 0, precision: str = "float32",
    device: Any = None,
) -> NDArray[np.int64]: ...

@overload
def deberta_attention_bias(
    q: TensorT, k: ArrayLike, pos_key: ArrayLike | None = None, pos_query: ArrayLike | None = None,
    *, position_buckets: int = -1, max_relative_positions: int = 512, q_offset: int = 0,
    scale_factor: float | None = None, precision: str = "float32", scores: Array | None = None,
    device: Any = None,
) -> TensorT: ...
@overload
def deberta_attention_bias(
    q: ArrayLike, k: ArrayLike, pos_key: ArrayLike | None = None,
    pos_query: ArrayLike | None = None, *, position_buckets: int = -1,
    max_relative_positions: int = 512, q_offset: int = 0, scale_factor: float | None = None,
    precision: str = "float32", scores: Array | None = None,
    device: Any = None,
) -> NDArray[Any]: ...

@overload
def shaw_key_term(
    q: TensorT, rel_keys: ArrayLike, *, max_distance: int, k_len: int | None = None,
    q_offset: int | None = None, scores: Array | None = None,
    device: Any = None,
) -> TensorT: ...
@overload
def shaw_key_term(
    q: ArrayLike, rel_keys: ArrayLike, *, max_distance: int, k_len: int | None = None,
    q_offset: int | None = None, scores: Array | None = None,
    device: Any = None,
) -> NDArray[Any]: ...

@overload
def shaw_value_term(
    weights: TensorT, rel_values: ArrayLike, *, max_distance: int, q_offset: int | None = None,
    device: Any = None,
) -> TensorT: ...
@overload
def shaw_value_term(
    weights: ArrayLike, rel_values: ArrayLike, *, max_distance: int, q_offset: int | None = None,
    device: Any = None,
) -> NDArray[Any]: ...

@overload
def tupe_bias(
    pos_q: TensorT, pos_k: ArrayLike, *, rel_table: ArrayLike | None = None,
    max_distance: int = 128, untie_cls: bool = True, scores: Array | None = None,
    device: Any = None,
) -> TensorT: ...
@overload
def tupe_bias(
    pos_q: ArrayLike, pos_k: ArrayLike, *, rel_table: ArrayLike | None = None,
    max_distance: int = 128, untie_cls: bool = True, scores: Array | None = None,
    device: Any = None,
) -> NDArray[Any]: ...
