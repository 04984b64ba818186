"""A table read from any source the probes take: a file or a model directory
(through :mod:`._readers`), a Hub name (through :mod:`.hub`), a state dict,
a model or an array (:func:`load_table`).

posenc.probe.checkpoints' :func:`~posenc.probe.load_position_embeddings` and
the ``posenc probe`` command load their tables here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Optional, Tuple

import numpy as np

from . import hub
from ._readers import _flatten, _NpyFile, _open_path, choose_key
from ._tables import _check_rows


def local_config(path: str) -> Optional[dict]:
    """The ``config.json`` of a model directory, or the one beside a file
    (None where there is none, or it holds no JSON object); a ValueError
    naming the file where it cannot be read as JSON."""
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    config_path = os.path.join(folder, "config.json")
    if not os.path.isfile(config_path):
        return None
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{config_path}: not a readable JSON config ({exc})") from exc
    return config if isinstance(config, dict) else None


def load_table(
    source: Any,
    key: Optional[str] = None,
    *,
    max_rows: Optional[int] = None,
    **hub_limits: Any,
) -> Tuple[Any, Optional[str]]:
    """``(table, key_used)``; `key_used` is None for a bare array.

    With `max_rows`, a file whose header gives the table's shape (``.npy``,
    ``.npz``, ``.safetensors``) is refused before its data is read when the
    table has more rows (the command line's bound).  `hub_limits`
    (``timeout``, ``deadline``, ``max_bytes``) are a Hub name's, checked
    whatever the source."""
    hub.check_limits(**hub_limits)
    if isinstance(source, str) and hub.is_hub_name(source):
        fetched = hub.fetch(source, key=key, max_rows=max_rows, **hub_limits)
        return fetched.table, fetched.key
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        stored = _open_path(path)
        where = path
        if isinstance(stored, _NpyFile):
            if key is not None:
                raise ValueError(f"key: {path} holds a single array, so key must be None")
            _check_declared_rows(stored.shape, f"the table in {path}", max_rows)
            return stored.read(), None
    elif isinstance(source, Mapping):
        stored, where = _flatten(source), "the state dict"
    elif callable(getattr(source, "state_dict", None)):
        stored, where = source.state_dict(), f"the {type(source).__name__}'s state dict"
    elif isinstance(source, np.ndarray) or hasattr(source, "__array__"):
        if key is not None:
            raise ValueError("key: source is an array, so key must be None")
        return source, None
    else:
        raise TypeError(
            "source must be a path, a state dict, a model with state_dict() or an array, "
            f"not {type(source).__name__}"
        )
    used = choose_key(list(stored.keys()), key, where)
    if max_rows is not None and callable(getattr(stored, "shape", None)):
        _check_declared_rows(stored.shape(used), f"the table in {where} [{used}]", max_rows)
    return stored[used], used


def _check_declared_rows(shape, name, max_rows):
    if shape is not None and len(shape) == 2:
        _check_rows(shape[0], name, max_rows)
