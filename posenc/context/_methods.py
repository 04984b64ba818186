"""A scaling method applied to a loaded model for the length of a ``with``
block: the one place the measurements change a model.

``"none"`` is the model as loaded, not patched at all; any other method (a
short string such as ``"yarn:4"``, a rope dict, a transformers config) is
applied by ``posenc.hf.patch(model, scaling=method)`` on the instance
itself, and removed by ``posenc.hf.unpatch(model)`` when the block ends,
however it ends: the methods of a comparison run in turn on one instance,
never a reload.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

#: The method that leaves the model as loaded.
NONE = "none"


@contextlib.contextmanager
def with_method(model: Any, method: Any) -> Iterator[Any]:
    """Within this block, `model` computes its rotary tables with `method`;
    yields the model to run (`model` itself)."""
    if isinstance(method, str) and method == NONE:
        yield model
        return
    from .. import hf

    patch: Any = hf.patch  # its scaling= is read by hf.patch itself
    patch(model, scaling=method)
    try:
        yield model
    finally:
        hf.unpatch(model)
