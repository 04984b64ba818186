"""Where a call goes when it is handed a PyTorch or JAX object.

Every public function is written for NumPy.  :func:`accepts_tensors`
wraps it so that a call whose arguments include a torch tensor, a torch
dtype or ``device=`` goes to :mod:`posenc._torch`, and one with a JAX array
(or a tracer of ``jax.jit``) to :mod:`posenc._jax`; those modules convert
the arguments, run the NumPy function and convert its result back.  A call with
NumPy arrays and Python values only costs one type check per argument, and
neither torch nor JAX is ever imported by posenc itself: an object of theirs
can only reach a call once the caller has imported them.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, TypeVar

import numpy as np

from . import _records

_F = TypeVar("_F", bound=Callable[..., Any])

# the top-level packages whose objects a call is routed for; a JAX array's
# type lives in jaxlib, a tracer's in jax
_TORCH = ("torch",)
_JAX = ("jax", "jaxlib")
# values never routed (containers are read by NumPy, or are scaling dicts)
_PLAIN = (np.ndarray, int, float, str, bool, type(None), np.dtype, dict, list, tuple)


def library(value):
    """'torch', 'jax' or None: which foreign library `value` belongs to."""
    if hasattr(value, "__torch_function__"):  # tensors (also as torch.compile traces them)
        return "torch"
    module = type(value).__module__
    top = module.partition(".")[0]
    if top in _TORCH:
        return "torch"
    if top in _JAX:
        return "jax"
    return None


def _route(args, kwargs):
    found = None
    for value in (*args, *kwargs.values()):
        if isinstance(value, _PLAIN):
            continue
        lib = library(value)
        if lib is not None and found is not None and lib != found:
            raise TypeError(
                "arguments mix PyTorch and JAX objects; convert them to one library first"
            )
        found = lib or found
    if found is None and kwargs.get("device") is not None:
        found = "torch"
    return found


_torch_call = None


def _load_torch():
    """posenc._torch.call, imported on the first call that needs it."""
    global _torch_call
    from . import _torch

    _torch_call = _torch.call
    return _torch_call


def _torch_ready():
    """True, once posenc._torch.call is in `_torch_call` (imported on first use).

    torch.compile (Dynamo) guards on every global a compiled function
    reads: had it read `_torch_call` while it was still None, a function
    compiled on posenc's first torch call would be compiled again on its
    second (and fail under fullgraph=True at the recompilation limit, with
    threads making that second call together).  This function is marked
    as ``torch.compiler.assume_constant_result`` marks one, without
    importing torch: Dynamo calls it while tracing, before the wrapper
    reads `_torch_call`, and keeps its result as a constant, so that what
    a compiled graph guards on is set before it is read and never changes
    after."""
    if _torch_call is None:
        _load_torch()
    return True


_torch_ready._dynamo_marked_constant = True  # type: ignore[attr-defined]


def accepts_tensors(fn: _F) -> _F:
    """`fn`, taking torch tensors and JAX arrays as well as NumPy arrays.

    `fn` is registered in posenc._records, where the adapters find it by
    its name (that of its record).  The wrapper's signature is `fn`'s
    with a keyword-only ``device=None`` last (the one every routed
    function takes: a torch device asks for torch tensors), so help() and
    inspect see the parameters a call accepts, and type checkers `fn`'s
    annotations.
    """
    signature = inspect.signature(fn)
    _records.register(fn)  # the adapters find it there by name

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        lib = _route(args, kwargs)
        if lib is None:
            if "device" in kwargs:
                kwargs.pop("device")
            return fn(*args, **kwargs)
        if lib == "torch":
            _torch_ready()  # first: see there
            return _torch_call(fn, signature, args, kwargs)
        from . import _jax

        return _jax.call(fn, signature, args, kwargs)

    wrapper.__wrapped_numpy__ = fn  # type: ignore[attr-defined]
    wrapper.__signature__ = _records.with_device(signature)  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]
