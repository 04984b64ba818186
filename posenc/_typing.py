"""The types in posenc's signatures.

posenc takes anything ``np.asarray`` takes, and torch tensors and JAX arrays
as they are; it imports neither torch nor JAX, here or anywhere, so their
types are described by structure:

- :data:`ArrayLike` (NumPy's): what an argument may be.  A torch tensor and
  a JAX array are array-likes already (they have ``__array__``).
- :class:`Array`: an array that a function hands back in kind (a NumPy
  ``ndarray``, a torch ``Tensor``, a JAX ``Array``): anything with a shape,
  a dtype and the DLPack protocol; :data:`TensorT`, the torch Tensors and
  JAX Arrays among them.  ``apply_rope(x)`` is typed as returning
  the type of ``x`` when ``x`` is one, and ``NDArray`` for other array-likes
  (lists, scalars).
- :data:`DTypeLike`: NumPy's dtype-likes (``"float32"``, ``np.float16``,
  ``ml_dtypes.bfloat16``) or a torch dtype (:class:`TorchDType`, by its
  attributes).
- :data:`RopeScaling`: what ``scaling=`` reads, which is duck-typed: a
  ``rope_scaling`` / ``rope_parameters`` dict, a config.json dict, or a
  config object (transformers' ``PretrainedConfig`` or anything with
  ``rope_parameters`` / ``rope_scaling`` attributes).  Any object is
  accepted by the type checker; the run-time check names what is wrong.

The names are for annotations only; posenc's functions check their
arguments at run time whatever a type checker said.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Protocol, TypeVar, Union

import numpy as np
from numpy.typing import ArrayLike, NDArray
from numpy.typing import DTypeLike as _NumpyDTypeLike

__all__ = [
    "Array",
    "ArrayLike",
    "ArrayT",
    "DTypeLike",
    "Float64Array",
    "NDArray",
    "PathLike",
    "RopeScaling",
    "ScalarT",
    "TensorT",
    "TorchDType",
]


class Array(Protocol):
    """An array posenc returns in kind: a NumPy ndarray, a torch Tensor, a JAX Array."""

    @property
    def shape(self) -> Any: ...

    @property
    def dtype(self) -> Any: ...

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...

    def __dlpack_device__(self) -> Any: ...


#: The type of an argument that the result follows (``apply_rope``'s ``x``).
ArrayT = TypeVar("ArrayT", bound=Array)


class _TorchTensor(Array, Protocol):
    """A torch Tensor, recognised by an attribute a NumPy array lacks."""

    @property
    def requires_grad(self) -> bool: ...


class _JaxArray(Protocol):
    """A JAX Array, recognised by an attribute a NumPy array lacks (JAX's
    own stubs do not declare ``__dlpack_device__``, which it has)."""

    @property
    def shape(self) -> Any: ...

    @property
    def dtype(self) -> Any: ...

    @property
    def sharding(self) -> Any: ...

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...


#: The type of an argument that the result follows where a NumPy array's
#: result is a new ``NDArray`` of its own dtype (``sinusoid``'s positions,
#: ``xl_position_term``'s ``q``): a torch Tensor or a JAX Array.  A NumPy
#: array does not match it, so one overload for ``TensorT`` and one for
#: ``ArrayLike`` type every call.
TensorT = TypeVar("TensorT", bound=Union[_TorchTensor, _JaxArray])

#: The scalar type of a NumPy array whose result keeps its dtype.
ScalarT = TypeVar("ScalarT", bound=np.generic)


class TorchDType(Protocol):
    """A torch dtype (``torch.float16``, ``torch.bfloat16``), recognised by its attributes."""

    @property
    def is_floating_point(self) -> bool: ...

    @property
    def itemsize(self) -> int: ...


#: ``dtype=``: a NumPy dtype, its name or scalar type, or a torch dtype.
DTypeLike = Union[_NumpyDTypeLike, TorchDType]

#: ``scaling=``: a dict, or a config object read by its attributes (any object).
RopeScaling = Union[Mapping[str, Any], object]

#: A file system path.
PathLike = Union[str, os.PathLike[str]]

#: float64 NumPy array (frequencies, slopes, probe results).
Float64Array = NDArray[np.float64]
