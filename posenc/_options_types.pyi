"""Keyword options that the stubs of several modules share (bias.pyi,
functional_bias.pyi, rope.pyi, sinusoid.pyi), declared once.

A stub reads them as ``**options: Unpack[...]``, alone or as a base of its
own TypedDict.  Types only: there is no module of this name at run time.
"""

from typing import Any, Generic, Optional, TypedDict

from typing_extensions import Required, TypeVar

from ._typing import Array, ArrayT, DTypeLike, NDArray

#: A bias's result when it is not added into ``scores=``: the type of
#: ``out=``, or (no ``out=``, so nothing to infer it from) a new NumPy array.
BiasT = TypeVar("BiasT", bound=Array, default=NDArray[Any])

class Out(TypedDict, total=False):
    """``out=``: where to write the result, of any array type."""

    out: Optional[Array]

#: The type of ``out=`` where the result follows an argument (bounded by the
#: function's own type variable: ``ArrayT`` or ``TensorT``).
_OutT = TypeVar("_OutT")

class OutInto(TypedDict, Generic[_OutT], total=False):
    """``out=`` of the type the result follows."""

    out: Optional[_OutT]

class _BiasOptions(TypedDict, total=False):
    causal: bool
    q_offset: Optional[int]
    dtype: Optional[DTypeLike]
    device: Any

class AddInto(_BiasOptions, Generic[ArrayT], total=False):
    """A bias's options when it is added into ``scores=`` (returned)."""

    scores: Required[ArrayT]
    out: None

class WriteInto(_BiasOptions, Generic[BiasT], total=False):
    """A bias's options when it is written into ``out=`` (returned), or,
    without ``out=``, made as a new NumPy array."""

    scores: None
    out: Optional[BiasT]
