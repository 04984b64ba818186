"""Types of posenc.functional_bias (the functions and their documentation:
functional_bias.py).

Each bias is added into ``scores=``, written into ``out=`` or made anew; the
options those overloads share are posenc/_options_types.pyi's.
"""

from typing import Optional, TypedDict, overload

from typing_extensions import Required, Unpack

from ._options_types import AddInto, BiasT, WriteInto
from ._typing import ArrayLike, ArrayT

__all__ = ["fire_bias", "kerple_bias", "sandwich_bias"]

class _Kerple(TypedDict, total=False):
    kind: str

class _KerpleAdd(_Kerple, AddInto[ArrayT], total=False): ...
class _KerpleWrite(_Kerple, WriteInto[BiasT], total=False): ...

class _Sandwich(TypedDict, total=False):
    dim: Required[int]

class _SandwichAdd(_Sandwich, AddInto[ArrayT], total=False): ...
class _SandwichWrite(_Sandwich, WriteInto[BiasT], total=False): ...

class _Fire(TypedDict, total=False):
    eps: float

class _FireAdd(_Fire, AddInto[ArrayT], total=False): ...
class _FireWrite(_Fire, WriteInto[BiasT], total=False): ...

# Each bias is added into scores= (the first overload, the type of scores=)
# or written into out= (the second, the type of out=, a new NDArray without
# it); the parameters packed typeshed-style (ruff format would give each its
# own line).
# fmt: off
@overload
def kerple_bias(
    r1: ArrayLike, r2: ArrayLike, q_len: int, k_len: Optional[int] = None,
    **options: Unpack[_KerpleAdd[ArrayT]],
) -> ArrayT: ...
@overload
def kerple_bias(
    r1: ArrayLike, r2: ArrayLike, q_len: int, k_len: Optional[int] = None,
    **options: Unpack[_KerpleWrite[BiasT]],
) -> BiasT: ...

@overload
def sandwich_bias(
    n_heads: int, q_len: int, k_len: Optional[int] = None, **options: Unpack[_SandwichAdd[ArrayT]]
) -> ArrayT: ...
@overload
def sandwich_bias(
    n_heads: int, q_len: int, k_len: Optional[int] = None, **options: Unpack[_SandwichWrite[BiasT]]
) -> BiasT: ...

@overload
def fire_bias(
    w1: ArrayLike, b1: ArrayLike, w2: ArrayLike, b2: ArrayLike, c: float, threshold: float,
    q_len: int, k_len: Optional[int] = None, **options: Unpack[_FireAdd[ArrayT]],
) -> ArrayT: ...
@overload
def fire_bias(
    w1: ArrayLike, b1: ArrayLike, w2: ArrayLike, b2: ArrayLike, c: float, threshold: float,
    q_len: int, k_len: Optional[int] = None, **options: Unpack[_FireWrite[BiasT]],
) -> BiasT: ...
# fmt: on
