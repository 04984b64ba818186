"""Calls with JAX objects (see posenc._interop)."""

from __future__ import annotations

import numpy as np


def call(fn, signature, args, kwargs):
    # CPU tensors read through NumPy; the result is NumPy
    kwargs.pop("device", None)
    convert = lambda a: np.asarray(a) if type(a).__module__.startswith("jax") else a  # noqa: E731
    return fn(*map(convert, args), **{k: convert(a) for k, a in kwargs.items()})
