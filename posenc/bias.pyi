"""Types of posenc.bias (the functions and their documentation: bias.py).

The keyword options several signatures share are declared once, as the
TypedDicts below (``**options: Unpack[...]`` reads as those keywords).
"""

from typing import Any, Optional, TypedDict, overload

import numpy as np
from typing_extensions import Unpack

from ._options_types import AddInto, BiasT, Out, OutInto, WriteInto
from ._typing import Array, ArrayLike, ArrayT, DTypeLike, NDArray, TensorT

class _SlopeOptions(TypedDict, total=False):
    slopes: Optional[ArrayLike]
    max_bias: float

class _Slopes(_SlopeOptions, total=False):
    dtype: Optional[DTypeLike]
    device: Any

class _AlibiAdd(_SlopeOptions, AddInto[ArrayT], total=False): ...
class _AlibiWrite(_SlopeOptions, WriteInto[BiasT], total=False): ...

class _Buckets(TypedDict, total=False):
    bidirectional: bool
    max_distance: int

class _BucketOptions(_Buckets, total=False):
    num_buckets: int
    device: Any

class _GradOptions(_Buckets, total=False):
    q_offset: int

class _T5Options(_GradOptions, total=False):
    scores: Optional[Array]
    device: Any

class _T5(_T5Options, Out, total=False): ...
class _T5Into(_T5Options, OutInto[ArrayT], total=False): ...

class _Clip(TypedDict, total=False):
    max_distance: Optional[int]
    q_offset: int
    device: Any

def alibi_slopes(
    n_heads: int, *, max_bias: float = 8.0, device: Any = None
) -> NDArray[np.float64]: ...
@overload
def alibi_bias(
    n_heads: int, q_len: int, k_len: Optional[int] = None, **options: Unpack[_AlibiAdd[ArrayT]]
) -> ArrayT: ...
@overload
def alibi_bias(
    n_heads: int, q_len: int, k_len: Optional[int] = None, **options: Unpack[_AlibiWrite[BiasT]]
) -> BiasT: ...
def alibi_key_bias(
    attention_mask: ArrayLike, n_heads: int, **options: Unpack[_Slopes]
) -> NDArray[Any]: ...
@overload
def relative_position_bucket(
    relative_position: TensorT, **options: Unpack[_BucketOptions]
) -> TensorT: ...
@overload
def relative_position_bucket(
    relative_position: ArrayLike, **options: Unpack[_BucketOptions]
) -> NDArray[np.int64]: ...
@overload
def t5_bias(
    table: ArrayT, q_len: int, k_len: Optional[int] = None, **options: Unpack[_T5Into[ArrayT]]
) -> ArrayT: ...
@overload
def t5_bias(
    table: ArrayLike, q_len: int, k_len: Optional[int] = None, **options: Unpack[_T5]
) -> NDArray[Any]: ...
def t5_bias_table_grad(
    grad: ArrayLike, num_buckets: int, **options: Unpack[_GradOptions]
) -> NDArray[Any]: ...
def relative_positions(
    q_len: int, k_len: Optional[int] = None, **options: Unpack[_Clip]
) -> NDArray[np.int64]: ...
