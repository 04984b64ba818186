"""A scaling method applied to a loaded model for the length of a ``with``
block: the one place the measurements change a model.

``"none"`` is the model as loaded, not patched at all; any other method (a
short string such as ``"yarn:4"``, a rope dict, a transformers config) is
prepared once by ``posenc.hf.prepare(model, scaling=method)`` (built,
checked, refused before anything runs if it cannot apply), applied to the
instance itself for the block, and removed by ``posenc.hf.unpatch(model)``
when the block ends, however it ends: the methods of a comparison run in
turn on one instance, never a reload.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

#: The method that leaves the model as loaded.
NONE = "none"


def prepared(model: Any, method: Any) -> Optional[Any]:
    """`method` built and checked for `model` (None for ``"none"``); raises
    as ``posenc.hf.patch`` does for a method that cannot apply."""
    if isinstance(method, str) and method == NONE:
        return None
    from .. import hf

    prepare: Any = hf.prepare  # its scaling= is read by hf.prepare itself
    return prepare(model, scaling=method)


@contextlib.contextmanager
def with_method(model: Any, ready: Optional[Any]) -> Iterator[Any]:
    """Within this block, `model` computes its rotary tables with the
    method `ready` (from :func:`prepared`; None: as loaded); yields the
    model to run (`model` itself)."""
    if ready is None:
        yield model
        return
    from .. import hf

    ready.apply()
    try:
        yield model
    finally:
        hf.unpatch(model)
